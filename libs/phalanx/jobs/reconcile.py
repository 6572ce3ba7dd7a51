"""One reconcile of a PhalanxJob as a pure function: what the cluster shows (the job, its pods, whether its
Service and PodGroup exist) in, what to do (create, delete) and the job's new status out. The controller
service applies the plan; tests call this directly.

Seed 001's workflow, on Phalanx (whose scheduler places pods, not jobs, so a job's pods exist before they
are scheduled):
- Pending: the leader is created first, then the workers (one gang: leader + MinWorkersNum workers); no pod
  is bound yet (Unscheduled).
- Starting: the gang is bound (ScheduledPartly, or ScheduledSucceed when every pod is); waiting for the
  leader and MinWorkersNum workers to be Ready.
- Running: the leader and at least MinWorkersNum workers Ready; workers beyond the minimum are bound as
  capacity frees, and any missing pod is created.
- Rescheduling: a pod that had been bound was lost (failed, evicted, deleted, its node gone); its place's
  restart is counted, the failed pod deleted and a new one created under the same name; back to Running
  once the leader and the minimum are Ready again and every place has a pod.
- Succeeded: the leader succeeded, or spec.terminating. Failed: the leader's restarts, or a worker set's
  (summed over its workers), exceed RestartLimit; or the API server refuses the job's pods
  (ScheduledFailed). Then the pods are deleted as CleanPodPolicy says.

Crash safety. The only memory is the job's status, written before the actions it justifies: a restart is
counted (with the uid of the lost pod, so a second look at the same loss counts nothing) in the status the
controller writes before it deletes or recreates anything, and a pod is only ever created when no pod of its
name exists. Everything else (stage, schedule state, pods) is recomputed from the cluster each time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from phalanx.jobs.api import FINISHED, CleanPodPolicy, JobSpec, JobSpecError, ScheduleState, Stage, parse_spec
from phalanx.jobs.objects import desired_pods

# Status condition types.
COND_VALID = "Valid"
COND_CREATE_FAILED = "PodCreateFailed"


@dataclass(frozen=True)
class PodView:
    """What the controller reads of one of the job's pods."""

    name: str
    uid: str
    phase: str  # status.phase ("" before the API server sets it)
    node: str
    ready: bool
    deleting: bool

    @staticmethod
    def of(pod: Mapping[str, Any]) -> PodView:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        conditions = status.get("conditions") or []
        return PodView(
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            phase=str(status.get("phase") or ""),
            node=str((pod.get("spec") or {}).get("nodeName") or ""),
            ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions),
            deleting=bool(meta.get("deletionTimestamp")),
        )


@dataclass
class Plan:
    spec: JobSpec | None
    status: dict[str, Any]
    create_podgroup: bool = False
    create_service: bool = False
    create: list[tuple[str, int]] = field(default_factory=list)  # (pod name, restarts), the leader first
    delete: list[tuple[str, str]] = field(default_factory=list)  # (pod name, uid)
    counted: list[str] = field(default_factory=list)  # places whose restart this plan counts


