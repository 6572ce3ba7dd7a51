"""The scheduling queue: active, backoff and unschedulable sub-queues, ordered so gangs never interleave.

Order of the active sub-queue: higher priority first; then the gang's time (its creation time, or, while a
failed gang is retried on a timer, the time it last failed, so it cannot take the head at every retry), or
the pod's own creation time for a pod without a gang; then the gang's (or pod's) namespace/name; then the
pod's name. Pops hand out whole units: every active pod of the head pod's gang comes out together. A failed
gang whose pods all wait for an event that may help them keeps its creation time (see gang_failed).

Time is whatever the caller says it is (`now`), so the same queue runs on a wall clock or a virtual one.

Popped pods are lent, not given: each pop names its consumer (and the consumer's incarnation). A pod
stays in flight until its consumer reports a verdict; if the consumer restarts (same name, new
incarnation) or is not heard from for `lease_seconds` of wall-clock time, its pods return to the active
sub-queue, so a crashed or stuck scheduler cannot strand them. A consumer that did place such a pod
answers it with its reservation when it pops it again, so a premature return costs a pop, not a pod.

Queueing hints (see hints.py): an unschedulable pod keeps the hint its verdict carried, and an event that
only changed capacity moves just the pods it may help; a gang moves whole when any of its pods may be
helped. Gangs helped by their slot counts (Strict gangs) move MOVE_BUDGET pods at a time in queue order: the
others wait until those are answered, then are judged again on the counts the scheduler's reports (with
the capacity the moved ones took) have left, so capacity for one gang is not tried by every waiting gang. A
pod answered unschedulable after an event that happened while it was in flight goes to backoff only if that
event may help it (recent events are remembered for this).
"""

from __future__ import annotations

import heapq
import logging
import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from phalanx.model.gpu import gpu_milli
from phalanx.model.policies import PRIORITY_QUEUE_POLICY, is_drf
from phalanx.queueing.hints import Freed, Hint, helps, still_fits


class SubQueue(str, Enum):
    ACTIVE = "active"
    BACKOFF = "backoff"
    UNSCHEDULABLE = "unschedulable"
    IN_FLIGHT = "in_flight"


class Outcome(str, Enum):
    ASSUMED = "assumed"
    BOUND = "bound"
    UNSCHEDULABLE = "unschedulable"
    BACKOFF = "backoff"
    DROPPED = "dropped"


@dataclass
class Entry:
    key: str
    priority: int
    created_at: float
    gang: str
    gang_created_at: float
    payload: Any
    where: SubQueue = SubQueue.ACTIVE
    attempts: int = 0
    backoff_until: float = 0.0
    unschedulable_since: float = 0.0
    move_seq_at_pop: int = 0
    version: int = 0
    lent_to: str = ""  # consumer name while in flight
    hint: Hint | None = None  # while unschedulable: what may help it (None: any event)
    tenant: str = ""  # a DRF job's tenant, whose dominant share orders it; "" for a job ordered by priority


@dataclass
class QueueSettings:
    initial_backoff: float = 1.0
    max_backoff: float = 10.0
    # Unschedulable pods are retried after this long even without a cluster event; 0 disables it.
    unschedulable_flush: float = 300.0
    # Wall-clock seconds a consumer may stay silent before the pods it borrowed come back; 0 disables it.
    lease_seconds: float = 60.0
    # Jobs naming no job-queue policy: "Priority" (priority, then age) or "DRF" (see set_shares).
    job_queue_policy: str = PRIORITY_QUEUE_POLICY


@dataclass
class QueueStats:
    active: int = 0
    backoff: int = 0
    unschedulable: int = 0
    in_flight: int = 0
    next_ready_at: float | None = None


@dataclass(order=True)
class _HeapItem:
    sort_key: tuple[Any, ...]
    version: int
    key: str = field(compare=False)


log = logging.getLogger(__name__)


@dataclass
class _Consumer:
    incarnation: str
    last_seen: float
    lent: set[str] = field(default_factory=set)


# Events remembered for pods in flight (see done); a pod popped before the oldest one remembered counts as
# having missed an event that helps it.
MAX_EVENT_LOG = 4096

