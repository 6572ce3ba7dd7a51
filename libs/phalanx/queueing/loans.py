"""Loans: popped entries lent to a consumer scheduler, returned when it restarts or its lease runs out.

Each pop names its consumer (and the consumer's incarnation). An entry stays in flight until its consumer
reports a verdict; if the consumer restarts (same name, new incarnation) or is not heard from for
`lease_seconds` of wall-clock time, its entries are returned, so a crashed or stuck scheduler cannot strand
them. A consumer that did place such a pod answers it with its reservation when it pops it again, so a
premature return costs a pop, not a pod.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from phalanx.queueing.entry import Entry, SubQueue
from phalanx.queueing.settings import QueueSettings


@dataclass
class _Consumer:
    incarnation: str
    last_seen: float
    lent: set[str] = field(default_factory=set)


class Loans:
    """Returned entries are handed back to the caller, which puts them in the active sub-queue."""

    def __init__(self, entries: dict[str, Entry], settings: QueueSettings, monotonic: Callable[[], float]) -> None:
        self._entries = entries
        self._settings = settings
        self._monotonic = monotonic
        self._consumers: dict[str, _Consumer] = {}
        self.returned = 0  # entries that came back from a restarted or silent consumer

    def heard_from(self, consumer: str, incarnation: str) -> list[Entry]:
        """A pop renews the consumer's lease; a new incarnation means the old one's entries are lost to it:
        those are returned."""
        returned: list[Entry] = []
        c = self._consumers.get(consumer)
        if c is not None and c.incarnation != incarnation:
            returned = self._return(c)
        if c is None or c.incarnation != incarnation:
            c = self._consumers[consumer] = _Consumer(incarnation, self._monotonic())
        c.last_seen = self._monotonic()
        return returned

    def expire(self) -> list[Entry]:
        """The entries of consumers silent for the lease or longer, returned (and those consumers forgotten)."""
        lease = self._settings.lease_seconds
        if lease <= 0:
            return []
        returned: list[Entry] = []
        now = self._monotonic()
        for name, c in list(self._consumers.items()):
            if now - c.last_seen >= lease:
                returned += self._return(c)
                del self._consumers[name]
        return returned

    def lend(self, e: Entry, consumer: str) -> None:
        """e (out of its sub-queue) goes in flight to `consumer`, which heard_from has registered."""
        e.where = SubQueue.IN_FLIGHT
        e.lent_to = consumer
        self._consumers[consumer].lent.add(e.key)

    def end(self, e: Entry) -> None:
        """e's loan is over (a verdict, a removal, or a release)."""
        c = self._consumers.get(e.lent_to)
        if c is not None:
            c.lent.discard(e.key)
        e.lent_to = ""

    def _return(self, c: _Consumer) -> list[Entry]:
        returned = []
        for key in sorted(c.lent):
            e = self._entries.get(key)
            if e is not None and e.where == SubQueue.IN_FLIGHT:
                e.lent_to = ""
                returned.append(e)
                self.returned += 1
        c.lent.clear()
        return returned