def reconcile(
    job: Mapping[str, Any],
    pods: Mapping[str, PodView],
    *,
    service: bool,
    podgroup: bool,
    now: str,
    create_error: str = "",
) -> Plan:
    """`pods`: the job's pods by name (its label). `create_error`: the API server's refusal of a pod of this
    job in the last reconcile (final: an invalid template), from the controller."""
    old: Mapping[str, Any] = job.get("status") or {}
    status: dict[str, Any] = {k: v for k, v in old.items()}
    status.setdefault("stage", Stage.PENDING.value)
    status.setdefault("scheduleState", ScheduleState.UNSCHEDULED.value)
    status["observedGeneration"] = (job.get("metadata") or {}).get("generation")
    try:
        spec = parse_spec(job)
    except JobSpecError as exc:
        # Nothing is created; a corrected spec (the CRD's spec is mutable) runs.
        set_condition(status, COND_VALID, False, "InvalidSpec", str(exc), now)
        return Plan(None, status)
    set_condition(status, COND_VALID, True, "Valid", "", now)
    name = str(job["metadata"]["name"])
    places = desired_pods(name, spec)
    entries = {e["name"]: dict(e) for e in [old.get("leader") or {}, *(old.get("workers") or [])] if e.get("name")}
    plan = Plan(spec, status)

    stage = Stage(status["stage"])
    if stage in FINISHED:
        plan.delete = _cleanup(spec.clean_pod_policy, pods)
        _write_pods(status, places, entries, pods)
        return plan

    leader_name = places[0][0]
    leader = pods.get(leader_name)
    finished: tuple[Stage, str, str] | None = None
    if spec.terminating:
        finished = (Stage.SUCCEEDED, "Terminated", "spec.terminating is true")
    elif leader is not None and leader.phase == "Succeeded":
        finished = (Stage.SUCCEEDED, "LeaderSucceeded", f"the leader {leader_name} succeeded")
    elif create_error:
        status["scheduleState"] = ScheduleState.SCHEDULED_FAILED.value
        finished = (Stage.FAILED, "ScheduledFailed", create_error)

    if finished is None:
        for pod_name_, _, _ in places:
            pod = pods.get(pod_name_)
            entry = entries.setdefault(pod_name_, {"name": pod_name_, "restarts": 0})
            lost, had_node = "", False
            if pod is not None and pod.phase == "Failed":
                lost, had_node = pod.uid, bool(pod.node)
                if not pod.deleting:
                    plan.delete.append((pod_name_, pod.uid))
            elif pod is not None and pod.deleting and pod.phase != "Succeeded":
                lost, had_node = pod.uid, bool(pod.node)
            elif pod is None and entry.get("uid"):
                lost, had_node = str(entry["uid"]), bool(entry.get("node"))
            if lost and lost != entry.get("lostUid"):
                entry["lostUid"] = lost
                if had_node:  # a pod that never ran is recreated without counting a restart
                    entry["restarts"] = int(entry.get("restarts") or 0) + 1
                    plan.counted.append(pod_name_)
        over = _over_limit(spec, places, entries)
        if over:
            finished = (Stage.FAILED, "RestartLimitExceeded", over)

    if finished is not None:
        new_stage, reason, message = finished
        status.setdefault("completionTime", now)
        _enter(status, new_stage, reason, message, now)
        plan.delete = _cleanup(spec.clean_pod_policy, pods)
        _write_pods(status, places, entries, pods)
        return plan

    plan.create_podgroup = not podgroup
    plan.create_service = not service
    gone = {n for n, _, _ in places if n not in pods or pods[n].phase == "Failed"}
    # A worker that succeeded keeps its place; a pod being deleted is recreated once it is gone.
    plan.create = [(n, int(entries[n].get("restarts") or 0)) for n, _, _ in places if n not in pods]
    # A pod whose place the spec no longer has (its worker set shrank or went) is deleted.
    names = {n for n, _, _ in places}
    plan.delete += [(n, p.uid) for n, p in sorted(pods.items()) if n not in names and not p.deleting]

    live = {n: p for n, p in pods.items() if not p.deleting and p.phase != "Failed"}
    bound = [n for n, _, _ in places if n in live and live[n].node]
    worker_names = [n for n, _, _ in places[1:]]
    ready_workers = sum(1 for n in worker_names if n in live and live[n].ready and live[n].phase == "Running")
    leader_ready = leader_name in live and live[leader_name].ready and live[leader_name].phase == "Running"
    succeeded_workers = sum(1 for n in worker_names if n in pods and pods[n].phase == "Succeeded")
    # A worker that finished its part keeps its place (it is not recreated), so it counts toward the minimum:
    # otherwise a job whose worker ends before its leader would fall back from Running to Starting.
    running_ok = leader_ready and ready_workers + succeeded_workers >= spec.min_workers
    if not bound:
        schedule = ScheduleState.UNSCHEDULED
    elif len(bound) + succeeded_workers >= len(places):
        schedule = ScheduleState.SCHEDULED_SUCCEED
    else:
        schedule = ScheduleState.SCHEDULED_PARTLY
    status["scheduleState"] = schedule.value

    ready = f"the leader and {ready_workers} of {len(worker_names)} workers ready (minimum {spec.min_workers})"
    if plan.counted:
        new, reason, message = Stage.RESCHEDULING, "PodsLost", f"recreating {', '.join(plan.counted)}"
    elif stage == Stage.RESCHEDULING:
        new, reason, message = (Stage.RUNNING if running_ok and not gone else stage), "Ready", ready
    elif running_ok:
        new, reason, message = Stage.RUNNING, "Ready", ready
    elif leader_name in bound:
        new, reason, message = Stage.STARTING, "Scheduled", f"the gang is bound ({schedule.value})"
    else:
        new, reason, message = Stage.PENDING, "Unscheduled", "waiting for the gang to be scheduled"
    if new == Stage.RUNNING:
        status.setdefault("startTime", now)
    if new != stage or plan.counted:
        _enter(status, new, reason, message, now)
    _write_pods(status, places, entries, pods)
    return plan


