"""PhalanxJobs in `phalanx simulate`: a workload file may hold PhalanxJob objects (examples/phalanx-job.yaml,
examples/phalanx-job-restarts.yaml).

A job becomes, when the workload is read, what phalanx-controller would create for it (the same
phalanx.jobs code: its first reconcile's plan, so the leader comes first, then the workers, in the same
pass, at the same instant, as the controller creates them; its gang is the Volcano PodGroup of leader +
minWorkersNum), at the job's creation time. A pod's run time is its template's
`simulation.phalanx.dev/duration`, as for any simulated pod. The simulator has no admission, so a pod's
priority is written as spec.priority (the PriorityClass's value, n) rather than looked up.

During the run the simulator plays the controller on the virtual clock (phalanx.sim.driver calls `observe`
whenever one of a job's pods is created, bound, started, finished, failed or preempted): the controller's
own rules (phalanx.jobs.reconcile) decide, at that instant, the job's stage and what to delete and create,
and the driver does it at that instant:
- a pod that fails (see below) or is preempted is a lost pod: its restart is counted, it is deleted and
  recreated under its name (Rescheduling), and the new pod goes through the scheduler again (all-or-nothing
  if its gang fell below its minimum); past restartLimit the job is Failed;
- when the leader succeeds (Succeeded) or the job fails, the pods cleanPodPolicy names end at that instant,
  their capacity freed for the pods waiting.

Failures. The job's annotation `simulation.phalanx.dev/failures` (a simulator-only field, like the pods'
duration) is a YAML list of `{pod: <place>, after: <duration>, times: <n>}`: the pod `<job>-<place>` (the
leader's name, or `<set>-<index>`) fails `after` its start (a Go duration or seconds), the first `times`
times it starts (default 1). A pod whose run ends before its failure is due succeeds; a failure not used
is dropped. Errors name the field: `metadata.annotations[simulation.phalanx.dev/failures][0].after: ...`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from phalanx.intake.fields import duration_seconds
from phalanx.jobs import api, objects
from phalanx.jobs.reconcile import Plan, PodView, reconcile

SIM_FAILURES = "simulation.phalanx.dev/failures"
FAILURES_FIELD = f"metadata.annotations[{SIM_FAILURES}]"
_FAILURE_KEYS = ("pod", "after", "times")


@dataclass
class SimJob:
    namespace: str
    name: str
    obj: dict[str, Any]  # the job, with the uid its pods' owner references name; its status as last reconciled
    spec: api.JobSpec
    scheduler_name: str
    arrival: float = 0.0
    pods: list[str] = field(default_factory=list)  # namespace/name, the leader first
    failures: dict[str, list[float]] = field(default_factory=dict)  # pod key -> failures due, the next first
    stages: list[dict[str, Any]] = field(default_factory=list)  # each stage entered: stage, at, scheduleState
    created: list[dict[str, Any]] = field(default_factory=list)  # each pod created: pod, at (in order)
    creating: set[str] = field(default_factory=set)  # pods to be created at this instant (asked, not yet made)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def status(self) -> Mapping[str, Any]:
        return self.obj.get("status") or {}


def parse_failures(job: Mapping[str, Any], spec: api.JobSpec) -> dict[str, list[float]]:
    """The job's planned failures by pod name; JobSpecError names the field of one it cannot use."""
    raw = ((job.get("metadata") or {}).get("annotations") or {}).get(SIM_FAILURES)
    if raw is None:
        return {}
    if isinstance(raw, str):
        try:
            raw = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise api.JobSpecError(FAILURES_FIELD, f"not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(raw, list):
        raise api.JobSpecError(FAILURES_FIELD, "must be a list of {pod, after, times}")
    name = str(job["metadata"]["name"])
    places = {n.removeprefix(f"{name}-"): n for n, _, _ in objects.desired_pods(name, spec)}
    out: dict[str, list[float]] = {}
    for i, item in enumerate(raw):
        where = f"{FAILURES_FIELD}[{i}]"
        if not isinstance(item, Mapping):
            raise api.JobSpecError(where, "must be a mapping {pod, after, times}")
        unknown = sorted(str(k) for k in item if k not in _FAILURE_KEYS)
        if unknown:
            raise api.JobSpecError(f"{where}.{unknown[0]}", f"unknown field (known: {', '.join(_FAILURE_KEYS)})")
        place = item.get("pod")
        if not isinstance(place, str) or not place:
            raise api.JobSpecError(f"{where}.pod", "required (the leader's name, or <worker set>-<index>)")
        pod = places.get(place) or (place if place in places.values() else None)
        if pod is None:
            raise api.JobSpecError(f"{where}.pod", f"{place!r} is not a pod of this job ({', '.join(places)})")
        if "after" not in item:
            raise api.JobSpecError(f"{where}.after", "required (a duration: how long after its start it fails)")
        try:
            after = duration_seconds(item["after"])
        except ValueError as exc:
            raise api.JobSpecError(f"{where}.after", str(exc)) from None
        times = item.get("times", 1)
        if isinstance(times, bool) or not isinstance(times, int) or times < 1:
            raise api.JobSpecError(f"{where}.times", f"{times!r} must be an integer, at least 1")
        out.setdefault(pod, []).extend([after] * times)
    return out


def expand(job: Mapping[str, Any], scheduler_name: str = "phalanx") -> tuple[SimJob, list[dict[str, Any]]]:
    """The PodGroup and pods phalanx-controller would create for `job`, in the order it would; JobSpecError
    names the field of a job it would refuse (or of its planned failures)."""
    obj = copy.deepcopy(dict(job))
    meta = obj.setdefault("metadata", {})
    meta.setdefault("namespace", "default")
    meta.setdefault("uid", f"sim-{meta['namespace']}-{meta.get('name')}")
    spec = api.parse_spec(obj)
    failures = parse_failures(obj, spec)
    plan = reconcile(obj, {}, service=False, podgroup=False, now="")
    if plan.spec is None:  # parse_spec above raised already; the plan agrees
        raise api.JobSpecError("spec", "refused")
    sim = SimJob(str(meta["namespace"]), str(meta["name"]), obj, spec, scheduler_name)
    sim.failures = {f"{sim.namespace}/{p}": afters for p, afters in failures.items()}
    created: list[dict[str, Any]] = [objects.podgroup(obj, spec)]
    for pod_name, restarts in plan.create:
        created.append(pod_body(sim, pod_name, restarts))
        sim.pods.append(f"{sim.namespace}/{pod_name}")
    stamp = meta.get("creationTimestamp")
    if stamp is not None:
        for o in created:
            o["metadata"]["creationTimestamp"] = stamp
    return sim, created


def pod_body(job: SimJob, pod_name: str, restarts: int) -> dict[str, Any]:
    """The pod the controller creates for place `pod_name`."""
    roles = {n: (role, i) for n, role, i in objects.desired_pods(job.name, job.spec)}
    role, index = roles[pod_name]
    pod = objects.pod(job.obj, job.spec, role, index, restarts=restarts, scheduler_name=job.scheduler_name)
    pod["spec"]["priority"] = job.spec.priority  # the class's value: no admission fills it in here
    pod["spec"].pop("priorityClassName", None)
    return pod


def uid(track: Any) -> str:
    return f"sim-{track.namespace}-{track.name}-{track.incarnation}"


def view(track: Any, at: float) -> PodView | None:
    """The pod as the controller sees it at `at`; None once deleted. `track`: the driver's PodTrack."""
    if track.deleted_at is not None and track.deleted_at <= at:
        return None
    node = track.node if track.bound_at is not None and track.bound_at <= at else ""
    if track.finished_at is not None and track.finished_at <= at:
        phase = "Failed" if track.ended == "Failed" or track.preempted_by else "Succeeded"
    elif track.started_at is not None and track.started_at <= at:
        phase = "Running"
    else:
        phase = "Pending"
    return PodView(track.name, uid(track), phase, node or "", phase == "Running", False)


def observe(job: SimJob, tracks: Mapping[str, Any], at: float) -> Plan:
    """One reconcile of `job` at virtual time `at`, its pods as `tracks` (pod key -> current PodTrack) show
    them; the job's status and stages are updated, the plan (what to delete and create) returned."""
    views = {v.name: v for k in job.pods if k in tracks and (v := view(tracks[k], at)) is not None}
    plan = reconcile(job.obj, views, service=True, podgroup=True, now=f"{at:.3f}")
    job.obj["status"] = plan.status
    stage = str(plan.status["stage"])
    if not job.stages or job.stages[-1]["stage"] != stage:
        message = next(
            (str(c.get("message") or "") for c in plan.status.get("conditions") or [] if c.get("type") == stage), ""
        )
        job.stages.append({"stage": stage, "at": at, "scheduleState": plan.status["scheduleState"], "message": message})
    plan.create = [(n, r) for n, r in plan.create if n not in job.creating]
    return plan


def report(jobs: list[SimJob]) -> list[dict[str, Any]]:
    """The report's `jobs`: each job's stages as the controller took it through them on the virtual clock,
    its wait (arrival to Running), run (first Running to Succeeded or Failed), restarts and pods created."""
    out = []
    for job in jobs:
        stages = job.stages or [
            {"stage": api.Stage.PENDING.value, "at": job.arrival, "scheduleState": "Unscheduled", "message": ""}
        ]
        running = next((s["at"] for s in stages if s["stage"] == api.Stage.RUNNING.value), None)
        done = next((s["at"] for s in stages if s["stage"] in (api.Stage.SUCCEEDED, api.Stage.FAILED)), None)
        status = job.status
        places = [status.get("leader") or {}, *(status.get("workers") or [])]
        out.append(
            {
                "namespace": job.namespace,
                "name": job.name,
                "stage": stages[-1]["stage"],
                "message": stages[-1]["message"],
                "stages": stages,
                "arrival": job.arrival,
                "waitSeconds": None if running is None else round(running - job.arrival, 6),
                "runSeconds": None if running is None or done is None else round(done - running, 6),
                "restarts": int(status.get("restarts") or 0),
                "podRestarts": {str(p["name"]): int(p["restarts"]) for p in places if p.get("restarts")},
                "pods": len(job.pods),
                "created": job.created,
            }
        )
    return out
