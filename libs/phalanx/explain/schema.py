"""The JSON and YAML form of `phalanx explain -o json|yaml` (schemaVersion 1).

Keys are fixed; a value that is not known is null, never a missing key. Amounts are numbers in the
resource's base unit (cores, bytes, devices), keyed by resource name. Times are seconds on the source's
clock, named by `clock`: "wall" (Unix time, a cluster) or "virtual" (seconds since the simulation's start,
a report); `...InSeconds` / `waitingSeconds` are relative to `now`.

    schemaVersion: 1
    clock, now, schedulerName
    source:        {kind: cluster, context, namespace}  |  {kind: report, report, workload: [paths]}
    errors:        [text]   objects that could not be read, each naming the object and the field
    notes:         [text]   limits of what was read
    gangs: - namespace, name, state (Waiting | TimedOut | Invalid | Undeclared | Satisfied)
             declaredBy (the declaration form, e.g. podgroup/scheduling.x-k8s.io), mode (Strict | NonStrict)
             verdict            why it waits, in one sentence
             error, waitingFor  a refused declaration / a PodGroup or ConfigMap that does not exist yet
             minMember, totalNumber, pods, bound, pending
             placed             pods reserved for it, as the scheduler last reported
             waitingSince, waitingSeconds       its oldest pending pod's creation
             waitSeconds, timerStarted, timeoutAt   its wait (declared or the scheduler's default), the
                                PodGroup's scheduleStartTime, and their sum
             reason:   {message, reason, at, pod}   the newest PodScheduled=False condition of its pods
             podGroup: {apiGroup, phase, conditions: [{type, status, reason, message}], scheduleStartTime,
                        scheduled, running}
             job:      {stage, scheduleState, restarts, message}   the PhalanxJob it is the gang of, as the
                        job's status says (null for a gang of pods no PhalanxJob made)
             preemption         what the scheduler said about preempting for it: "preempting N lower-priority
                                pod(s): ...; nominated node(s) ...", "preempting: waiting for ...", or
                                "not preempting: <why>"; "" when it said nothing
             deadlock           [gang keys]: the gangs it is deadlocked with, itself first, each waiting
                                for the next to finish (the last for it); [] when it is not
             capacityNote       why `capacity` is null, when it is
             capacity:
               podsToPlace, fitNow      pods that must be placed together, and how many would be now
               perPod, uniform, total   what one pod (the largest) needs, whether all need the same, the sum
               short                    resources the eligible nodes lack, even spread over all of them
               nodesTotal, eligibleNodes
               excluded: [{filter, reason, nodes, details: {node: text}}]
               freeOnEligible           free amounts summed over the eligible nodes
               bestNodes: [{node, free, podsFit}]   the eligible nodes closest to fitting it, best first
               heldBy:    [holder]      what runs on the best nodes
               runsAfter: [holder]      who must finish before it fits (never the gang itself: its own
                                        bound pods stay); [] when it fits now; null when it would not fit
                                        even with every eligible node but its own pods emptied
               runsAt, runsInSeconds    when the last of runsAfter ends (null if unknown)
               fitWhenEmptied           pods that would fit with every holder on the eligible nodes gone
                                        (null when it fits now)
               minResourcesShort: {resource: {wanted, free}}
    holder: {kind (gang | a controller's kind | pod), key, pods, nodes, holds, endsAt, endsInSeconds, endBasis}
"""

from __future__ import annotations

from typing import Any

from phalanx.explain.explanation import CapacityReport, Explanation, GangExplanation, HolderGroup

SCHEMA_VERSION = 1


def amount(milli: int) -> int | float:
    """Milli-units to the base unit; whole numbers stay integers."""
    return milli // 1000 if milli % 1000 == 0 else milli / 1000


def amounts(resources: dict[str, int]) -> dict[str, int | float]:
    return {r: amount(v) for r, v in resources.items()}


def _relative(at: float | None, now: float) -> float | None:
    return None if at is None else round(at - now, 3)


def document(e: Explanation) -> dict[str, Any]:
    return {
        "schemaVersion": SCHEMA_VERSION,
        "clock": e.clock,
        "now": e.now,
        "schedulerName": e.scheduler_name,
        "source": e.source,
        "errors": e.errors,
        "notes": e.notes,
        "gangs": [_gang(g, e.now) for g in e.gangs],
    }


def _gang(g: GangExplanation, now: float) -> dict[str, Any]:
    reason = None
    if g.reason is not None:
        reason = {"message": g.reason.message, "reason": g.reason.reason, "at": g.reason.at, "pod": g.reason_pod}
    podgroup = None
    if g.podgroup is not None:
        pg = g.podgroup
        podgroup = {
            "apiGroup": pg.api_group,
            "phase": pg.phase,
            "conditions": pg.conditions,
            "scheduleStartTime": pg.schedule_start_time,
            "scheduled": pg.scheduled,
            "running": pg.running,
        }
    waited = None if g.waiting_since is None else round(now - g.waiting_since, 3)
    return {
        "namespace": g.namespace,
        "name": g.name,
        "state": str(g.state),
        "declaredBy": g.declared_by,
        "mode": g.mode,
        "verdict": g.verdict,
        "error": g.error,
        "waitingFor": g.waiting_for,
        "minMember": g.min_member,
        "totalNumber": g.total_number,
        "pods": g.pods,
        "bound": g.bound,
        "pending": g.pending,
        "placed": g.placed,
        "waitingSince": g.waiting_since,
        "waitingSeconds": waited,
        "waitSeconds": g.wait_seconds,
        "timerStarted": g.timer_started,
        "timeoutAt": g.timeout_at,
        "reason": reason,
        "podGroup": podgroup,
        "job": None
        if g.job is None
        else {
            "stage": g.job.stage,
            "scheduleState": g.job.schedule_state,
            "restarts": g.job.restarts,
            "message": g.job.message,
        },
        "preemption": g.preemption,
        "deadlock": g.deadlock,
        "capacityNote": g.capacity_note,
        "capacity": _capacity(g.capacity, now) if g.capacity is not None else None,
    }


def _capacity(c: CapacityReport, now: float) -> dict[str, Any]:
    return {
        "podsToPlace": c.pods_to_place,
        "fitNow": c.fit_now,
        "perPod": amounts(c.per_pod),
        "uniform": c.uniform,
        "total": amounts(c.total),
        "short": c.short,
        "nodesTotal": c.nodes_total,
        "eligibleNodes": c.eligible_nodes,
        "excluded": [
            {"filter": x.filter, "reason": x.reason, "nodes": x.nodes, "details": x.details} for x in c.exclusions
        ],
        "freeOnEligible": amounts(c.free_on_eligible),
        "bestNodes": [{"node": n.node, "free": amounts(n.free), "podsFit": n.pods_fit} for n in c.best_nodes],
        "heldBy": [holder(h, now) for h in c.held_by],
        "runsAfter": None if c.runs_after is None else [holder(h, now) for h in c.runs_after],
        "runsAt": c.runs_at,
        "runsInSeconds": _relative(c.runs_at, now),
        "fitWhenEmptied": c.fit_when_emptied,
        "minResourcesShort": {
            r: {"wanted": amount(wanted), "free": amount(free)} for r, (wanted, free) in c.min_resources_short.items()
        },
    }


def holder(h: HolderGroup, now: float) -> dict[str, Any]:
    return {
        "kind": h.kind,
        "key": h.key,
        "pods": h.pods,
        "nodes": h.nodes,
        "holds": amounts(h.holds),
        "endsAt": h.ends_at,
        "endsInSeconds": _relative(h.ends_at, now),
        "endBasis": h.end_basis,
    }
