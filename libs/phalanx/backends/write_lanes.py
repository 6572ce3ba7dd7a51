"""Writes to the API server on several threads, in order per object.

Status (conditions, annotations, Events, PodGroup status) is written after the fact, off the bind path.
One thread writing everything in arrival order fell seconds behind the bindings under load (3,000
`Scheduled` Events after a 1,000-gang burst); several threads keep up, and routing every write about one
object to the same thread keeps that object's writes in the order they were made.
"""

from __future__ import annotations

import logging
import queue
import threading
import zlib
from collections.abc import Callable

log = logging.getLogger(__name__)

_STOP = object()


class WriteLanes:
    def __init__(self, count: int, name: str = "k8s-report") -> None:
        self._queues: list[queue.SimpleQueue[object]] = [queue.SimpleQueue() for _ in range(max(1, count))]
        self._threads = [
            threading.Thread(target=self._run, args=(q,), name=f"{name}-{i}", daemon=True)
            for i, q in enumerate(self._queues)
        ]
        for t in self._threads:
            t.start()

    def put(self, key: str, write: Callable[[], None]) -> None:
        """Runs `write` on the lane of `key` (an object's namespace/name), after the writes before it there."""
        lane = zlib.crc32(key.encode()) % len(self._queues)  # stable across runs, unlike hash()
        self._queues[lane].put(write)

    def flush(self, timeout: float = 10.0) -> bool:
        """Waits until every write handed in so far is done (or failed)."""
        marks = [threading.Event() for _ in self._queues]
        for q, mark in zip(self._queues, marks):
            q.put(mark)
        return all(mark.wait(timeout) for mark in marks)

    def close(self, timeout: float = 5.0) -> None:
        for q in self._queues:
            q.put(_STOP)
        for t in self._threads:
            t.join(timeout)

    @staticmethod
    def _run(q: queue.SimpleQueue[object]) -> None:
        while True:
            item = q.get()
            if item is _STOP:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            try:
                item()  # type: ignore[operator]
            except Exception as exc:  # best effort: the next report of the object says it again
                log.warning("status write failed: %s", exc)
