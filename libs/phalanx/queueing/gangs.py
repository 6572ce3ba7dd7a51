"""The gangs in the queue: each one's entries, and its place in line (creation time, or last failure)."""

from __future__ import annotations

from dataclasses import dataclass, field

from phalanx.queueing.entry import Entry


@dataclass
class _Gang:
    members: set[str] = field(default_factory=set)  # keys of its entries, whatever sub-queue holds them
    created_at: float | None = None  # as its first pod here said
    failed_at: float | None = None  # while retried on a timer: when it last failed


class Gangs:
    """A gang's place in line is its creation time as its first pod here said, or, while a failed gang is
    retried on a timer, the time it last failed (see SchedulingQueue.gang_failed). Its record goes with its
    last entry: kept, records would grow with every gang ever seen; a pod of it added later starts afresh."""

    def __init__(self) -> None:
        self._gangs: dict[str, _Gang] = {}

    def members(self, gang: str) -> set[str]:
        """The keys of the gang's entries; empty for a gang not here."""
        g = self._gangs.get(gang)
        return g.members if g is not None else set()

    def created(self, gang: str, at: float) -> None:
        """A pod of the gang says when the gang was created; the first one to say it counts."""
        if not gang:
            return
        g = self._gangs.setdefault(gang, _Gang())
        if g.created_at is None:
            g.created_at = at

    def join(self, e: Entry) -> None:
        if e.gang:
            self._gangs.setdefault(e.gang, _Gang()).members.add(e.key)

    def leave(self, e: Entry) -> None:
        g = self._gangs.get(e.gang) if e.gang else None
        if g is not None and e.key in g.members:
            g.members.discard(e.key)
            if not g.members:
                del self._gangs[e.gang]

    def failed(self, gang: str, now: float) -> None:
        """The gang is retried on a timer: it sorts by when it failed, behind the others."""
        self._gangs.setdefault(gang, _Gang()).failed_at = now

    def keeps_turn(self, gang: str) -> None:
        """The gang waits for an event: it sorts by its creation time again."""
        g = self._gangs.get(gang)
        if g is not None:
            g.failed_at = None

    def place(self, e: Entry) -> float:
        """The time a pod of a gang sorts by."""
        g = self._gangs.get(e.gang)
        if g is None:
            return e.gang_created_at
        if g.failed_at is not None:
            return g.failed_at
        return g.created_at if g.created_at is not None else e.gang_created_at

    def __bool__(self) -> bool:
        """Does it remember any gang?"""
        return bool(self._gangs)
