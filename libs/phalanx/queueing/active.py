"""The active sub-queue: a heap in queue order (the sort key), and each gang's active entries.

Order: higher priority first; then, for a DRF job, its tenant's dominant share (a job ordered by priority
alone counts as share 0); then the gang's place in line (see Gangs), or the pod's own creation time for a
pod without a gang; then the gang's (or pod's) namespace/name; then the pod's name.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from phalanx.queueing.drf import Shares
from phalanx.queueing.entry import Entry, SubQueue
from phalanx.queueing.gangs import Gangs


@dataclass(order=True)
class _HeapItem:
    sort_key: tuple[Any, ...]
    version: int
    key: str = field(compare=False)


class ActiveQueue:
    """Entries leave the heap lazily: an item whose entry is gone, moved or re-stamped is skipped."""

    def __init__(self, entries: dict[str, Entry], gangs: Gangs, shares: Shares, versions: Iterator[int]) -> None:
        self._entries = entries
        self._gangs = gangs
        self._shares = shares
        self._versions = versions  # shared with the backoff area: one stamp sequence
        self._heap: list[_HeapItem] = []
        self._gang_active: dict[str, set[str]] = {}

    def sort_key(self, e: Entry) -> tuple[Any, ...]:
        share = self._shares.share(e)
        if e.gang:
            return (-e.priority, share, self._gangs.place(e), e.gang, e.key)
        return (-e.priority, share, e.created_at, e.key, e.key)

    def push(self, e: Entry) -> None:
        e.version = next(self._versions)
        e.where = SubQueue.ACTIVE
        heapq.heappush(self._heap, _HeapItem(self.sort_key(e), e.version, e.key))
        if e.gang:
            self._gang_active.setdefault(e.gang, set()).add(e.key)

    def discard(self, e: Entry) -> None:
        """e (active) leaves; its heap item goes stale once the caller re-stamps it."""
        if not e.gang:
            return
        members = self._gang_active.get(e.gang)
        if members is not None:
            members.discard(e.key)
            if not members:
                del self._gang_active[e.gang]

    def gang(self, gang: str) -> list[str]:
        """The keys of the gang's active entries."""
        return list(self._gang_active.get(gang, ()))

    def pop_head(self) -> Entry | None:
        """The first entry in queue order (still active: the caller takes it out)."""
        while self._heap:
            item = heapq.heappop(self._heap)
            e = self._entries.get(item.key)
            if e is not None and e.version == item.version and e.where == SubQueue.ACTIVE:
                if e.tenant:
                    # Its tenant may have been charged since it was pushed (shares only grow within a pop):
                    # a key that grew goes back in line.
                    key = self.sort_key(e)
                    if key != item.sort_key:
                        heapq.heappush(self._heap, _HeapItem(key, item.version, item.key))
                        continue
                return e
        return None

    def unit(self, head: Entry) -> list[Entry]:
        """What a pop hands out with `head`: every active entry of its gang, by key (or head alone)."""
        if not head.gang:
            return [head]
        unit = [self._entries[k] for k in self._gang_active.get(head.gang, {head.key})]
        unit.sort(key=lambda x: x.key)
        return unit

    def reorder(self) -> None:
        """The sort keys changed (DRF shares): the heap is rebuilt from the active entries."""
        self._heap = [
            _HeapItem(self.sort_key(e), e.version, e.key) for e in self._entries.values() if e.where == SubQueue.ACTIVE
        ]
        heapq.heapify(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)
