"""PhalanxJobs in `phalanx simulate`: a workload file may hold PhalanxJob objects (examples/phalanx-job.yaml).

A job becomes, when the workload is read, what phalanx-controller would create for it (the same
phalanx.jobs code: its first reconcile's plan, so the leader comes first, then the workers, and its gang is
the Volcano PodGroup of leader + minWorkersNum), at the job's creation time. A pod's run time is its
template's `simulation.phalanx.dev/duration`, as for any simulated pod. The simulator has no admission, so
a pod's priority is written as spec.priority (the PriorityClass's value, n) rather than looked up.

After the run, each job's stages are the controller's rules (phalanx.jobs.reconcile) replayed at every
virtual instant one of its pods was bound, started or finished: Pending, Starting, Running, Succeeded, with
the job's wait (arrival to Running) and run (Running to Succeeded) times in the report's `jobs`.

Not simulated: what the controller does back to the cluster after the start. Nothing in the simulator
fails a pod, so there are no restarts; and cleanPodPolicy's deletions when the leader ends do not end the
workers early (each runs its own duration).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from phalanx.jobs import api, objects
from phalanx.jobs.reconcile import PodView, reconcile


@dataclass
class SimJob:
    namespace: str
    name: str
    obj: dict[str, Any]  # the job, with the uid its pods' owner references name
    arrival: float = 0.0
    pods: list[str] = field(default_factory=list)  # namespace/name, the leader first

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def expand(job: Mapping[str, Any], scheduler_name: str = "phalanx") -> tuple[SimJob, list[dict[str, Any]]]:
    """The PodGroup and pods phalanx-controller would create for `job`, in the order it would; JobSpecError
    names the field of a job it would refuse."""
    obj = copy.deepcopy(dict(job))
    meta = obj.setdefault("metadata", {})
    meta.setdefault("namespace", "default")
    meta.setdefault("uid", f"sim-{meta['namespace']}-{meta.get('name')}")
    spec = api.parse_spec(obj)
    plan = reconcile(obj, {}, service=False, podgroup=False, now="")
    if plan.spec is None:  # parse_spec above raised already; the plan agrees
        raise api.JobSpecError("spec", "refused")
    sim = SimJob(str(meta["namespace"]), str(meta["name"]), obj)
    created: list[dict[str, Any]] = [objects.podgroup(obj, spec)]
    roles = {n: (role, i) for n, role, i in objects.desired_pods(sim.name, spec)}
    for pod_name, restarts in plan.create:
        role, index = roles[pod_name]
        pod = objects.pod(obj, spec, role, index, restarts=restarts, scheduler_name=scheduler_name)
        pod["spec"]["priority"] = spec.priority  # the class's value: no admission fills it in here
        pod["spec"].pop("priorityClassName", None)
        created.append(pod)
        sim.pods.append(f"{sim.namespace}/{pod_name}")
    stamp = meta.get("creationTimestamp")
    if stamp is not None:
        for o in created:
            o["metadata"]["creationTimestamp"] = stamp
    return sim, created


def timelines(jobs: list[SimJob], tracks: Mapping[str, Any], end: float) -> list[dict[str, Any]]:
    """Each job's stages over the run: the controller's rules replayed at each instant its pods changed.
    `tracks`: the simulation's pod tracks (bound_at, started_at, finished_at)."""
    out = []
    for job in jobs:
        mine = [tracks[k] for k in job.pods if k in tracks]
        instants = sorted(
            {job.arrival} | {t for p in mine for t in (p.bound_at, p.started_at, p.finished_at) if t is not None}
        )
        obj = copy.deepcopy(job.obj)
        # Created: Pending, before anything is bound (its pods may bind in the instant they arrive).
        first = reconcile(obj, {p.name: _view(p, None) for p in mine}, service=True, podgroup=True, now="")
        obj["status"] = first.status
        stages = [{"stage": first.status["stage"], "at": job.arrival, "scheduleState": first.status["scheduleState"]}]
        for at in instants:
            views = {p.name: _view(p, at) for p in mine}
            plan = reconcile(obj, views, service=True, podgroup=True, now=f"{at:.3f}")
            obj["status"] = plan.status
            stage = str(plan.status["stage"])
            if not stages or stages[-1]["stage"] != stage:
                stages.append({"stage": stage, "at": at, "scheduleState": plan.status["scheduleState"]})
        running = next((s["at"] for s in stages if s["stage"] == api.Stage.RUNNING.value), None)
        done = next((s["at"] for s in stages if s["stage"] in (api.Stage.SUCCEEDED, api.Stage.FAILED)), None)
        out.append(
            {
                "namespace": job.namespace,
                "name": job.name,
                "stage": stages[-1]["stage"] if stages else api.Stage.PENDING.value,
                "stages": stages,
                "arrival": job.arrival,
                "waitSeconds": None if running is None else round(running - job.arrival, 6),
                "runSeconds": None if running is None or done is None else round(done - running, 6),
                "pods": len(job.pods),
            }
        )
    return out


def _view(track: Any, at: float | None) -> PodView:
    """The pod as the controller would see it at `at` (None: as created)."""
    if at is None:
        return PodView(track.name, f"sim-{track.namespace}-{track.name}", "Pending", "", False, False)
    node = track.node if track.bound_at is not None and track.bound_at <= at else ""
    if track.finished_at is not None and track.finished_at <= at:
        phase = "Succeeded"
    elif track.started_at is not None and track.started_at <= at:
        phase = "Running"
    else:
        phase = "Pending"
    return PodView(track.name, f"sim-{track.namespace}-{track.name}", phase, node or "", phase == "Running", False)
