"""The queue's outbox: adds, removes, verdicts and moves collected from the feed's batches, flushed to the queue in order.

What the queue fails to take is kept and sent again with the next flush: the feed never forgets a pod
because the queue was briefly unreachable.

A gang's pods are created one after the other (a job controller's POSTs, a few milliseconds apart), so a
new gang's first pods reach the feed before the rest. Sent at once, the scheduler would place them alone,
report the gang waiting (an Event, a PodGroup status write) and place the rest in another step. With `hold`,
pods of a gang with fewer pods known than its minimum wait here, at most `hold` seconds from the first of
them, and go to the queue together once the minimum is known. Held pods are only in this process's memory:
if it dies, the next leader lists them from the API server as it does every pending pod.

The rebuild lists every pending pod at once (3,000 of a burst took the queue ~0.3 s to take, under the
scheduler's lock, before the loop could start). So the rebuild's flush sends only the first `first_adds`
pods in the queue's order and keeps the rest: the feed takes them (`take_adds`, under the lock) and sends
them in chunks without the lock (`send_adds`) while the loop already schedules the first. The outbox is the
feed thread's alone, so nothing is staged between the take and the send; what the queue fails to take is
staged again. If the scheduler dies in between, the pods not sent are in no memory but the API server's, and
the next leader lists them as it lists every pending pod.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from phalanx import faults
from phalanx.framework.snapshot import Snapshot
from phalanx.model.objects import PodInfo
from phalanx.queueing.hints import FreedCapacity
from phalanx.scheduling.hints import refresh_freed
from phalanx.scheduling.ports import Carry, Verdict
from phalanx.telemetry.failures import rpc_failure

log = logging.getLogger(__name__)


class FeedQueue(Protocol):
    """The queue client; one that also has `on_restart(listener)` gets its pods re-added after a queue restart."""

    def add(self, pods: list[PodInfo], now: float, only_missing: bool = False) -> Any: ...

    def remove(self, keys: list[str]) -> None: ...

    def done(self, verdicts: list[Verdict], activate: list[str], failed: list[str], now: float) -> None: ...

    def move_all(self, event: str, now: float, freed: FreedCapacity | None = None) -> None: ...


@dataclass
class _Pending:
    """Queue calls not yet delivered."""

    add: dict[str, PodInfo] = field(default_factory=dict)
    remove: set[str] = field(default_factory=set)
    verdicts: list[Verdict] = field(default_factory=list)
    activate: set[str] = field(default_factory=set)  # gangs declared or changed: their pods get another try
    move_all: bool = False  # nodes added or changed: every unschedulable pod gets another try
    freed: FreedCapacity = field(default_factory=FreedCapacity)  # capacity freed: the pods it may help do

    def any(self) -> bool:
        return bool(self.add or self.remove or self.verdicts or self.activate or self.move_all or self.freed)


class QueueOutbox:
    def __init__(
        self,
        queue: FeedQueue,
        snapshot: Callable[[], Snapshot],
        delivered: Callable[[list[Verdict]], None] = lambda _verdicts: None,
        *,
        hold: float = 0.0,
        gathered: Callable[[str], bool] = lambda _gang: True,
    ) -> None:
        """`gathered(gang)`: whether as many of the gang's pods are known as its minimum (or nothing is to be
        gained by waiting); `hold`: seconds a pod of a gang not gathered yet may wait for the rest."""
        self.queue = queue
        self._snapshot = snapshot  # the scheduler's, for the current amounts of freed capacity
        self._delivered = delivered  # told of the verdicts the queue took (the mirror: what it forgot)
        self._ops = _Pending()
        self.hold = hold
        self._gathered = gathered
        self._held_since: dict[str, float] = {}  # gang -> when its first held pod was first flushed

    def pending(self) -> bool:
        return self._ops.any()

    def next_release(self) -> float | None:
        """When the longest-held gang's pods go to the queue whether gathered or not (None: none held)."""
        return min(self._held_since.values()) + self.hold if self._held_since else None

    def stage(self, add: Mapping[str, PodInfo], remove: Iterable[str], carry: Carry | None = None) -> None:
        """Adds and removes of one batch (an add wins over a remove of the same pod), and what the scheduler's
        cluster-event handlers carry for the queue."""
        ops = self._ops
        for key in set(remove) - add.keys():
            ops.add.pop(key, None)
            ops.remove.add(key)
        for key, pod in add.items():
            ops.remove.discard(key)
            ops.add[key] = pod
        if carry is not None:
            ops.verdicts += carry.verdicts
            ops.activate.update(carry.activate)  # a gang declared or changed: its own pods may be schedulable now
            ops.move_all = ops.move_all or carry.move_all
            ops.freed.merge(carry.freed)

    def move_all(self) -> None:
        """Every unschedulable pod gets another try, as a node event gives it."""
        self._ops.move_all = True

    def add_missing(self, pods: list[PodInfo], now: float) -> None:
        """Pods the queue may have lost, added at once; those it still holds stay where they are."""
        if pods:
            self.queue.add(pods, now, only_missing=True)

    def flush(self, now: float, first_adds: int = 0) -> bool:
        """Sends what is staged (held pods once due); False if the queue did not answer (kept for the next).
        `first_adds` > 0: of the adds due, about that many go (first in the queue's order, whole gangs); the
        rest stay staged for take_adds."""
        ops = self._ops
        try:
            if ops.remove:
                self.queue.remove(sorted(ops.remove))
                ops.remove.clear()
            due = self._due(now)
            if first_adds > 0:
                due = in_queue_order(due)
                due = due[: _gang_boundary(due, first_adds)]
            if due:
                self.queue.add(due, now)
                for pod in due:
                    ops.add.pop(pod.key, None)
            if ops.verdicts or ops.activate:
                self.queue.done(ops.verdicts, sorted(ops.activate), [], now)
                self._delivered(ops.verdicts)
                ops.verdicts = []
                ops.activate = set()
            if ops.move_all:
                self.queue.move_all("cluster-changed", now)
                ops.move_all = False
                ops.freed = FreedCapacity()
            elif ops.freed:
                refresh_freed(ops.freed, self._snapshot())  # current amounts, should this be a retry
                self.queue.move_all("capacity-freed", now, ops.freed)
                ops.freed = FreedCapacity()
        except Exception as exc:
            log.warning("cluster feed: the queue did not answer (%s); retrying", rpc_failure(exc))
            return False
        return True

    def take_adds(self, now: float) -> list[PodInfo]:
        """The adds due now, in the queue's order, taken out of the outbox for send_adds. The caller holds the
        scheduler's lock (whether a gang has gathered reads the scheduler's gangs)."""
        due = in_queue_order(self._due(now))
        for pod in due:
            self._ops.add.pop(pod.key, None)
        return due

    def send_adds(self, pods: list[PodInfo], now: float, chunk: int) -> bool:
        """Sends take_adds' pods, `chunk` at a time, without the scheduler's lock; False if the queue did not
        answer, with the pods not sent staged again for the next flush."""
        start = 0
        while start < len(pods):
            end = _gang_boundary(pods, start + chunk)
            faults.reached("scheduler.mid_backlog")  # pods[start:] are in no memory but this one's and the API server's
            try:
                self.queue.add(pods[start:end], now)
            except Exception as exc:
                log.warning("cluster feed: the queue did not answer (%s); retrying", rpc_failure(exc))
                for pod in pods[start:]:
                    self._ops.add.setdefault(pod.key, pod)
                return False
            start = end
        return True

    def _due(self, now: float) -> list[PodInfo]:
        """The staged adds to send now: all of them, but for pods of gangs not gathered whose hold runs."""
        adds = self._ops.add
        if self.hold <= 0 or not adds:
            self._held_since.clear()  # held pods all deleted: nothing to wake up for
            return list(adds.values())
        waits: dict[str, bool] = {}  # gang -> whether its pods stay (asked once per gang and flush)
        for pod in adds.values():
            if not pod.gang or pod.gang in waits:
                continue
            if self._gathered(pod.gang):
                waits[pod.gang] = False
                continue
            held_for = now - self._held_since.setdefault(pod.gang, now)
            # (a wall clock set back makes it negative: sent then, rather than held for the difference)
            waits[pod.gang] = 0 <= held_for < self.hold
        # A gang sent (gathered, due, or its pods removed) is held afresh should more of its pods come alone.
        self._held_since = {g: t for g, t in self._held_since.items() if waits.get(g)}
        return [p for p in adds.values() if not (p.gang and waits[p.gang])]


