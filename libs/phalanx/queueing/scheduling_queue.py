"""The scheduling queue: the facade over its parts, ordered so gangs never interleave.

Parts, one job each: the active sub-queue and its order (active.py; DRF shares among tenants, drf.py; the
gangs' places in line, gangs.py), the backoff area (backoff.py), the unschedulable area (unschedulable.py),
loans to consumer schedulers (loans.py), and which unschedulable entries an event may help (hint_moves.py).
Each pod is one Entry (entry.py). This class holds the lock and moves entries between the parts.

Pops hand out whole units: every active pod of the head pod's gang comes out together. A failed gang whose
pods all wait for an event that may help them keeps its creation time (see gang_failed).

Time is whatever the caller says it is (`now`), so the same queue runs on a wall clock or a virtual one;
only consumers' leases run on `monotonic` (wall-clock time).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from phalanx.queueing.active import ActiveQueue
from phalanx.queueing.backoff import Backoff
from phalanx.queueing.drf import Shares
from phalanx.queueing.entry import Entry, SubQueue
from phalanx.queueing.gangs import Gangs
from phalanx.queueing.hint_moves import HintMoves
from phalanx.queueing.hints import Freed, Hint
from phalanx.queueing.loans import Loans
from phalanx.queueing.settings import QueueSettings
from phalanx.queueing.unschedulable import Unschedulable


class Outcome(str, Enum):
    ASSUMED = "assumed"
    BOUND = "bound"
    UNSCHEDULABLE = "unschedulable"
    BACKOFF = "backoff"
    DROPPED = "dropped"


# The outcomes after which the queue holds the pod no more (the scheduler holds it, or nobody should).
FORGETTING = frozenset({Outcome.ASSUMED, Outcome.BOUND, Outcome.DROPPED})


@dataclass
class QueueStats:
    active: int = 0
    backoff: int = 0
    unschedulable: int = 0
    in_flight: int = 0
    next_ready_at: float | None = None


log = logging.getLogger(__name__)


class SchedulingQueue:
    def __init__(self, settings: QueueSettings | None = None, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings or QueueSettings()
        self._lock = threading.Condition()
        self._entries: dict[str, Entry] = {}
        versions = itertools.count(1)  # heap stamps, one sequence for active and backoff
        self._gangs = Gangs()
        self._shares = Shares(self.settings)
        self._active = ActiveQueue(self._entries, self._gangs, self._shares, versions)
        self._backoff = Backoff(self._entries, self.settings, versions)
        self._unschedulable = Unschedulable(self.settings)
        self._loans = Loans(self._entries, self.settings, monotonic)
        self._moves = HintMoves(self._entries, self._unschedulable, self._gangs, self._active.sort_key)
        self._closed = False  # the service is stopping: long polls end at once, with nothing popped

    @property
    def returned_loans(self) -> int:
        """Pods that came back from a restarted or silent consumer."""
        return self._loans.returned

    @property
    def moves_skipped(self) -> int:
        """Unschedulable pods an event left where they were (its hints said it cannot help)."""
        return self._moves.skipped

    # -- moving entries between the parts ---------------------------------------------------------
    def _to_active(self, e: Entry) -> None:
        self._unschedulable.discard(e.key)
        self._active.push(e)
        self._lock.notify_all()

    def _leave(self, e: Entry) -> None:
        """Takes e out of whatever sub-queue holds it (heaps are cleaned lazily by version)."""
        self._unschedulable.discard(e.key)
        if e.where == SubQueue.IN_FLIGHT:
            self._loans.end(e)
        if e.where == SubQueue.ACTIVE:
            self._active.discard(e)
        e.version = -1

    def _put(self, e: Entry) -> None:
        self._entries[e.key] = e
        self._shares.joined(e)
        self._gangs.join(e)

    def _forget(self, e: Entry) -> None:
        """e leaves the queue."""
        self._leave(e)
        del self._entries[e.key]
        self._shares.left(e)
        self._gangs.leave(e)

    # -- intake ----------------------------------------------------------------------------------
    def add(
        self,
        key: str,
        *,
        priority: int,
        created_at: float,
        gang: str,
        gang_created_at: float,
        payload: Any,
        now: float,
        only_missing: bool = False,
        tenant: str = "",
        queue_policy: str = "",
    ) -> bool:
        """Adds (or replaces) a pod; returns False when `only_missing` and the queue already holds it."""
        with self._lock:
            old = self._entries.get(key)
            if old is not None and only_missing:
                return False
            if old is not None:
                if old.where == SubQueue.IN_FLIGHT:
                    old.payload = payload  # the scheduler's verdict on the old copy still applies
                    return True
                self._moves.settled(key)
                self._forget(old)
            self._gangs.created(gang, gang_created_at)
            e = Entry(key, priority, created_at, gang, gang_created_at, payload)
            e.tenant = self._shares.tenant(tenant, queue_policy)
            if old is not None:
                e.attempts = old.attempts
            self._put(e)
            self._to_active(e)
            return True

    def remove(self, keys: list[str]) -> int:
        removed = 0
        with self._lock:
            for key in keys:
                self._moves.settled(key)
                e = self._entries.get(key)
                if e is not None:
                    self._forget(e)
                    removed += 1
        return removed

    def set_shares(self, shares: Mapping[str, float], capacity: Mapping[str, int] | None = None) -> None:
        """The tenants' dominant shares now (DRF), as the scheduler counts them from what their pods hold,
        and the cluster's capacity the shares are of (cpu, memory, GPU milli), with which a pop charges the
        jobs it hands out until the next report. The active sub-queue is re-ordered when a share of a
        tenant with pods here changed. Tenants not named keep their last share."""
        with self._lock:
            if self._shares.report(shares, capacity):
                self._active.reorder()
                self._lock.notify_all()

    # -- popping ---------------------------------------------------------------------------------
    def _flush(self, now: float) -> None:
        """Moves to active what is due: loans of silent consumers, ended backoffs, the unschedulable flush."""
        for e in self._loans.expire():
            self._to_active(e)
        for e in self._backoff.due(now):
            self._to_active(e)
        for e in self._unschedulable.due(now):
            self._to_active(e)

    def _take(self, e: Entry, consumer: str) -> None:
        self._leave(e)
        e.move_seq_at_pop = self._moves.seq
        self._loans.lend(e, consumer)
        self._shares.charge(e)

    def pop(
        self,
        max_pods: int,
        now: float,
        wait_seconds: float = 0.0,
        consumer: str = "",
        incarnation: str = "",
        still_wanted: Callable[[], bool] | None = None,
    ) -> list[Entry]:
        """Pops whole units in queue order until at least `max_pods` pods (a gang is never split), lent
        to `consumer` (see loans.py). A pop that waited (a long poll) pops nothing if `still_wanted()` says
        its caller is gone by then (wake() ends the wait early): pods lent to a call nobody reads would stay
        in flight for as long as that consumer keeps popping."""
        with self._lock:
            for e in self._loans.heard_from(consumer, incarnation):
                self._to_active(e)
            self._flush(now)
            released = self._moves.release_deferred()
            if released is not None:
                self._move(released, now)
            if not self._active and wait_seconds > 0 and not self._closed:
                self._lock.wait(timeout=wait_seconds)
                if self._closed or (still_wanted is not None and not still_wanted()):
                    return []
                self._flush(now)
            out: list[Entry] = []
            while len(out) < max(max_pods, 1):
                head = self._active.pop_head()
                if head is None:
                    break
                unit = self._active.unit(head)
                for e in unit:
                    self._take(e, consumer)
                out.extend(unit)
            return out

    def wake(self) -> None:
        """Ends every long poll's wait now (a caller went away: each checks whether it is still wanted)."""
        with self._lock:
            self._lock.notify_all()

    def close(self) -> None:
        """The service is stopping: long polls return empty now and no pop waits again, so no server thread
        outlives the stop in a wait."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()

    # -- results ---------------------------------------------------------------------------------
    def done(
        self,
        key: str,
        outcome: Outcome,
        now: float,
        payload: Any = None,
        *,
        priority: int = 0,
        created_at: float = 0.0,
        gang: str = "",
        gang_created_at: float = 0.0,
        hint: Hint | None = None,
        tenant: str = "",
        queue_policy: str = "",
    ) -> None:
        """Records what became of a popped pod; a pod not in the queue (a released reservation) is re-added.
        `hint`: for an unschedulable pod, what may make it schedulable (None: any cluster event)."""
        with self._lock:
            self._moves.settled(key)
            e = self._entries.get(key)
            if outcome in FORGETTING:
                if e is not None:
                    self._forget(e)
                return
            if e is None:
                if payload is None:
                    return
                e = Entry(key, priority, created_at, gang, gang_created_at, payload)
                e.tenant = self._shares.tenant(tenant, queue_policy)
                e.move_seq_at_pop = self._moves.seq
                self._put(e)
                self._gangs.created(gang, gang_created_at)
            else:
                self._leave(e)
                e.where = SubQueue.BACKOFF  # out of flight; placed properly just below
                if payload is not None:
                    e.payload = payload
            e.attempts += 1
            e.hint = hint if outcome == Outcome.UNSCHEDULABLE else None
            # A cluster event while the pod was being scheduled may have made it schedulable: retry it.
            if outcome == Outcome.BACKOFF or self._moves.missed(e):
                self._backoff.push(e, now)  # out of every sub-queue already
                log.debug("%s: %s -> backoff until %.3f (attempt %d)", key, outcome.value, e.backoff_until, e.attempts)
            else:
                log.debug("%s: unschedulable until a cluster event (move %d)", key, self._moves.seq)
                self._unschedulable.add(e, now)

    def gang_failed(self, gang: str, now: float) -> None:
        """The gang's attempt failed (its pods' verdicts are in). A gang that comes back on a timer (backoff,
        or already active) sorts by `now`, behind the others, so it cannot take the head at every retry. A
        gang whose pods all wait for an event that may help them keeps (or gets back) its creation time: an
        event moves only a budget of the waiting gangs (see HintMoves._budgeted), so a failure time would put
        the gangs tried first behind those held back, which were never tried, and freed capacity would go out
        of turn (a burst that packs perfectly in arrival order lost a wave to it)."""
        with self._lock:
            members = [self._entries[k] for k in self._gangs.members(gang)]
            if members and all(e.where == SubQueue.UNSCHEDULABLE for e in members):
                self._gangs.keeps_turn(gang)
            else:
                self._gangs.failed(gang, now)
            for key in self._active.gang(gang):  # re-sorted by the gang's new place
                self._to_active(self._entries[key])

    def activate_gang(self, gang: str, now: float) -> int:
        """The gang made progress (or was declared or changed): its pods waiting in backoff or
        unschedulable go back to active (and its pods in flight count it as an event, see done)."""
        moved = 0
        with self._lock:
            self._moves.gang_activated(gang)
            for key in list(self._gangs.members(gang)):
                e = self._entries[key]
                if e.where in (SubQueue.BACKOFF, SubQueue.UNSCHEDULABLE):
                    self._to_active(e)
                    moved += 1
        return moved

    def move_all(self, now: float, freed: Sequence[Freed] | None = None) -> int:
        """A cluster event: unschedulable pods get another try. Without `freed` (a node added or changed,
        an event that says nothing) every one moves; with it (capacity changes, per node), only the pods
        whose hints say it may help them, whole gangs, and gangs with slot counts a few at a time (see
        hint_moves.py). Returns how many pods moved."""
        with self._lock:
            targets = self._moves.event(tuple(freed) if freed else None)
            return self._move(targets, now) if targets is not None else 0

    def _move(self, targets: list[Entry], now: float) -> int:
        """Moves unschedulable entries an event may help: to active, or to backoff while their delay runs."""
        log.debug("move %d: %d of %d unschedulable pods", self._moves.seq, len(targets), len(self._unschedulable))
        for e in targets:
            if e.backoff_until > now:
                self._unschedulable.discard(e.key)
                self._backoff.keep(e)
            else:
                self._to_active(e)
        return len(targets)

    def release_in_flight(self, now: float) -> int:
        released = 0
        with self._lock:
            for e in self._entries.values():
                if e.where == SubQueue.IN_FLIGHT:
                    self._loans.end(e)
                    self._to_active(e)
                    released += 1
        return released

    # -- reading ---------------------------------------------------------------------------------
    def stats(self, now: float) -> QueueStats:
        with self._lock:
            self._flush(now)
            s = QueueStats()
            for e in self._entries.values():
                setattr(s, e.where.value, getattr(s, e.where.value) + 1)
            s.next_ready_at = self._next_ready_at()
            return s

    def counts(self) -> dict[str, int]:
        """Pods per sub-queue as they stand (no flush: unlike stats, needs no `now`), for /metrics."""
        with self._lock:
            out = dict.fromkeys((q.value for q in SubQueue), 0)
            for e in self._entries.values():
                out[e.where.value] += 1
            return out

    def _next_ready_at(self) -> float | None:
        times = (self._backoff.next_ready_at(), self._unschedulable.flush_at())
        return min((t for t in times if t is not None), default=None)

    def next_ready_at(self) -> float | None:
        with self._lock:
            return self._next_ready_at()

    def __len__(self) -> int:
        return len(self._entries)
