"""The scheduler: its start-up from Redis, and the step that pops units from the queue, places them and binds
what is ready.

The parts it composes: the cache (memory of what Redis accepted, phalanx.scheduling.cache), the gang units
(one attempt per gang unit, phalanx.scheduling.gang_units), ordinary pods (phalanx.scheduling.ordinary),
cluster changes (phalanx.scheduling.cluster_state), binds, timeouts, preemption and status reports. Every
decision about a gang is committed to Redis in one transaction, so the round trips per gang are constant and
a restart resumes from exactly what was committed. A commit that conflicts (another writer took the
capacity) reloads the usage and retries the unit once before backing off.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Set
from dataclasses import dataclass
from time import perf_counter

from phalanx import faults
from phalanx.framework.framework import Framework
from phalanx.framework.snapshot import Snapshot
from phalanx.gang.manager import GangManager
from phalanx.model.keys import DEFAULT_SCHEDULER_NAME
from phalanx.model.objects import GangSpec, NodeInfo, PodInfo
from phalanx.queueing.hints import FreedCapacity
from phalanx.queueing.scheduling_queue import Outcome
from phalanx.scheduling.attempt_metrics import AttemptTally
from phalanx.scheduling.binds import BindDispatch
from phalanx.scheduling.cache import SchedulerCache
from phalanx.scheduling.cluster_state import ClusterState
from phalanx.scheduling.gang_units import GangUnits
from phalanx.scheduling.hints import refresh_freed
from phalanx.scheduling.lookahead import Lookahead
from phalanx.scheduling.ordinary import schedule_ordinary
from phalanx.scheduling.pod_source import PoppedPodCheck
from phalanx.scheduling.ports import BinderPort, Carry, Popped, PopResult, QueuePort, Verdict
from phalanx.scheduling.preemption import Preemptions, PreemptionSettings
from phalanx.scheduling.reports import StatusReports
from phalanx.scheduling.reservation import ReservationPlanner
from phalanx.scheduling.round import RoundState
from phalanx.scheduling.timeouts import DEFAULT_RETRY_BACKOFF, GangTimeouts
from phalanx.state.store import PodRecord, StateStore

log = logging.getLogger(__name__)


@dataclass
class SchedulerSettings:
    default_wait_seconds: float = 600.0
    pop_batch: int = 256
    # Pods asked for by the first pop after one that found none; each pop that finds pods doubles it, up to
    # pop_batch. A round's gangs go to the binder when the whole round is placed, so after a lull (and at
    # start-up) the first bindings leave after a few gangs, not after pop_batch's worth. 0: every pop asks
    # pop_batch (the simulator, whose rounds are its instants).
    first_pop: int = 0
    profile: str = DEFAULT_SCHEDULER_NAME  # the scheduler name: the `profile` label of its metrics
    # A gang waiting longer than this gets nodes reserved for it (phalanx.scheduling.reservation); 0: off.
    starvation_bound_seconds: float = 0.0
    # Gang preemption (phalanx.scheduling.preemption): a gang that does not fit evicts lower-priority units.
    preemption: bool = True
    # Seconds a timed-out gang of a retrying form (scheduler-plugins, Volcano, ...) waits before it is tried
    # again (phalanx.scheduling.timeouts); Koordinator's forms never are.
    gang_retry_backoff_seconds: float = DEFAULT_RETRY_BACKOFF


@dataclass(frozen=True)
class GangSummary:
    """A gang's progress as ListGangs reports it."""

    key: str
    min_available: int | None  # None: not declared
    assumed: int
    bound: int
    satisfied: bool
    timed_out: bool
    first_wait_at: float | None
    satisfied_at: float | None


@dataclass
class StepResult:
    attempted: int = 0
    bound: int = 0
    next_wakeup: float | None = None
    queue_pending: int = 0
    instants_done: int = 0  # how many of the look-ahead's instants the step ran as well
    now: float = 0.0  # the time the step ended at (its last instant)


