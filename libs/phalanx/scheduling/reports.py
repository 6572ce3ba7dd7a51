"""What the scheduler tells the cluster about pods and gangs it could not place (or just placed).

Reports are collected during a step and sent to the binder's report path in one message at its end. In
Kubernetes mode a gang report first goes through the cluster feed's PodGroup status author
(phalanx.cluster.gang_counts, `gang_author`), which writes a PodGroup's counters and phase; the scheduler's
part is the facts: why, since when, which Event.
Each pod's last message and each gang's last (phase, message) are remembered, so an unchanged verdict
does not write the same condition and Event again on every retry.

A pod is told it is unschedulable (PodScheduled=False, reason Unschedulable, and a Warning Event) only when
its gang cannot be placed now. A pod placed and waiting for the rest of its gang is reported as waiting,
with no Event: the embedded cluster records it for explain, and the Kubernetes backend writes nothing on
the pod, as kube-scheduler writes nothing on a pod in Permit (cluster-autoscaler scales up for reason
Unschedulable, and Kubeflow's training-operator repeats any False PodScheduled condition as a Warning on
its job; see phalanx.model.status.ScheduledReason).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from phalanx.gang.record import GangRecord
from phalanx.model.binding import GangReport, PodReport
from phalanx.model.objects import GangSpec
from phalanx.model.status import EventReason, GangPhase
from phalanx.scheduling.ports import BinderPort
from phalanx.telemetry.failures import rpc_failure

log = logging.getLogger(__name__)
MAX_HELD = 100_000  # undelivered pod (and gang) reports kept while the binder is unreachable


class StatusReports:
    def __init__(self) -> None:
        self._pods: list[PodReport] = []
        self._gangs: list[GangReport] = []
        self._pod_last: dict[str, tuple[str, bool]] = {}  # pod key -> last (message, waiting) sent
        self._gang_last: dict[str, tuple[GangPhase, str]] = {}  # gang key -> last (phase, message) sent
        self._first_attempt: dict[str, float] = {}  # gang key -> when the scheduler first reported it
        # Kubernetes mode: the cluster feed's PodGroup status author (phalanx.cluster.gang_counts), which makes
        # each gang report the PodGroup's one report; None on the simulator, whose reports go as they are.
        self.gang_author: Callable[[list[GangReport]], list[GangReport]] | None = None

    def pod(
        self,
        pod_key: str,
        message: str,
        annotations: dict[str, str] | None = None,
        event: EventReason = EventReason.FAILED_SCHEDULING,
        nominated_node: str = "",
    ) -> None:
        """A pod that cannot be placed now: its condition (reason Unschedulable) and Event (and, when
        preempting, the node nominated for it)."""
        self._pod(pod_key, message, annotations, event, nominated_node, waiting=False)

    def waiting(self, pod_key: str, message: str) -> None:
        """A pod placed (reserved) that waits for the rest of its gang or group: its condition says so, with
        reason GangWaiting, and no Event."""
        self._pod(pod_key, message, None, None, "", waiting=True)

    def _pod(
        self,
        pod_key: str,
        message: str,
        annotations: dict[str, str] | None,
        event: EventReason | None,
        nominated_node: str,
        waiting: bool,
    ) -> None:
        if not annotations and not nominated_node and self._pod_last.get(pod_key) == (message, waiting):
            return
        self._pod_last[pod_key] = (message, waiting)
        self._pods.append(
            PodReport(
                pod_key=pod_key,
                annotations=annotations or {},
                unschedulable_message=message,
                event_reason=event or "",
                event_message=message if event else "",
                nominated_node=nominated_node,
                waiting=waiting,
            )
        )

    def gang(
        self,
        spec: GangSpec | None,
        rec: GangRecord,
        phase: GangPhase,
        reason: EventReason,
        message: str,
        now: float,
        unschedulable: bool = False,
        pod_key: str = "",
        occurrence: bool = False,
    ) -> None:
        """A gang-level report (PodGroup status, an Event); an unchanged one is not sent again. `occurrence`:
        something happened (a timeout) that gets its Event even when the phase stays as it was."""
        last = self._gang_last.get(rec.key)
        if last == (phase, message):
            return
        # Progress within a phase ("3/8 placed") updates the status; only a new phase makes an Event.
        event = "" if last is not None and last[0] == phase and not occurrence else str(reason)
        self._gang_last[rec.key] = (phase, message)
        started = rec.first_wait if rec.first_wait is not None else self._first_attempt.setdefault(rec.key, now)
        members = sorted(rec.bound | rec.assumed)
        self._gangs.append(
            GangReport(
                gang_key=rec.key,
                phase=phase,
                scheduled=len(rec.bound),
                message=message,
                source=spec.source if spec is not None else "",
                event_reason=event,
                unschedulable=unschedulable,
                schedule_start_time=started,
                pod_key=pod_key or (members[0] if members else ""),
            )
        )

    def forget_pods(self, keys: list[str]) -> None:
        for key in keys:
            self._pod_last.pop(key, None)

    def forget_gang(self, key: str) -> None:
        self._gang_last.pop(key, None)
        self._first_attempt.pop(key, None)

    def flush(self, binder: BinderPort, now: float) -> None:
        """Hands the reports to the binder; kept for the next flush while it is unreachable (a status
        message is never worth failing a scheduling step), up to a bound so a long outage cannot grow
        memory without end: past it the oldest are dropped (each pod's next report says it again)."""
        if not (self._pods or self._gangs):
            return
        pods, self._pods = self._pods, []
        gangs, self._gangs = self._gangs, []
        if gangs and self.gang_author is not None:
            gangs = self.gang_author(gangs)
        try:
            binder.report(pods, gangs, now)
        except Exception as exc:
            log.warning("status reports not delivered (%s); kept for the next round", rpc_failure(exc)[:200])
            self._pods = (pods + self._pods)[-MAX_HELD:]
            self._gangs = (gangs + self._gangs)[-MAX_HELD:]
