"""What the scheduler tells the cluster about pods and gangs it could not place (or just placed).

Reports are collected during a step and sent to the binder's report path in one message at its end.
Each pod's last message and each gang's last (phase, message) are remembered, so an unchanged verdict
does not write the same condition and Event again on every retry.
"""

from __future__ import annotations

import logging

from phalanx.gang.record import GangRecord
from phalanx.model.objects import GangSpec
from phalanx.model.status import EventReason
from phalanx.scheduling.ports import BinderPort
from phalanx.v1 import binder_pb2

log = logging.getLogger(__name__)
MAX_HELD = 100_000  # undelivered pod (and gang) reports kept while the binder is unreachable


class StatusReports:
    def __init__(self) -> None:
        self._pods: list[binder_pb2.PodReport] = []
        self._gangs: list[binder_pb2.GangReport] = []
        self._pod_last: dict[str, str] = {}  # pod key -> last message sent
        self._gang_last: dict[str, tuple[str, str]] = {}  # gang key -> last (phase, message) sent
        self._first_attempt: dict[str, float] = {}  # gang key -> when the scheduler first reported it

    def pod(self, pod_key: str, message: str, annotations: dict[str, str] | None = None,
            event: str = EventReason.FAILED_SCHEDULING) -> None:
        """A pod's condition and Event; `event` is an EventReason."""
        if not annotations and self._pod_last.get(pod_key) == message:
            return
        self._pod_last[pod_key] = message
        self._pods.append(binder_pb2.PodReport(
            pod_key=pod_key, annotations=annotations or {}, unschedulable_message=message,
            event_reason=event, event_message=message))

    def gang(self, spec: GangSpec | None, rec: GangRecord, phase: str, reason: str, message: str, now: float,
             unschedulable: bool = False, pod_key: str = "") -> None:
        """A gang-level report (PodGroup status, an Event); an unchanged one is not sent again. `phase` is a
        GangPhase, `reason` an EventReason."""
        last = self._gang_last.get(rec.key)
        if last == (phase, message):
            return
        if last is not None and last[0] == phase:
            reason = ""  # progress within a phase ("3/8 placed") updates the status; only new phases make Events
        self._gang_last[rec.key] = (phase, message)
        started = rec.first_wait if rec.first_wait is not None else self._first_attempt.setdefault(rec.key, now)
        members = sorted(rec.bound | rec.assumed)
        self._gangs.append(binder_pb2.GangReport(
            gang_key=rec.key, phase=phase, scheduled=len(rec.bound), message=message,
            source=spec.source if spec is not None else "", event_reason=reason, unschedulable=unschedulable,
            schedule_start_time=started, pod_key=pod_key or (members[0] if members else "")))

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
        try:
            binder.report(pods, gangs, now)
        except Exception as exc:
            log.warning("status reports not delivered (%s); kept for the next round", str(exc).splitlines()[0][:200])
            self._pods = (pods + self._pods)[-MAX_HELD:]
            self._gangs = (gangs + self._gangs)[-MAX_HELD:]
