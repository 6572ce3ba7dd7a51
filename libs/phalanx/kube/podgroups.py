"""The PodGroup APIs Phalanx reads and reports to, and the status each group's users expect to see.

A gang's progress arrives as a GangReport in Phalanx's own phase vocabulary (Pending, Scheduling, Scheduled,
Running, Finished, Failed); each API group gets it in its own words, so `kubectl get podgroups` and the
tools built for scheduler-plugins or Volcano keep working unchanged:

- scheduler-plugins (scheduling.x-k8s.io, scheduling.sigs.k8s.io): phase, scheduled, running, succeeded,
  failed, scheduleStartTime, occupiedBy. Upstream's CRD has no `scheduled`: the binder notices the field
  pruned from the API server's answer and stops sending it.
- Volcano (scheduling.volcano.sh): phase in Pending/Inqueue/Running/Completed/Unknown, and one condition,
  Unschedulable (NotEnoughResources, NotEnoughTasks) or Scheduled; running, succeeded, failed.

Kubernetes' own PodGroup (scheduling.k8s.io/v1alpha2, the Workload API of 1.36, alpha) is read and watched
too (WATCHED_VERSIONS), but gets no report: it is not in VERSIONS, the groups reported to. Its status has
only conditions (PodGroupScheduled, which kube-scheduler sets), and no counters.
"""

from __future__ import annotations

import functools
import math
import uuid
from datetime import datetime, timezone
from enum import StrEnum
from typing import Any, Literal

from phalanx.model import keys
from phalanx.model.binding import GangReport
from phalanx.model.status import GangPhase

PLURAL = "podgroups"
VERSIONS: dict[str, str] = {keys.GROUP_X_K8S: "v1alpha1", keys.GROUP_SIGS: "v1alpha1", keys.GROUP_VOLCANO: "v1beta1"}
# The PodGroup collections the scheduler watches (a 404 means not served: the cluster lacks that CRD, or the
# Workload API, which needs the GenericWorkload gate and scheduling.k8s.io/v1alpha2 enabled, 1.36+).
WATCHED_VERSIONS: dict[str, str] = {**VERSIONS, keys.GROUP_K8S: keys.GROUP_K8S_VERSION}
_SOURCE_PREFIX = "podgroup/"


class VolcanoPhase(StrEnum):
    """Volcano's PodGroup status.phase."""

    PENDING = "Pending"
    INQUEUE = "Inqueue"
    RUNNING = "Running"
    COMPLETED = "Completed"
    UNKNOWN = "Unknown"


# Volcano has no "waiting" or "failed" phase: a waiting gang is admitted (Inqueue); a gang that cannot be
# placed stays Pending, and its Unschedulable condition says why.
_VOLCANO_PHASE: dict[str, VolcanoPhase] = {
    GangPhase.PENDING: VolcanoPhase.PENDING,
    GangPhase.SCHEDULING: VolcanoPhase.INQUEUE,
    GangPhase.SCHEDULED: VolcanoPhase.RUNNING,
    GangPhase.RUNNING: VolcanoPhase.RUNNING,
    GangPhase.FINISHED: VolcanoPhase.COMPLETED,
    GangPhase.FAILED: VolcanoPhase.PENDING,
}
VOLCANO_READY_REASON = "tasks in gang are ready to be scheduled"  # Volcano's own reason for Scheduled


def group_of(source: str) -> str | None:
    """The API group of a gang declared by a PodGroup ("podgroup/<group>"); None for the other forms."""
    if not source.startswith(_SOURCE_PREFIX):
        return None
    group = source[len(_SOURCE_PREFIX) :]
    return group if group in VERSIONS else None


def api_version(group: str) -> str:
    return f"{group}/{VERSIONS[group]}"


@functools.lru_cache(maxsize=4)
def _rfc3339_second(second: int) -> str:
    return datetime.fromtimestamp(second, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339(t: float) -> str:
    """`t` to the second, as the API server writes times (formatted once per second: every Event has two)."""
    return _rfc3339_second(math.floor(t))


def pods_phase(
    min_available: int,
    *,
    live: int,
    placed: int,
    bound: int,
    running: int,
    succeeded: int,
    failed: int,
    previous: str = "",
) -> GangPhase | Literal[""]:
    """The phase a gang's pods imply, derived afresh at every change of them, as scheduler-plugins' PodGroup
    controller derives it (pkg/controllers/podgroup_controller.go), in Phalanx's phase words. `live`: its pods
    not finished (pending or bound); `placed`: of those, reserved or bound; `bound`: bound; `running`,
    `succeeded`, `failed`: by pod phase; `previous`: the phase last derived.

    - Finished: `succeeded` reach the minimum; Failed: some failed, and failed, running and succeeded reach it
      (upstream's final states; here kept only while no pod is live, so a finished job whose pods are
      cleaned up stays Finished, and a job whose pods are recreated is derived again);
    - Running: running and succeeded reach the minimum;
    - Scheduled: bound and succeeded reach it, not running yet (Phalanx's step between the two);
    - below the minimum it goes back: Scheduling while some pods are placed (upstream: while enough pods
      exist; Phalanx says Scheduling only for a gang it is placing, as its scheduler's reports do), else
      Pending. So a gang whose pods were all evicted is Pending, never Running with 0 running.
    "" only without a minimum."""
    if min_available <= 0:
        return ""
    if live == 0 and previous in (GangPhase.FINISHED, GangPhase.FAILED):
        return GangPhase(previous)
    if succeeded >= min_available:
        return GangPhase.FINISHED
    if failed and running + succeeded + failed >= min_available:
        return GangPhase.FAILED
    if running + succeeded >= min_available:
        return GangPhase.RUNNING
    if bound + succeeded >= min_available:
        return GangPhase.SCHEDULED
    return GangPhase.SCHEDULING if placed else GangPhase.PENDING


def status_patch(group: str, report: GangReport, now: float, occupied_by: str = "") -> dict[str, Any]:
    """A JSON merge patch for the status subresource of the gang's PodGroup in `group`. `occupied_by`:
    scheduler-plugins' "namespace/owner,..." of the workloads whose pods form the group."""
    status: dict[str, Any] = {}
    if group == keys.GROUP_VOLCANO:
        if report.phase:
            status["phase"] = str(_VOLCANO_PHASE.get(report.phase, VolcanoPhase.UNKNOWN))
        condition = _volcano_condition(report, now)
        if condition is not None:
            status["conditions"] = [condition]  # merge patch replaces the list: one current condition
    else:
        if report.phase:
            status["phase"] = report.phase
        status["scheduled"] = report.scheduled
        if occupied_by:
            status["occupiedBy"] = occupied_by
        if report.schedule_start_time > 0:
            status["scheduleStartTime"] = rfc3339(report.schedule_start_time)
    if report.has_counts:
        status.update(running=report.running, succeeded=report.succeeded, failed=report.failed)
    return {"status": status}


def _volcano_condition(report: GangReport, now: float) -> dict[str, Any] | None:
    if report.phase == GangPhase.SCHEDULED:
        kind, reason = "Scheduled", VOLCANO_READY_REASON
    elif report.unschedulable:
        kind, reason = "Unschedulable", "NotEnoughResources"
    elif report.phase == GangPhase.SCHEDULING:
        kind, reason = "Unschedulable", "NotEnoughTasks"  # placed pods wait for the rest of the gang
    else:
        return None
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": report.message,
        "lastTransitionTime": rfc3339(now),
        "transitionID": str(uuid.uuid4()),
    }
