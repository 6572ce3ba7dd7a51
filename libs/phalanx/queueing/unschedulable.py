"""The unschedulable area: entries waiting for a cluster event that may help them (or the periodic flush)."""

from __future__ import annotations

from collections.abc import Iterator, ValuesView

from phalanx.queueing.entry import Entry, SubQueue
from phalanx.queueing.hints import Hint
from phalanx.queueing.settings import QueueSettings


class Unschedulable:
    """Entries in the order they became unschedulable, which is time order: the oldest is first. After
    `unschedulable_flush` seconds (0: never) an entry is due for another try even without an event."""

    def __init__(self, settings: QueueSettings) -> None:
        self._settings = settings
        self._entries: dict[str, Entry] = {}

    def add(self, e: Entry, now: float) -> None:
        e.where = SubQueue.UNSCHEDULABLE
        e.unschedulable_since = now
        self._entries[e.key] = e

    def discard(self, key: str) -> None:
        self._entries.pop(key, None)

    def due(self, now: float) -> list[Entry]:
        """Those due for the flush by `now`, oldest first (the caller moves them)."""
        flush = self._settings.unschedulable_flush
        out: list[Entry] = []
        if not flush > 0:  # 0: never (and so is anything that is not a positive number)
            return out
        for e in self._entries.values():
            if now - e.unschedulable_since < flush:
                break  # the others joined later
            out.append(e)
        return out

    def flush_at(self) -> float | None:
        """When the oldest is due for the flush."""
        flush = self._settings.unschedulable_flush
        if not (flush > 0 and self._entries):
            return None
        return next(iter(self._entries.values())).unschedulable_since + flush

    def hints(self) -> Iterator[Hint]:
        """Each distinct hint once (entries of a unit usually share one)."""
        return iter({id(e.hint): e.hint for e in self._entries.values() if e.hint is not None}.values())

    def values(self) -> ValuesView[Entry]:
        return self._entries.values()

    def __len__(self) -> int:
        return len(self._entries)
