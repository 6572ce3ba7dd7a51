"""What the scheduler needs from the queue and the binder, so the scheduling logic does not know gRPC."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from phalanx.model.binding import Assignment, BindResult, EvictResult, GangReport, PodReport, Victim
from phalanx.model.objects import PodInfo
from phalanx.queueing.hints import FreedCapacity, Hint
from phalanx.queueing.scheduling_queue import Outcome


@dataclass
class Popped:
    pod: PodInfo
    trace: str = ""  # the gang's W3C traceparent


@dataclass
class Verdict:
    item: Popped
    outcome: Outcome
    reason: str = ""
    hint: Hint | None = None  # UNSCHEDULABLE: what may make it schedulable (None: any cluster event)


@dataclass
class Carry:
    """Queue updates sent along with the next pop, so a scheduling round costs one queue round trip."""

    verdicts: list[Verdict] = field(default_factory=list)
    activate: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    remove: list[str] = field(default_factory=list)
    add: list[Popped] = field(default_factory=list)
    move_all: bool = False  # a node added or changed (or anything else): every unschedulable pod moves
    freed: FreedCapacity = field(default_factory=FreedCapacity)  # capacity freed: moves the pods it may help
    # DRF: the tenants' dominant shares now and the capacity they are of (see DoneRequest); the latest wins.
    shares: dict[str, float] = field(default_factory=dict)
    share_capacity: dict[str, int] = field(default_factory=dict)

    def empty(self) -> bool:
        return not (
            self.verdicts
            or self.activate
            or self.failed
            or self.remove
            or self.add
            or self.move_all
            or self.freed
            or self.shares
        )

    def merged(self, other: "Carry | None") -> "Carry":
        """This carry followed by `other` (undelivered updates first, so they keep their order)."""
        if other is None:
            return Carry(
                list(self.verdicts),
                list(self.activate),
                list(self.failed),
                list(self.remove),
                list(self.add),
                self.move_all,
                self.freed.copy(),
                dict(self.shares),
                dict(self.share_capacity),
            )
        return Carry(
            self.verdicts + other.verdicts,
            self.activate + other.activate,
            self.failed + other.failed,
            self.remove + other.remove,
            self.add + other.add,
            self.move_all or other.move_all,
            self.freed.copy().merge(other.freed),
            {**self.shares, **other.shares},
            other.share_capacity or dict(self.share_capacity),
        )


@dataclass
class PopResult:
    items: list[Popped]
    next_ready_at: float | None
    pending: int


class QueuePort(Protocol):
    def pop(self, max_pods: int, now: float, carry: Carry | None = None, wait_seconds: float = 0.0) -> PopResult: ...

    def done(self, verdicts: list[Verdict], activate: list[str], failed: list[str], now: float) -> None: ...

    def remove(self, keys: list[str]) -> None: ...

    def move_all(self, event: str, now: float, freed: FreedCapacity | None = None) -> None:
        """A cluster event; `freed`: it only freed this capacity (see phalanx.queueing.hints)."""
        ...

    def release_in_flight(self) -> int: ...


class BinderPort(Protocol):
    def bind(self, assignments: list[Assignment], all_or_nothing: bool, now: float, trace: str) -> list[BindResult]: ...

    def bind_many(self, batches: list[tuple[list[Assignment], bool, str]], now: float) -> list[list[BindResult]]: ...

    def report(self, pods: list[PodReport], gangs: list[GangReport], now: float) -> None: ...

    def evict(self, victims: list[Victim], now: float) -> list[EvictResult]:
        """Evicts preemption victims, in order (stopping at the first refusal)."""
        ...