class GangScheduler:
    def __init__(
        self,
        store: StateStore,
        queue: QueuePort,
        binder: BinderPort,
        framework: Framework,
        settings: SchedulerSettings | None = None,
    ) -> None:
        """`framework`: the profile's plugins, built by the composition root (phalanx.plugins.registry)."""
        self.store = store
        self.queue = queue
        self.framework = framework
        self.settings = settings or SchedulerSettings()
        self.cache = SchedulerCache(GangManager(self.settings.default_wait_seconds))
        self.reports = StatusReports()
        self.attempts = AttemptTally(self.settings.profile)  # scheduler_schedule_attempts_total and latency
        self.binds = BindDispatch(self.cache, binder, self.reports)  # holds the binder (see `binder`)
        self.timeouts = GangTimeouts(
            store, self.cache, self.binds, self.reports, lambda: self.queue, self.settings.gang_retry_backoff_seconds
        )
        self.reservation = ReservationPlanner(self.settings.starvation_bound_seconds)
        self.preemption = Preemptions(store, self.cache, framework, PreemptionSettings(self.settings.preemption))
        self.changes = ClusterState(
            store, self.cache, framework, self.reports, self.timeouts, self.reservation, self.preemption, self.binds
        )
        self.gang_units = GangUnits(
            store,
            self.cache,
            framework,
            self.reports,
            self.timeouts,
            self.reservation,
            self.preemption,
            lambda: self.binder,
        )
        # Kubernetes mode: popped pods are placed as the API server has them (set by the composition root;
        # None on the simulator, the source of its own pods).
        self.popped_check: PoppedPodCheck | None = None
        # What a pop after one that found nothing asks for (pop_batch when first_pop is 0), and what the next
        # pop asks for (_found).
        self._first_pop = min(self.settings.first_pop or self.settings.pop_batch, self.settings.pop_batch)
        self._pop_size = self._first_pop
        # Queue updates a failed step could not deliver: sent with the next pop, never dropped.
        self._undelivered = Carry()
        self.needs_resync = False  # a step failed midway: memory is reloaded from Redis before the next

    @property
    def binder(self) -> BinderPort:
        return self.binds.binder

    @binder.setter
    def binder(self, binder: BinderPort) -> None:  # a test may put a failing binder in its place
        self.binds.binder = binder

    # The cache's parts, read-only: written only through the cache's methods (phalanx.scheduling.cache).
    @property
    def snapshot(self) -> Snapshot:
        return self.cache.snapshot

    @property
    def gangs(self) -> GangManager:
        return self.cache.gangs

    @property
    def assumed(self) -> Mapping[str, PodRecord]:
        return self.cache.assumed

    @property
    def bound(self) -> Set[str]:
        return self.cache.bound

    # -- start-up --------------------------------------------------------------------------------
    def recover(self, now: float) -> None:
        """Rebuilds memory from Redis and finishes whatever a previous process left half done."""
        self.resync()
        # The marker follows the pods: a gang Redis keeps satisfied below its minimum (written before this
        # rule, or bound alone by a binder since) is returned to all-or-nothing before anything is placed.
        self.settle_gangs(self.gangs.satisfied_below_minimum())
        released = self.queue.release_in_flight()
        log.info(
            "recovered %d nodes, %d gangs, %d assumed pods; %d in-flight pods returned to the queue",
            len(self.snapshot),
            len(self.gangs.specs),
            len(self.assumed),
            released,
        )
        carry = Carry()
        self.preemption.evict_pending(self.binder, now, force=True)  # evictions a crash left unsent
        self.binds.retry(now, carry, force=True)
        if carry.verdicts:
            self.queue.done(carry.verdicts, carry.activate, carry.failed, now)

    def resync(self) -> None:
        """Memory := Redis (nodes, usage, gangs, reservations), and every decided bind that is not
        finished is queued to be sent again. The cache's answer to anything it cannot trust: a restart,
        a step that failed halfway, a Redis that restarted."""
        store = self.store
        self.cache.replace(
            store.load_nodes(),
            store.load_used(),
            store.load_gangs(),
            store.load_gang_records(store.gang_keys_with_state()),
            store.load_pods(),
        )
        self.timeouts.reload()
        self.binds.forget_pending()
        for r in sorted(self.assumed.values(), key=lambda r: r.key):
            self.binds.resume(r.key, r.gang, r.state)
        self.preemption.reload()
        self.needs_resync = False

    # -- cluster changes (phalanx.scheduling.cluster_state) -----------------------------------------
    def upsert_nodes(self, nodes: list[NodeInfo]) -> None:
        self.changes.upsert_nodes(nodes)

    def remove_nodes(self, names: list[str], now: float, unbind: bool = False) -> list[PodRecord]:
        return self.changes.remove_nodes(names, unbind)

    def upsert_gangs(self, specs: list[GangSpec]) -> None:
        self.changes.upsert_gangs(specs)

    def remove_gangs(self, keys: list[str]) -> None:
        self.changes.remove_gangs(keys)

    def forget_gangs(self, keys: list[str]) -> list[str]:
        return self.changes.forget_gangs(keys)

    def forget_pods(self, keys: list[str]) -> None:
        self.changes.forget_pods(keys)

    def release_pods(self, keys: list[str], freed: FreedCapacity | None = None, succeeded: Collection[str] = ()) -> int:
        return self.changes.release_pods(keys, freed, succeeded)

    def settle_gangs(self, keys: Collection[str]) -> None:
        self.changes.settle_gangs(keys)

    def add_bound_pods(self, pods: list[PodInfo]) -> None:
        self.changes.add_bound_pods(pods)

    def confirm_bound(self, pods: list[PodInfo], now: float) -> list[PodInfo]:
        return self.changes.confirm_bound(pods, now)

    # -- the step ------------------------------------------------------------------------------------
    def step(
        self,
        now: float,
        carry: Carry | None = None,
        prefetched: PopResult | None = None,
        lookahead: Lookahead | None = None,
    ) -> StepResult:
        """Schedules until the queue has nothing runnable at `now`. `carry` holds queue updates from
        cluster events; every pop carries the verdicts of the previous one. `prefetched`: pods already
        popped (by a long poll while idle) to start with. `lookahead`: the simulator's instants to come
        (see phalanx.scheduling.lookahead); the step reports how many it ran (`instants_done`)."""
        result = StepResult()
        carry = self._undelivered.merged(carry)
        self._undelivered = Carry()
        later = lookahead or Lookahead()
        unsettled: list[Popped] = list(prefetched.items) if prefetched is not None else []
        popped = PopResult([], None, 0)
        round_started = perf_counter()
        self.attempts.new_round()
        try:
            if self.needs_resync:
                self.resync()
                carry.move_all = True  # memory was rebuilt: what the queue's hints say may be stale
            self.timeouts.expire(now, carry)
            self.binds.retry(now, carry)
            self.changes.settle_unsettled()
            self.preemption.settle()
            self.preemption.evict_pending(self.binder, now)
            while True:
                if prefetched is not None:
                    popped, prefetched = prefetched, None  # the carry goes with the next pop
                else:
                    refresh_freed(carry.freed, self.snapshot)  # each node's capacity as it is now
                    carry.share_capacity = self.snapshot.share_capacity()  # DRF's order (see the queue)
                    carry.shares = self.snapshot.tenant_shares(carry.share_capacity)
                    popped = self.queue.pop(self._pop_size, now, carry)
                    self._found(len(popped.items))
                    if self.popped_check is not None:
                        self.popped_check.delivered(carry.verdicts)
                    carry = Carry()
                if self.popped_check is not None and popped.items:
                    popped.items = self.popped_check.admit(popped.items, carry.verdicts)
                    if not popped.items:
                        continue  # all refused: their verdicts go with the next pop
                unsettled = list(popped.items)
                if not popped.items:
                    # Evicted victims end only when the cluster says so: the simulator must hear of them
                    # before its later instants run.
                    if not self.preemption.evicting() and later.idle_until_next(popped, self.timeouts.none_before):
                        now = self._next_instant(now, later, carry)  # an instant with only finishes
                        continue
                    break
                result.attempted += len(popped.items)
                if self.reservation.enabled:  # recomputed from the state each round: nothing to persist
                    self.reservation.learn(popped.items)
                    self.reservation.refresh(now, self.snapshot, self.gangs)
                state = RoundState(now)
                self.preemption.refresh_holds()  # nodes may have changed since: holds are per generation
                round_started = perf_counter()
                self.attempts.new_round()
                for gang, unit in _units(popped.items):
                    if gang:
                        mark, started = len(state.verdicts), perf_counter()
                        self.gang_units.schedule(gang, unit, state)
                        self.attempts.unit(unit, state.verdicts, mark, perf_counter() - started)
                    else:
                        state.ordinary.extend(unit)
                mark, started = len(state.verdicts), perf_counter()
                schedule_ordinary(
                    state, self.store, self.cache, self.framework, self.reports, self.reservation, self.binds
                )
                self.attempts.unit(state.ordinary, state.verdicts, mark, perf_counter() - started)
                faults.reached("scheduler.before_bind")
                self.binds.bind_ready(state)
                self.changes.settle_unsettled()
                # Each round's reports go out with the round, not with the step: a step drains the queue,
                # and under a burst of 1,000 gangs it lasts as long as the burst (measured: PodGroup status
                # 6-9 s behind the bindings when it was sent once per step).
                self.reports.flush(self.binder, now)
                result.bound += state.bound
                state.into(carry)
                unsettled = []
                if not self.preemption.evicting() and later.quiet_after(
                    popped, state.verdicts, bool(state.failed), self.timeouts.none_before
                ):
                    now = self._next_instant(now, later, carry)
        except Exception:
            self.attempts.failed(len(unsettled), perf_counter() - round_started)
            # Whatever this round decided is in Redis (or not) as a whole; memory may be half updated, so it
            # is reloaded before the next step, and every pod popped in the round goes back to the queue
            # (one that was reserved after all is answered from the reservation when popped again).
            self.needs_resync = True
            carry.verdicts += [Verdict(item, Outcome.BACKOFF, "scheduling step failed; retried") for item in unsettled]
            self._undelivered = carry
            raise
        self.reports.flush(self.binder, now)
        self.timeouts.refresh()
        self.preemption.settle()  # gangs bound this step hold their place themselves now
        wakeups = [
            t for t in (popped.next_ready_at, self.timeouts.next_deadline, self.binds.next_retry()) if t is not None
        ]
        result.next_wakeup = min(wakeups) if wakeups else None
        result.queue_pending = popped.pending
        result.instants_done = later.consumed
        result.now = now
        return result

    def _found(self, pods: int) -> None:
        """Sizes the next pop (see SchedulerSettings.first_pop) after one that found `pods`."""
        self._pop_size = self._first_pop if pods == 0 else min(self.settings.pop_batch, self._pop_size * 2)

    def _next_instant(self, now: float, later: Lookahead, carry: Carry) -> float:
        """Moves a quiet step on to the next instant: its finishes free capacity, its pods go to the
        queue with the next pop."""
        self.reports.flush(self.binder, now)
        instant = later.take()
        carry.add = instant.arrivals
        if instant.finished:
            # Pods the simulator ends finished their run: successes (a preemption victim's end is not one).
            self.release_pods(instant.finished, carry.freed, succeeded=instant.finished)
        self.timeouts.expire(instant.at, carry)
        return instant.at

    def unprompted_work(self) -> bool:
        """Whether, after a step, the next one has work that no pod's arrival and no timer of
        `StepResult.next_wakeup` would wake the wall-clock loop for (SchedulingLoop.poll_seconds): a preemption
        under way, whose refused or failed evictions are asked again on its own backoff. What else a step
        leaves for the next (memory to reload, verdicts undelivered) follows only a failed step, and the loop
        steps again a second after one; gangs to settle are settled by every round and every step's start."""
        return bool(self.preemption.nominations)

    def wait_for_work(self, now: float, timeout: float) -> PopResult | None:
        """Real-clock mode, between steps: a long poll on the queue, so a new pod is scheduled as soon as
        it arrives rather than at the next tick. Returns what it popped (for `step`), or None."""
        popped = self.queue.pop(self._pop_size, now, None, wait_seconds=timeout)
        self._found(len(popped.items))
        return popped if popped.items else None

    # -- introspection -------------------------------------------------------------------------------
    def gang_statuses(self) -> list[GangSummary]:
        out: list[GangSummary] = []
        for key in sorted(set(self.gangs.specs) | set(self.gangs.records)):
            rec = self.gangs.record(key)
            spec = self.gangs.specs.get(key)
            out.append(
                GangSummary(
                    key=key,
                    min_available=spec.min_available if spec is not None else None,
                    assumed=len(rec.assumed),
                    bound=len(rec.bound),
                    satisfied=rec.satisfied_at is not None,
                    timed_out=rec.timed_out,
                    first_wait_at=rec.first_wait,
                    satisfied_at=rec.satisfied_at,
                )
            )
        return out


def _units(popped: list[Popped]) -> list[tuple[str, list[Popped]]]:
    """Splits a pop into consecutive runs of the same gang ("" for pods without one)."""
    out: list[tuple[str, list[Popped]]] = []
    for item in popped:
        if out and out[-1][0] == item.pod.gang:
            out[-1][1].append(item)
        else:
            out.append((item.pod.gang, [item]))
    return out
