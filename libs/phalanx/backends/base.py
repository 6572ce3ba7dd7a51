"""What a cluster backend does for the binder: write bindings and status to the cluster.

The embedded simulated cluster keeps its objects in Redis and writes bindings inside the binder's
fenced commit; a real cluster (Kubernetes API server) writes them through its API before the commit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from phalanx.model.binding import Assignment, EvictResult, GangReport, PodReport, Victim
from phalanx.state.txn import Txn


@dataclass
class BindFailure:
    message: str
    gone: bool = False  # the pod no longer exists: not an error for the rest of the gang
    retryable: bool = False  # no answer (API server down, timeouts): try again later, do not release


class ClusterBackend(Protocol):
    name: str
    # True when bind() only adds writes to the commit: the whole bind is then one atomic, locked script.
    transactional: bool

    def precheck(self, assignments: list[Assignment]) -> dict[str, BindFailure]:
        """Refusals by pod key, before anything is recorded or written: the pod is not the binder's to bind
        (another scheduler's, gone, being deleted, bound elsewhere) or the node does not exist. The binder
        calls it before its intent, so a refusal can still give a whole gang's reservations back; `gone`
        marks a pod that no longer exists, `retryable` one that could not be checked now."""
        ...

    def unreserved(self, a: Assignment, held: Mapping[str, int]) -> BindFailure | None:
        """Whether the reservation `held` (the scheduler's, from Redis) falls short of what the pod's spec in
        the cluster asks: defence in depth against a pod placed from a forged copy of its spec. None: it
        covers it (or the backend's pods are the scheduler's own records, as on the embedded cluster)."""
        ...

    def bind(self, assignments: list[Assignment], now: float, commit: Txn) -> dict[str, BindFailure]:
        """Binds pods; returns failures by pod key. May add writes to `commit` to make them atomic with it."""
        ...

    def report(self, pods: list[PodReport], gangs: list[GangReport], now: float) -> None: ...

    def evict(self, victims: list[Victim], now: float) -> list[EvictResult]:
        """Evicts preemption victims in order, each with a DisruptionTarget condition and a Preempted Event
        naming the preemptor; after a refusal the rest are not tried (answered REFUSED)."""
        ...
