"""The feed's reports: each refusal of a pod of ours said once (PodScheduled=False and an Event), sent with the batch's PodGroup status."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol

from phalanx.model.binding import GangReport, PodReport
from phalanx.model.status import EventReason

log = logging.getLogger(__name__)


class Reporter(Protocol):
    def report(self, pods: list[PodReport], gangs: list[GangReport], now: float) -> None: ...


class RefusalReports:
    def __init__(self, reporter: Reporter) -> None:
        self.reporter = reporter
        self._said: dict[str, str] = {}  # pod key -> the last message delivered

    def forget(self, key: str) -> None:
        self._said.pop(key, None)

    def send(self, refusals: Mapping[str, str], gangs: list[GangReport], now: float) -> None:
        """Refusals not said already in the same words, and `gangs`; a delivery that fails is retried when
        the pods change again."""
        fresh = {k: m for k, m in refusals.items() if self._said.get(k) != m}
        if not fresh and not gangs:
            return
        pods = [
            PodReport(pod_key=k, unschedulable_message=m, event_reason=EventReason.FAILED_SCHEDULING, event_message=m)
            for k, m in sorted(fresh.items())
        ]
        try:
            self.reporter.report(pods, gangs, now)
        except Exception as exc:  # the binder is down
            log.warning("cluster feed: reporting %d pods failed: %s", len(pods), exc)
            return
        self._said.update(fresh)
