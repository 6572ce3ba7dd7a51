"""The gangs in the queue: each one's entries, and its place in line (creation time, or last failure)."""

from __future__ import annotations

from phalanx.queueing.entry import Entry


class Gangs:
    """A gang's place in line is its creation time as its first pod here said, or, while a failed gang is
    retried on a timer, the time it last failed (see SchedulingQueue.gang_failed). Both go with the gang's
    last entry: kept, they would grow with every gang ever seen; a pod of it added later starts afresh."""

    def __init__(self) -> None:
        self._members: dict[str, set[str]] = {}  # every entry of a gang, by key
        self._created: dict[str, float] = {}
        self._failed_at: dict[str, float] = {}

    def members(self, gang: str) -> set[str]:
        """The keys of the gang's entries (whatever sub-queue holds them); empty for a gang not here."""
        return self._members.get(gang, set())

    def created(self, gang: str, at: float) -> None:
        """A pod of the gang says when the gang was created; the first one to say it counts."""
        if gang and gang not in self._created:
            self._created[gang] = at

    def join(self, e: Entry) -> None:
        if e.gang:
            self._members.setdefault(e.gang, set()).add(e.key)

    def leave(self, e: Entry) -> None:
        if not e.gang:
            return
        members = self._members.get(e.gang)
        if members is not None:
            members.discard(e.key)
            if not members:
                del self._members[e.gang]
                self._created.pop(e.gang, None)
                self._failed_at.pop(e.gang, None)

    def failed(self, gang: str, now: float) -> None:
        """The gang is retried on a timer: it sorts by when it failed, behind the others."""
        self._failed_at[gang] = now

    def keeps_turn(self, gang: str) -> None:
        """The gang waits for an event: it sorts by its creation time again."""
        self._failed_at.pop(gang, None)

    def place(self, e: Entry) -> float:
        """The time a pod of a gang sorts by."""
        return self._failed_at.get(e.gang, self._created.get(e.gang, e.gang_created_at))

    def __bool__(self) -> bool:
        """Does it remember anything (any gang's entries or place)?"""
        return bool(self._members or self._created or self._failed_at)
