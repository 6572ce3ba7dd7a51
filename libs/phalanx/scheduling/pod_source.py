"""Kubernetes mode: the API server is the only source of a pod's spec.

The queue holds what it was handed, and a caller allowed to add pods could hand it a forged copy (a GPU pod
re-added asking for no GPU, placed and bound: the node over-committed). So the scheduler places a popped
pod as its own cluster feed knows it, never as the queue's copy says: a pod the feed has no pending record
of is dropped from the queue, and one whose copy differs in what scheduling reads is placed from the feed's
record. Both are logged and counted (`phalanx_untrusted_pods_total`). The simulator, which is the source of
its own pods, has no such source and the queue's copy stands.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from phalanx.metrics.catalog import UNTRUSTED_PODS
from phalanx.model.objects import PodInfo
from phalanx.queueing.scheduling_queue import Outcome
from phalanx.scheduling.ports import Popped, Verdict

log = logging.getLogger(__name__)

# What scheduling reads of a pod (placement, gang rules, ordering among jobs, preemption), compared field
# by field so that a log line can name what a forged copy changed.
COMPARED = (
    "uid",
    "priority",
    "requests",
    "placement",
    "gang",
    "pod_affinity",
    "preemption_policy",
    "labels",
    "annotations",
)
MAX_LOGGED = 1_000  # distinct pods logged: a flood of forged pods must not flood the log


class PendingPods(Protocol):
    def schedulable_pod(self, key: str) -> PodInfo | None:
        """The pending pod of that key as the API server has it (resolved to its gang), or None when there
        is no such pod waiting to be scheduled."""
        ...

    def verdicts_delivered(self, verdicts: Iterable[Verdict]) -> None:
        """The queue took these verdicts (so the feed knows which pods it no longer holds)."""
        ...


def differences(queued: PodInfo, known: PodInfo) -> list[str]:
    """The fields scheduling reads in which the queue's copy differs from the API server's."""
    return [name for name in COMPARED if getattr(queued, name) != getattr(known, name)]


class PoppedPodCheck:
    """Swaps each popped pod for the source's copy (see the module docstring)."""

    def __init__(self) -> None:
        self.pods: PendingPods | None = None  # the cluster feed's mirror, attached when the feed starts
        self.synced: Callable[[], bool] = lambda: False  # whether it has its first full view of the cluster
        self._logged: set[str] = set()

    def attach(self, pods: PendingPods, synced: Callable[[], bool]) -> None:
        self.pods, self.synced = pods, synced

    def delivered(self, verdicts: list[Verdict]) -> None:
        """A pop carried these verdicts and the queue answered: the source learns which pods it let go of,
        so a pod it forgot is not removed from it again when it is bound (one queue call per batch saved)."""
        if self.pods is not None and verdicts:
            self.pods.verdicts_delivered(verdicts)

    def admit(self, items: list[Popped], verdicts: list[Verdict]) -> list[Popped]:
        """The popped pods to place, each as the source knows it; `verdicts` gets one for every pod not placed."""
        pods = self.pods
        if pods is None or not self.synced():  # before it, "unknown" proves nothing
            # Before the feed's first view nothing can be checked: nothing is placed, nothing is lost.
            why = "the scheduler's cluster feed has not synced yet; retried"
            verdicts.extend(Verdict(item, Outcome.BACKOFF, why) for item in items)
            return []
        out: list[Popped] = []
        for item in items:
            queued = item.pod
            known = pods.schedulable_pod(queued.key)
            if known is None:
                UNTRUSTED_PODS.labels("unknown").inc()
                self._log(
                    queued.key, "is not a pending pod of this scheduler on the API server; dropped from the queue"
                )
                verdicts.append(Verdict(item, Outcome.DROPPED, "not a pending pod on the API server"))
                continue
            changed = differences(queued, known)
            if changed:
                UNTRUSTED_PODS.labels("differs").inc()
                self._log(
                    queued.key,
                    f"was handed out by the queue with {', '.join(changed)} differing from the API server's "
                    "spec; placed as the API server has it",
                )
            out.append(Popped(known, item.trace))
        return out

    def _log(self, key: str, what: str) -> None:
        if key in self._logged or len(self._logged) >= MAX_LOGGED:
            return
        self._logged.add(key)
        log.warning("pod %s %s (a caller other than the cluster feed added it to the queue)", key, what)