# Pods of gangs moved at once by their slot counts (see _budgeted); the others wait until those are answered.
MOVE_BUDGET = 64

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


class SchedulingQueue:
    def __init__(self, settings: QueueSettings | None = None, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings or QueueSettings()
        self._monotonic = monotonic
        self._consumers: dict[str, _Consumer] = {}
        self.returned_loans = 0  # pods that came back from a restarted or silent consumer
        self._entries: dict[str, Entry] = {}
        self._active: list[_HeapItem] = []
        self._backoff: list[tuple[float, int, str]] = []
        self._gang_active: dict[str, set[str]] = {}
        self._by_gang: dict[str, set[str]] = {}  # every entry of a gang, for activate_gang
        self._unschedulable: dict[str, Entry] = {}  # in the order they became unschedulable
        self._gang_time: dict[str, float] = {}  # a gang's creation time, as its first pod here said
        self._failed_at: dict[str, float] = {}  # a failed gang retried on a timer: when it failed (see gang_failed)
        self._move_seq = 0
        # (seq, event) of recent moves: None (every pod), a tuple of Freed, or a gang name (that gang's pods).
        self._events: deque[tuple[int, Any]] = deque(maxlen=MAX_EVENT_LOG)
        self.moves_skipped = 0  # unschedulable pods an event left where they were (its hints said it cannot help)
        self._deferred: dict[str, None] = {}  # gangs an event may help, held back until _budget_moved is answered
        self._budget_moved: set[str] = set()  # pods moved by a budget and not answered yet
        self._version = 0
        # DRF: each tenant's dominant share (what its pods hold, over the cluster), as the scheduler last
        # reported it; and how many entries each tenant has, so a report about others costs nothing.
        self._shares: dict[str, float] = {}
        self._capacity: dict[str, int] = {}
        self._tenant_entries: Counter[str] = Counter()
        self._lock = threading.Condition()

    # -- ordering --------------------------------------------------------------------------------
    def _sort_key(self, e: Entry) -> tuple[Any, ...]:
        # Priority first under either policy; then a DRF job's tenant share (a job ordered by priority
        # alone counts as share 0), then age.
        share = self._shares.get(e.tenant, 0.0) if e.tenant else 0.0
        if e.gang:
            gang_time = self._failed_at.get(e.gang, self._gang_time.get(e.gang, e.gang_created_at))
            return (-e.priority, share, gang_time, e.gang, e.key)
        return (-e.priority, share, e.created_at, e.key, e.key)

    def _tenant(self, tenant: str, queue_policy: str) -> str:
        return tenant if tenant and is_drf(queue_policy, self.settings.job_queue_policy) else ""

    def set_shares(self, shares: Mapping[str, float], capacity: Mapping[str, int] | None = None) -> None:
        """The tenants' dominant shares now (DRF), as the scheduler counts them from what their pods hold,
        and the cluster's capacity the shares are of (cpu, memory, GPU milli), with which a pop charges the
        jobs it hands out until the next report. The active sub-queue is re-ordered when a share of a
        tenant with pods here changed. Tenants not named keep their last share."""
        with self._lock:
            if capacity:
                self._capacity = {r: v for r, v in capacity.items() if v > 0}
            changed = {t for t, v in shares.items() if self._shares.get(t) != v}
            if not changed:
                return
            self._shares.update(shares)
            if not any(self._tenant_entries.get(t) for t in changed):
                return
            self._active = [
                _HeapItem(self._sort_key(e), e.version, e.key)
                for e in self._entries.values()
                if e.where == SubQueue.ACTIVE
            ]
            heapq.heapify(self._active)
            self._lock.notify_all()

    def _charge(self, e: Entry) -> None:
        """Adds a popped DRF pod's own dominant share to its tenant's, as if it were placed: the next pod of
        that tenant in this pop then sorts where it would once this one holds its resources. An upper
        bound (a share is the max over resources); the scheduler's next report replaces it."""
        if not e.tenant or not self._capacity:
            return
        requests = getattr(e.payload, "requests", None)
        if requests is None:  # a local queue's payload carries the pod
            requests = getattr(getattr(e.payload, "pod", None), "requests", {})
        asked = {
            "cpu": requests.get("cpu", 0),
            "memory": requests.get("memory", 0),
            "gpu": gpu_milli(requests),
        }
        own = max((asked[r] / cap for r, cap in self._capacity.items() if r in asked), default=0.0)
        self._shares[e.tenant] = self._shares.get(e.tenant, 0.0) + own

    def _to_active(self, e: Entry) -> None:
        self._unschedulable.pop(e.key, None)
        self._version += 1
        e.version = self._version
        e.where = SubQueue.ACTIVE
        heapq.heappush(self._active, _HeapItem(self._sort_key(e), e.version, e.key))
        if e.gang:
            self._gang_active.setdefault(e.gang, set()).add(e.key)
        self._lock.notify_all()

    def _leave(self, e: Entry) -> None:
        """Takes e out of whatever sub-queue holds it (heaps are cleaned lazily by version)."""
        self._unschedulable.pop(e.key, None)
        if e.where == SubQueue.IN_FLIGHT:
            self._end_loan(e)
        if e.where == SubQueue.ACTIVE and e.gang:
            members = self._gang_active.get(e.gang)
            if members is not None:
                members.discard(e.key)
                if not members:
                    del self._gang_active[e.gang]
        e.version = -1

    def _to_backoff(self, e: Entry, now: float) -> None:
        self._unschedulable.pop(e.key, None)
        delay = backoff_delay(e.attempts, self.settings.initial_backoff, self.settings.max_backoff)
        e.backoff_until = now + delay
        e.where = SubQueue.BACKOFF
        self._version += 1
        e.version = self._version
        heapq.heappush(self._backoff, (e.backoff_until, e.version, e.key))

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
                self._settled(key)
                self._leave(old)
                self._drop(old)
            if gang and gang not in self._gang_time:
                self._gang_time[gang] = gang_created_at
            e = Entry(key, priority, created_at, gang, gang_created_at, payload)
            e.tenant = self._tenant(tenant, queue_policy)
            if old is not None:
                e.attempts = old.attempts
            self._put(e)
            self._to_active(e)
            return True

    def _put(self, e: Entry) -> None:
        self._entries[e.key] = e
        if e.tenant:
            self._tenant_entries[e.tenant] += 1
        if e.gang:
            self._by_gang.setdefault(e.gang, set()).add(e.key)

    def _drop(self, e: Entry) -> None:
        del self._entries[e.key]
        if e.tenant:
            self._tenant_entries[e.tenant] -= 1
            if self._tenant_entries[e.tenant] <= 0:
                del self._tenant_entries[e.tenant]
        if e.gang:
            members = self._by_gang.get(e.gang)
            if members is not None:
                members.discard(e.key)
                if not members:
                    del self._by_gang[e.gang]
                    # The gang's place in line goes with its last pod: kept, it would grow with every gang ever
                    # seen. A pod of it added later starts from its creation time again.
                    self._gang_time.pop(e.gang, None)
                    self._failed_at.pop(e.gang, None)

    def remove(self, keys: list[str]) -> int:
        removed = 0
        with self._lock:
            for key in keys:
                self._settled(key)
                e = self._entries.get(key)
                if e is not None:
                    self._leave(e)
                    self._drop(e)
                    removed += 1
        return removed

    # -- popping ---------------------------------------------------------------------------------
    def _flush(self, now: float) -> None:
        self._expire_loans()
        while self._backoff and self._backoff[0][0] <= now:
            _, version, key = heapq.heappop(self._backoff)
            e = self._entries.get(key)
            if e is not None and e.version == version and e.where == SubQueue.BACKOFF:
                self._to_active(e)
        flush = self.settings.unschedulable_flush
        if flush > 0:
            # Oldest first (entries join in time order): stop at the first that is not due yet.
            for e in list(self._unschedulable.values()):
                if now - e.unschedulable_since < flush:
                    break
                self._to_active(e)

    def _pop_head(self) -> Entry | None:
        while self._active:
            item = heapq.heappop(self._active)
            e = self._entries.get(item.key)
            if e is not None and e.version == item.version and e.where == SubQueue.ACTIVE:
                if e.tenant:
                    # Its tenant may have been charged since it was pushed (shares only grow within a pop):
                    # a key that grew goes back in line.
                    key = self._sort_key(e)
                    if key != item.sort_key:
                        heapq.heappush(self._active, _HeapItem(key, item.version, item.key))
                        continue
                return e
        return None

    def _take(self, e: Entry, consumer: str) -> None:
        self._leave(e)
        e.where = SubQueue.IN_FLIGHT
        e.move_seq_at_pop = self._move_seq
        e.lent_to = consumer
        self._consumers[consumer].lent.add(e.key)

    def _end_loan(self, e: Entry) -> None:
        c = self._consumers.get(e.lent_to)
        if c is not None:
            c.lent.discard(e.key)
        e.lent_to = ""

    # -- loans -----------------------------------------------------------------------------------
    def _heard_from(self, consumer: str, incarnation: str) -> None:
        """A pop renews the consumer's lease; a new incarnation means the old one's pods are lost to it."""
        c = self._consumers.get(consumer)
        if c is not None and c.incarnation != incarnation:
            self._return_loans(c)
        if c is None or c.incarnation != incarnation:
            c = self._consumers[consumer] = _Consumer(incarnation, self._monotonic())
        c.last_seen = self._monotonic()

    def _expire_loans(self) -> None:
        lease = self.settings.lease_seconds
        if lease <= 0:
            return
        now = self._monotonic()
        for name, c in list(self._consumers.items()):
            if now - c.last_seen >= lease:
                self._return_loans(c)
                del self._consumers[name]

    def _return_loans(self, c: _Consumer) -> None:
        for key in sorted(c.lent):
            e = self._entries.get(key)
            if e is not None and e.where == SubQueue.IN_FLIGHT:
                e.lent_to = ""
                self._to_active(e)
                self.returned_loans += 1
        c.lent.clear()

    def pop(
        self, max_pods: int, now: float, wait_seconds: float = 0.0, consumer: str = "", incarnation: str = ""
    ) -> list[Entry]:
        """Pops whole units in queue order until at least `max_pods` pods (a gang is never split), lent
        to `consumer` (see the module's docstring)."""
        with self._lock:
            self._heard_from(consumer, incarnation)
            self._flush(now)
            self._release_deferred(now)
            if not self._active and wait_seconds > 0:
                self._lock.wait(timeout=wait_seconds)
                self._flush(now)
            out: list[Entry] = []
            while len(out) < max(max_pods, 1):
                head = self._pop_head()
                if head is None:
                    break
                if not head.gang:
                    self._take(head, consumer)
                    self._charge(head)
                    out.append(head)
                    continue
                unit = [self._entries[k] for k in self._gang_active.get(head.gang, {head.key})]
                unit.sort(key=lambda x: x.key)
                for e in unit:
                    self._take(e, consumer)
                    self._charge(e)
                out.extend(unit)
            return out

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
            self._settled(key)
            e = self._entries.get(key)
            if outcome in (Outcome.ASSUMED, Outcome.BOUND, Outcome.DROPPED):
                if e is not None:
                    self._leave(e)
                    self._drop(e)
                return
            if e is None:
                if payload is None:
                    return
                e = Entry(key, priority, created_at, gang, gang_created_at, payload)
                e.tenant = self._tenant(tenant, queue_policy)
                e.move_seq_at_pop = self._move_seq
                self._put(e)
                if gang and gang not in self._gang_time:
                    self._gang_time[gang] = gang_created_at
            else:
                self._leave(e)
                e.where = SubQueue.BACKOFF  # out of flight; placed properly just below
                if payload is not None:
                    e.payload = payload
            e.attempts += 1
            e.hint = hint if outcome == Outcome.UNSCHEDULABLE else None
            # A cluster event while the pod was being scheduled may have made it schedulable: retry it.
            if outcome == Outcome.BACKOFF or self._missed_event(e):
                self._to_backoff(e, now)
                log.debug("%s: %s -> backoff until %.3f (attempt %d)", key, outcome.value, e.backoff_until, e.attempts)
            else:
                log.debug("%s: unschedulable until a cluster event (move %d)", key, self._move_seq)
                e.where = SubQueue.UNSCHEDULABLE
                e.unschedulable_since = now
                self._unschedulable[key] = e

    def gang_failed(self, gang: str, now: float) -> None:
        """The gang's attempt failed (its pods' verdicts are in). A gang that comes back on a timer (backoff,
        or already active) sorts by `now`, behind the others, so it cannot take the head at every retry. A
        gang whose pods all wait for an event that may help them keeps (or gets back) its creation time: an
        event moves only a budget of the waiting gangs (see _budgeted), so a failure time would put the gangs
        tried first behind those held back, which were never tried, and freed capacity would go out of turn
        (a burst that packs perfectly in arrival order lost a wave to it)."""
        with self._lock:
            members = [self._entries[k] for k in self._by_gang.get(gang, ())]
            if members and all(e.where == SubQueue.UNSCHEDULABLE for e in members):
                self._failed_at.pop(gang, None)
            else:
                self._failed_at[gang] = now
            self._resort_gang(gang)

    def activate_gang(self, gang: str, now: float) -> int:
        """The gang made progress (or was declared or changed): its pods waiting in backoff or
        unschedulable go back to active (and its pods in flight count it as an event, see done)."""
        moved = 0
        with self._lock:
            self._log_event(gang)
            self._deferred.pop(gang, None)
            for key in list(self._by_gang.get(gang, ())):
                e = self._entries[key]
                if e.where in (SubQueue.BACKOFF, SubQueue.UNSCHEDULABLE):
                    self._to_active(e)
                    moved += 1
        return moved

    def move_all(self, now: float, freed: Sequence[Freed] | None = None) -> int:
        """A cluster event: unschedulable pods get another try. Without `freed` (a node added or changed,
        an event that says nothing) every one moves; with it (capacity changes, per node), only the pods
        whose hints say it may help them, whole gangs, and gangs with slot counts a few at a time (see the
        module's docstring). Returns how many pods moved."""
        with self._lock:
            events = tuple(freed) if freed else None
            if events is None:
                self._log_event(None)
                self._deferred.clear()
                return self._move(list(self._unschedulable.values()), now)
            if all(ev.taken_only for ev in events):  # capacity only taken: the counts take it in, nothing moves
                for hint in {id(e.hint): e.hint for e in self._unschedulable.values() if e.hint is not None}.values():
                    helps(hint, events)
                return 0
            self._log_event(events)
            return self._move(self._helped(events), now)

    def _move(self, targets: list[Entry], now: float) -> int:
        log.debug("move %d: %d of %d unschedulable pods", self._move_seq, len(targets), len(self._unschedulable))
        self.moves_skipped += len(self._unschedulable) - len(targets)
        for e in targets:
            if e.backoff_until > now:
                self._to_backoff_keep(e)
            else:
                self._to_active(e)
        return len(targets)

    def _helped(self, events: tuple[Freed, ...]) -> list[Entry]:
        """The unschedulable entries `events` may help: a gang's all when one of its pods may be helped.
        Pods of a unit usually share one hint, so each distinct hint is judged once (every hint with slot
        counts is, so its counts take in every event). Gangs judged by slot counts move a budget at a time."""
        judged: dict[int, bool] = {}
        gangs: dict[str, bool] = {}
        counted: set[str] = set()  # gangs helped by their slot counts
        singles: set[str] = set()
        for e in self._unschedulable.values():
            h = id(e.hint)
            ok = judged.get(h)
            if ok is None:
                ok = judged[h] = helps(e.hint, events)
            if e.gang:
                if ok and not gangs.get(e.gang):
                    gangs[e.gang] = True
                    if e.hint is not None and e.hint.tally is not None:
                        counted.add(e.gang)
                else:
                    gangs.setdefault(e.gang, False)
            elif ok:
                singles.add(e.key)
        moving = {g for g, ok in gangs.items() if ok} - counted
        moving |= self._budgeted(counted | self._deferred.keys())
        return [e for e in self._unschedulable.values() if (e.gang in moving if e.gang else e.key in singles)]

    def _budgeted(self, gangs: set[str]) -> set[str]:
        """Of `gangs` (helped by their slot counts), those to move now, in queue order and up to
        MOVE_BUDGET pods (at least one gang); the others wait in `_deferred` until the moved ones are
        answered, then are judged again on the counts as the scheduler's reports have left them. So the
        capacity one gang finishing frees is tried by a few waiting gangs, not by every one of them."""
        units = []
        for gang in gangs:
            members = [
                self._entries[k]
                for k in self._by_gang.get(gang, ())
                if self._entries[k].where == SubQueue.UNSCHEDULABLE
            ]
            if members:
                units.append((min(self._sort_key(e) for e in members), gang, len(members)))
        units.sort()
        self._deferred.clear()
        moving: set[str] = set()
        budget = MOVE_BUDGET - len(self._budget_moved)
        for _, gang, size in units:
            if size > budget and (moving or self._budget_moved):
                self._deferred[gang] = None
                continue
            moving.add(gang)
            budget -= size
            self._budget_moved.update(
                k for k in self._by_gang[gang] if self._entries[k].where == SubQueue.UNSCHEDULABLE
            )
        return moving

    def _release_deferred(self, now: float) -> None:
        """The gangs last moved by their slot counts were answered: those held back whose counts still add
        up move next (a budget at a time); the others wait for an event as before."""
        if not self._deferred:
            return
        if self._budget_moved:  # answered ones leave the set in done(); this only drops what was lost track of
            self._budget_moved = {
                k
                for k in self._budget_moved
                if (e := self._entries.get(k)) is not None and e.where != SubQueue.UNSCHEDULABLE
            }
            if self._budget_moved:
                return
        still = set()
        for gang in self._deferred:
            members = [
                self._entries[k]
                for k in self._by_gang.get(gang, ())
                if self._entries[k].where == SubQueue.UNSCHEDULABLE
            ]
            if any(still_fits(e.hint) for e in members):
                still.add(gang)
        moving = self._budgeted(still)
        self._move([e for e in self._unschedulable.values() if e.gang in moving], now)

    def _settled(self, key: str) -> None:
        """A pod moved by a budget was answered (or left the queue)."""
        if self._budget_moved:
            self._budget_moved.discard(key)

    def _log_event(self, event: Any) -> None:
        self._move_seq += 1
        self._events.append((self._move_seq, event))

    def _missed_event(self, e: Entry) -> bool:
        """Did an event that may help `e` happen since it was popped?"""
        since = e.move_seq_at_pop
        if since == self._move_seq:
            return False
        if not self._events or self._events[0][0] > since + 1:
            return True  # older than what is remembered
        missed = []
        for seq, event in reversed(self._events):
            if seq <= since:
                break
            if event is None or event == e.gang:
                return True
            if not isinstance(event, str):
                missed.append(event)
        # Oldest first: a gang hint keeps each node's latest slots (see hints.py).
        return any(helps(e.hint, event) for event in reversed(missed))

    def _to_backoff_keep(self, e: Entry) -> None:
        self._unschedulable.pop(e.key, None)
        e.where = SubQueue.BACKOFF
        self._version += 1
        e.version = self._version
        heapq.heappush(self._backoff, (e.backoff_until, e.version, e.key))

    def _resort_gang(self, gang: str) -> None:
        for key in list(self._gang_active.get(gang, ())):
            self._to_active(self._entries[key])

    def release_in_flight(self, now: float) -> int:
        released = 0
        with self._lock:
            for e in self._entries.values():
                if e.where == SubQueue.IN_FLIGHT:
                    self._end_loan(e)
                    self._to_active(e)
                    released += 1
        return released

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
        while self._backoff:
            until, version, key = self._backoff[0]
            e = self._entries.get(key)
            if e is not None and e.version == version and e.where == SubQueue.BACKOFF:
                break
            heapq.heappop(self._backoff)
        times = [self._backoff[0][0]] if self._backoff else []
        if self.settings.unschedulable_flush > 0 and self._unschedulable:
            oldest = next(iter(self._unschedulable.values()))
            times.append(oldest.unschedulable_since + self.settings.unschedulable_flush)
        return min(times) if times else None

    def next_ready_at(self) -> float | None:
        with self._lock:
            return self._next_ready_at()

    def __len__(self) -> int:
        return len(self._entries)