def _over_limit(spec: JobSpec, places: list[tuple[str, Any, int]], entries: Mapping[str, Any]) -> str:
    """Why the job failed for its restarts, or ""."""
    leader = places[0][0]
    restarts = int(entries.get(leader, {}).get("restarts") or 0)
    if restarts > spec.restart_limit:
        return f"the leader {leader} was restarted {restarts} times (restartLimit {spec.restart_limit})"
    for s in spec.worker_sets:
        total = sum(int(entries.get(n, {}).get("restarts") or 0) for n, role, _ in places[1:] if role is s)
        if total > spec.restart_limit:
            return f"worker set {s.name} was restarted {total} times (restartLimit {spec.restart_limit})"
    return ""


def _cleanup(policy: CleanPodPolicy, pods: Mapping[str, PodView]) -> list[tuple[str, str]]:
    if policy == CleanPodPolicy.NONE:
        return []
    out = []
    for name, pod in sorted(pods.items()):
        if pod.deleting:
            continue
        if policy == CleanPodPolicy.ALL or pod.phase in ("Running", "Pending", ""):
            out.append((name, pod.uid))
    return out


def _write_pods(
    status: dict[str, Any],
    places: list[tuple[str, Any, int]],
    entries: dict[str, dict[str, Any]],
    pods: Mapping[str, PodView],
) -> None:
    """status.leader and status.workers: each place's pod now, its restarts, and the uids the controller
    needs to notice a loss (uid) and to count it once (lostUid)."""
    out = []
    for name, role, _ in places:
        entry = entries.setdefault(name, {"name": name, "restarts": 0})
        pod = pods.get(name)
        entry["set"] = role.name
        if pod is not None:
            entry["uid"], entry["node"] = pod.uid, pod.node
            entry["phase"] = "Terminating" if pod.deleting and pod.phase not in ("Succeeded", "Failed") else pod.phase
        else:
            entry["phase"] = "Missing"
        entry.setdefault("restarts", 0)
        out.append({k: entry[k] for k in ("name", "set", "phase", "node", "restarts", "uid", "lostUid") if k in entry})
    status["leader"] = out[0]
    status["workers"] = out[1:]
    status["restarts"] = sum(int(e.get("restarts") or 0) for e in out)


def _enter(status: dict[str, Any], stage: Stage, reason: str, message: str, now: str) -> None:
    """The job's stage, and one condition per stage: the current one True, the others it passed False."""
    status["stage"] = stage.value
    for other in Stage:
        if other != stage and any(c.get("type") == other.value for c in status.get("conditions") or []):
            set_condition(status, other.value, False, reason, message, now)
    set_condition(status, stage.value, True, reason, message, now)


def set_condition(status: dict[str, Any], kind: str, value: bool, reason: str, message: str, now: str) -> None:
    conditions = [dict(c) for c in status.get("conditions") or []]
    want = "True" if value else "False"
    for c in conditions:
        if c.get("type") == kind:
            if c.get("status") != want:
                c["lastTransitionTime"] = now
            c.update(status=want, reason=reason, message=message)
            break
    else:
        conditions.append(
            {"type": kind, "status": want, "reason": reason, "message": message, "lastTransitionTime": now}
        )
    status["conditions"] = conditions
