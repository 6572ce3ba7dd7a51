"""What the watch threads hand the feed thread: many producers, one consumer that takes everything at once.

A queue.Queue takes its lock and notifies its condition on every put and takes the lock again on every get:
on a restart's first list that is some 45,000 objects (30,000 pods, 5,000 nodes, 10,000 PodGroups), and
`Condition.notify` in those puts alone was 0.24 s of the scheduler's CPU there (bench/issue25-ab.txt,
section 13). Here a put is a deque append (atomic under the GIL) and sets the wake-up Event only when it is
not set already.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class Inbox(Generic[T]):
    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._ready = threading.Event()

    def put(self, item: T) -> None:
        self._items.append(item)
        if not self._ready.is_set():
            self._ready.set()

    def drain(self, timeout: float | None = 0.0, linger: float = 0.0) -> list[T]:
        """Everything put so far, oldest first; waits up to `timeout` seconds (None: without limit) for the
        first item when there is none. `linger`: when it had to wait and an item came, it waits that much
        longer, so what arrives just after (the next pods of a gang, POSTed one after the other) comes in the
        same batch; a batch waiting already is taken at once."""
        if timeout != 0.0 and not self._items:
            if self._ready.wait(timeout) and linger > 0:
                time.sleep(linger)
        # Cleared before the items are taken: a put after this sets it again, so no item waits unseen.
        self._ready.clear()
        items, out = self._items, []
        while items:
            out.append(items.popleft())
        return out

    def __len__(self) -> int:
        return len(self._items)
