"""What reconciliation (reconcile.py) compares and repairs through, as three Protocols: the API server's
truth as last watched (the feed's mirror), the scheduler's memory and Redis, and the feed's public handlers.
Reconciliation imports no feed; the feed composes it with these."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Set
from typing import Protocol

from phalanx.framework.framework import Framework
from phalanx.framework.snapshot import Snapshot
from phalanx.model.objects import NodeInfo, PodInfo
from phalanx.queueing.hints import FreedCapacity
from phalanx.state.pod_state import PodRecord
from phalanx.state.store import StateStore


class ApiServerView(Protocol):
    """The API server's truth, as last watched (cluster.mirror.Mirror)."""

    def mirror_nodes(self) -> dict[str, NodeInfo]: ...

    def mirror_bound(self) -> dict[str, PodInfo]:
        """Every pod bound and not finished, whichever scheduler bound it, with its node."""
        ...

    def mirror_has(self, key: str) -> bool:
        """Whether the pod exists and has not finished."""
        ...


class SchedulerState(Protocol):
    """The scheduler's memory and Redis, and the calls that repair them (scheduling.scheduler.GangScheduler)."""

    @property
    def store(self) -> StateStore: ...

    @property
    def framework(self) -> Framework: ...

    @property
    def snapshot(self) -> Snapshot: ...

    @property
    def assumed(self) -> Mapping[str, PodRecord]: ...

    @property
    def bound(self) -> Set[str]: ...

    def resync(self) -> None: ...

    def upsert_nodes(self, nodes: list[NodeInfo]) -> None: ...

    def remove_nodes(self, names: list[str], now: float) -> list[PodRecord]: ...

    def confirm_bound(self, pods: list[PodInfo], now: float) -> list[PodInfo]: ...

    def release_pods(
        self, keys: list[str], freed: FreedCapacity | None = None, succeeded: Collection[str] = ()
    ) -> int: ...


class FeedHandlers(Protocol):
    """The feed's public handlers, which watch events go through too: what a pass repairs by, beside the
    scheduler's own calls."""

    def add_bound(self, pods: list[PodInfo]) -> None:
        """Pods the API server shows bound that the scheduler does not count."""
        ...

    def resend_gangs(self) -> None:
        """The scheduler learns every gang in use again."""
        ...

    def requeue_missing(self) -> int:
        """The queue is handed again every pending pod the scheduler does not hold (those it has stay)."""
        ...

    def retry_unschedulable(self) -> None:
        """Every unschedulable pod gets another try."""
        ...