def in_queue_order(pods: list[PodInfo]) -> list[PodInfo]:
    """`pods` as the queue orders them, near enough to choose which go first: higher priority, then the
    gang's creation time (a pod's own without a gang), then the gang's (or pod's) name, then the pod's name.
    A gang sorts by its highest priority, so its pods are adjacent. The queue's DRF order also weighs
    tenants' shares, which only the queue holds: a pod that goes later than it would sort there waits as long
    as one created a moment later would."""
    top: dict[str, int] = {}
    for p in pods:
        if p.gang:
            top[p.gang] = max(top.get(p.gang, p.priority), p.priority)
    return sorted(
        pods,
        key=lambda p: (
            -top[p.gang] if p.gang else -p.priority,
            p.gang_created_at if p.gang else p.created_at,
            p.gang or p.key,
            p.key,
        ),
    )


def _gang_boundary(ordered: list[PodInfo], end: int) -> int:
    """`end`, moved past the pods of the gang it would cut (in_queue_order keeps a gang's pods adjacent):
    a gang goes to the queue whole, never split across two sends (its first pods alone would be placed and
    reported waiting while the rest are on their way)."""
    while 0 < end < len(ordered) and ordered[end].gang and ordered[end].gang == ordered[end - 1].gang:
        end += 1
    return min(end, len(ordered))
