"""The backoff area: entries waiting out a delay that doubles with each attempt, then re-entering active."""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator
from typing import NamedTuple

from phalanx.queueing.entry import Entry, SubQueue
from phalanx.queueing.settings import QueueSettings

# Past 2^2100 every positive double overflows, so min(initial * 2^k, max) is max for any larger k.
_MAX_BACKOFF_EXPONENT = 2100


def backoff_delay(attempts: int, initial: float, maximum: float) -> float:
    """min(initial * 2^(attempts-1), maximum), for any number of attempts (2 ** 1025 overflows a float)."""
    exponent = min(max(attempts - 1, 0), _MAX_BACKOFF_EXPONENT)
    try:
        delay = math.ldexp(initial, exponent)
    except OverflowError:
        delay = math.copysign(math.inf, initial)
    return min(delay, maximum)


class _Waiting(NamedTuple):
    """A heap item: soonest first, then the earliest stamped."""

    until: float
    version: int
    key: str


class Backoff:
    """A heap of _Waiting; an item whose entry is gone, moved or re-stamped is skipped (heaps are cleaned
    lazily)."""

    def __init__(self, entries: dict[str, Entry], settings: QueueSettings, versions: Iterator[int]) -> None:
        self._entries = entries
        self._settings = settings
        self._versions = versions  # shared with the active sub-queue: one stamp sequence
        self._heap: list[_Waiting] = []

    def push(self, e: Entry, now: float) -> None:
        """e waits backoff_delay(its attempts) from now."""
        delay = backoff_delay(e.attempts, self._settings.initial_backoff, self._settings.max_backoff)
        e.backoff_until = now + delay
        self.keep(e)

    def keep(self, e: Entry) -> None:
        """e waits until the backoff_until it already has."""
        e.where = SubQueue.BACKOFF
        e.version = next(self._versions)
        heapq.heappush(self._heap, _Waiting(e.backoff_until, e.version, e.key))

    def due(self, now: float) -> list[Entry]:
        """Takes out the entries whose delay is over, soonest first (the caller activates them)."""
        out = []
        while self._heap and self._heap[0].until <= now:
            item = heapq.heappop(self._heap)
            e = self._entries.get(item.key)
            if e is not None and self._current(e, item.version):
                out.append(e)
        return out

    def next_ready_at(self) -> float | None:
        """When the first entry's delay is over (stale items at the head are dropped)."""
        while self._heap:
            head = self._heap[0]
            e = self._entries.get(head.key)
            if e is not None and self._current(e, head.version):
                return head.until
            heapq.heappop(self._heap)
        return None

    @staticmethod
    def _current(e: Entry, version: int) -> bool:
        return e.version == version and e.where == SubQueue.BACKOFF
