"""One scheduler step: pop units from the queue, place them, accumulate gangs, bind what is ready.

Placement happens on the in-memory snapshot; every decision about a gang (its reservations, its cycle,
its timer) is committed to Redis in one transaction, so the round trips per gang are constant and a
restart resumes from exactly what was committed. A commit that conflicts (another writer took the
capacity) reloads the snapshot and retries the unit once before backing off.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from time import perf_counter

from phalanx import faults
from phalanx.framework.framework import Framework
from phalanx.framework.snapshot import Snapshot
from phalanx.gang.manager import GangManager, GangStatus
from phalanx.gang.ops import BoundPodsFound, GangOp, SatisfactionLost
from phalanx.gang.statement import GangStatement
from phalanx.metrics.attempts import AttemptTally
from phalanx.model.binding import Assignment
from phalanx.model.keys import DEFAULT_SCHEDULER_NAME
from phalanx.model.objects import GangSpec, NodeInfo, PodInfo, Resources
from phalanx.model.quantity import format_milli
from phalanx.model.status import EventReason, GangPhase
from phalanx.queueing.hints import FreedCapacity, Hint
from phalanx.queueing.scheduling_queue import Outcome
from phalanx.scheduling.binds import BindDispatch
from phalanx.scheduling.cache import SchedulerCache
from phalanx.scheduling.hints import refresh_freed, rejection_hint, shortfall_hint, with_slots
from phalanx.scheduling.lookahead import Lookahead
from phalanx.scheduling.pod_source import PoppedPodCheck
from phalanx.scheduling.ports import BinderPort, Carry, Popped, PopResult, QueuePort, Verdict
from phalanx.scheduling.preemption import Decision, Preemptions, PreemptionSettings
from phalanx.scheduling.reports import StatusReports
from phalanx.scheduling.reservation import ReservationPlanner
from phalanx.scheduling.round import RoundState
from phalanx.scheduling.timeouts import DEFAULT_RETRY_BACKOFF, GangTimeouts
from phalanx.state.pod_state import PodState
from phalanx.state.store import PodRecord, StateStore
from phalanx.state.txn import Txn, record_bound
from phalanx.telemetry.tracing import child_span

log = logging.getLogger(__name__)


@dataclass
class SchedulerSettings:
    default_wait_seconds: float = 600.0
    pop_batch: int = 256
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
        # Kubernetes mode: popped pods are placed as the API server has them (set by the composition root;
        # None on the simulator, the source of its own pods).
        self.popped_check: PoppedPodCheck | None = None
        # Queue updates a failed step could not deliver: sent with the next pop, never dropped.
        self._undelivered = Carry()
        self.needs_resync = False  # a step failed midway: memory is reloaded from Redis before the next

    @property
    def binder(self) -> BinderPort:
        return self.binds.binder

    @binder.setter
    def binder(self, binder: BinderPort) -> None:  # a test may put a failing binder in its place
        self.binds.binder = binder

    # The cache's parts, by the names the tests and the cluster feed know them by.
    @property
    def snapshot(self) -> Snapshot:
        return self.cache.snapshot

    @property
    def gangs(self) -> GangManager:
        return self.cache.gangs

    @property
    def assumed(self) -> dict[str, PodRecord]:
        return self.cache.assumed

    @property
    def bound(self) -> set[str]:
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
        self.snapshot.set_nodes(self.store.load_nodes(), self.store.load_used())
        self.gangs.specs = dict(self.store.load_gangs())
        self.gangs.records = self.store.load_gang_records(self.store.gang_keys_with_state())
        self.gangs.timers_changed = False
        records = self.store.load_pods()
        self.snapshot.clear_pods()
        for r in records.values():
            self.snapshot.track_pod(r.node, r.pod)
        self.cache.assumed = {k: r for k, r in records.items() if r.state in (PodState.ASSUMED, PodState.BINDING)}
        self.cache.bound = {k for k, r in records.items() if r.state == PodState.BOUND}
        self.timeouts.reload()
        self.binds.forget_pending()
        for r in sorted(self.assumed.values(), key=lambda r: r.key):
            self.binds.resume(r.key, r.gang, r.state)
        self.preemption.reload()
        self.needs_resync = False

    # -- cluster events --------------------------------------------------------------------------
    def upsert_nodes(self, nodes: list[NodeInfo]) -> None:
        nodes = self.framework.prepare_nodes(nodes)  # e.g. GPUs are placed device by device
        self.store.put_nodes(nodes)
        self.snapshot.upsert_nodes(nodes)

    def remove_nodes(self, names: list[str], now: float) -> list[PodRecord]:
        stmt = self.gangs.begin()

        def lost(victims: list[PodRecord]) -> list[GangOp]:  # in the transaction that releases them
            self._pods_gone(victims, set(), stmt)
            return stmt.ops

        victims = self.store.remove_nodes(names, lost)
        self._gangs_lost_pods(stmt)
        self.snapshot.remove_nodes(names)
        for r in victims:
            self.cache.give_back(r.key)  # the node is gone: only the gang forgets the pod
        return victims

    def upsert_gangs(self, specs: list[GangSpec]) -> None:
        self.store.put_gangs(specs)
        for s in specs:
            self.gangs.upsert(s)

    def remove_gangs(self, keys: list[str]) -> None:
        self.store.remove_gangs(keys)
        for k in keys:
            self.gangs.remove(k)

    def forget_gangs(self, keys: list[str]) -> list[str]:
        """Drops every trace of gangs nothing refers to any more (their pods are gone and no object declares
        them), so a long-running scheduler does not grow with every job it has seen; a pod that declares one
        later starts it afresh. A gang still holding reservations is kept. Returns the gangs forgotten."""
        gone = [k for k in keys if (rec := self.gangs.records.get(k)) is None or not rec.assumed]
        if not gone:
            return []
        self.store.forget_gangs(gone)
        for key in gone:
            self.gangs.forget(key)
            self.timeouts.forget(key)
            self.reservation.forget(key)
            self.reports.forget_gang(key)  # GangManager.forget flags the timers: the next step re-reads them
        return gone

    def forget_pods(self, keys: list[str]) -> None:
        """Deleted pods: the last message reported for each is not needed any more."""
        self.reports.forget_pods(keys)
        self.preemption.forget_pods(keys)

    def release_pods(self, keys: list[str], freed: FreedCapacity | None = None, succeeded: Collection[str] = ()) -> int:
        """Pods that finished or were deleted: their reservations and bindings free capacity (recorded in
        `freed`, for the queue's hints). `succeeded`: those of them that finished successfully; the others
        are losses, and a gang they leave below its minimum is satisfied no longer (in the same transaction)."""
        records = self.store.get_pods(keys)
        if not records:
            return 0
        txn = Txn()
        for r in records.values():
            txn.release_pod(r.key, r.gang)
        stmt = self.gangs.begin()
        # A victim this scheduler had evicted did not finish its work, whatever its last phase says (a
        # worker may exit 0 on SIGTERM): its gang lost it.
        victims = {v.pod_key for n in self.preemption.nominations.values() for v in n.victims} if succeeded else set()
        txn.gang_ops = self._pods_gone(list(records.values()), set(succeeded) - victims, stmt)
        self.store.must_apply(txn)
        self._gangs_lost_pods(stmt)  # Redis took them out of their gangs' sets: so does memory
        for r in records.values():
            if self.cache.give_back(r.key, freed) is None:  # bound, not reserved: its capacity still returns
                self.cache.free_capacity(r, freed)
            self.bound.discard(r.key)
        return len(records)

    def _pods_gone(self, records: list[PodRecord], succeeded: set[str], stmt: GangStatement) -> list[GangOp]:
        """The gang operations of releasing `records` for good (see GangManager.pods_gone)."""
        by_gang: dict[str, list[PodRecord]] = defaultdict(list)
        for r in records:
            if r.gang:
                by_gang[r.gang].append(r)
        for gang, rs in sorted(by_gang.items()):
            done = sum(1 for r in rs if r.key in succeeded and r.state == PodState.BOUND)  # only bound pods ran
            self.gangs.pods_gone(gang, [r.key for r in rs], done, stmt)
        if any(isinstance(op, SatisfactionLost) for op in stmt.ops):
            faults.reached("scheduler.before_unsatisfy")
        return stmt.ops

    def _gangs_lost_pods(self, stmt: GangStatement) -> None:
        """Redis accepted the statement of pods gone: memory takes it; gangs it unsatisfied start afresh."""
        self.gangs.commit(stmt)
        for op in stmt.ops:
            if isinstance(op, SatisfactionLost):
                self._satisfaction_lost(op.gang)

    def _satisfaction_lost(self, gang: str) -> None:
        rec = self.gangs.record(gang)
        log.info(
            "gang %s: %d pods bound, %d succeeded, below its minimum %s: its pods are placed all-or-nothing again",
            gang,
            len(rec.bound),
            rec.succeeded,
            self.gangs.min_of(gang),
        )
        # The next attempt is a new one: its phases and Events are reported afresh, not taken for repeats.
        self.reports.forget_gang(gang)
        self.timeouts.forget(gang)

    def settle_gangs(self, keys: Collection[str]) -> None:
        """Gangs marked satisfied below their minimum (GangManager.unsettled, or found so on a restart) lose
        the mark, committed to Redis first."""
        if not keys:
            return
        stmt = self.gangs.begin()
        if not [k for k in sorted(keys) if self.gangs.settle(k, stmt)]:
            return
        self.store.must_apply(Txn(gang_ops=stmt.ops))
        self._gangs_lost_pods(stmt)

    def _settle_unsettled(self) -> None:
        if self.gangs.unsettled:
            keys, self.gangs.unsettled = self.gangs.unsettled, set()
            self.settle_gangs(keys)

    def add_bound_pods(self, pods: list[PodInfo]) -> None:
        """Pods found already bound (e.g. on a restart against a real cluster) hold their node's capacity."""
        known = self.store.get_pods([p.key for p in pods])
        txn = Txn()
        seen: set[str] = set()
        for p in pods:
            if p.key in known or p.key in seen or p.node_name not in self.snapshot.index:
                continue
            seen.add(p.key)
            # A fact, not a decision: counted even where it over-commits the node as Redis sees it. Its
            # GPUs take devices (the first free ones), or a later pod would be handed the same devices.
            i = self.snapshot.index[p.node_name]
            held = self.framework.held_on(p, self.snapshot, i)
            self.snapshot.reserve(i, held, pod=p)
            txn.facts.append(self.store.reserve_entry(p, p.node_name, held))
            if p.gang:
                txn.gang_ops.append(BoundPodsFound(p.gang, (p.key,)))
        if txn.facts:
            self.store.must_apply(txn)
            self.bound.update(entry[0] for entry in txn.facts)
            self.snapshot.load_used(self.store.load_used())
            self.gangs.apply(txn.gang_ops)  # so gang counts include them

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
            self._settle_unsettled()
            self.preemption.settle()
            self.preemption.evict_pending(self.binder, now)
            while True:
                if prefetched is not None:
                    popped, prefetched = prefetched, None  # the carry goes with the next pop
                else:
                    refresh_freed(carry.freed, self.snapshot)  # each node's capacity as it is now
                    carry.share_capacity = self.snapshot.share_capacity()  # DRF's order (see the queue)
                    carry.shares = self.snapshot.tenant_shares(carry.share_capacity)
                    popped = self.queue.pop(self.settings.pop_batch, now, carry)
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
                        self._schedule_gang_unit(gang, unit, state)
                        self.attempts.unit(unit, state.verdicts, mark, perf_counter() - started)
                    else:
                        state.ordinary.extend(unit)
                mark, started = len(state.verdicts), perf_counter()
                self._schedule_ordinary(state)
                self.attempts.unit(state.ordinary, state.verdicts, mark, perf_counter() - started)
                faults.reached("scheduler.before_bind")
                self.binds.bind_ready(state)
                self._settle_unsettled()
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

    def wait_for_work(self, now: float, timeout: float) -> PopResult | None:
        """Real-clock mode, while idle: a long poll on the queue, so a new pod is scheduled as soon as
        it arrives rather than at the next tick. Returns what it popped (for `step`), or None."""
        popped = self.queue.pop(self.settings.pop_batch, now, None, wait_seconds=timeout)
        return popped if popped.items else None

    # -- gangs ---------------------------------------------------------------------------------------
    def _schedule_gang_unit(self, gang: str, unit: list[Popped], state: RoundState) -> None:
        status = self.gangs.status(gang)
        if status == GangStatus.UNDECLARED:
            msg = f"gang {gang} is not declared yet: its PodGroup or ConfigMap does not exist"
            state.reject(unit, Outcome.UNSCHEDULABLE, msg, self.reports)
            return
        if status == GangStatus.INVALID:
            state.reject(unit, Outcome.DROPPED, self.gangs.specs[gang].invalid, self.reports)
            return
        if status == GangStatus.TIMED_OUT:
            if not self.timeouts.turn_away(gang, unit, state):
                self._schedule_gang_unit(gang, unit, state)  # its backoff is over: tried again, as new
            return
        unit = self._skip_reserved(unit, state)
        if not unit:
            return
        if status == GangStatus.SATISFIED:
            state.ordinary.extend(unit)  # once-satisfied: the gang rules no longer apply
            return
        spec = self.gangs.specs[gang]
        with child_span(
            "phalanx.scheduler.gang_attempt", unit[0].trace, {"phalanx.gang": gang, "phalanx.pods": len(unit)}
        ) as span:
            shortfall = self._min_resources_shortfall(spec)
            if shortfall:
                span.set_attribute("phalanx.result", "min-resources")
                self._reject_min_resources(gang, unit, spec, shortfall, state)
                return
            for attempt in range(2):
                if self._try_gang_unit(gang, unit, state, span):
                    return
                # Another writer changed a node we chose: refresh and decide again.
                self.snapshot.load_used(self.store.load_used())
                state.reloaded = True
            state.reject(
                unit, Outcome.BACKOFF, f"{self.gangs.describe(gang)}; commit conflicts, retrying", self.reports
            )

    def _try_gang_unit(self, gang: str, unit: list[Popped], state: RoundState, span: object) -> bool:
        unit = self.gangs.required_first(gang, unit, lambda item: item.pod)  # each role's minimum first (Volcano)
        strict = self.gangs.strict(gang)
        stmt = self.gangs.begin()  # memory changes only once Redis has the attempt
        placed: list[tuple[Popped, int, Resources]] = []  # pod, node index, what it reserves there
        rejected: list[Popped] = []
        failure: tuple[Popped, str] | None = None
        unplaceable: list[tuple[Popped, str, Hint | None]] = []  # NonStrict failures: they touch no other pod
        hint: Hint | None = None
        for item in unit:
            if strict and not self.gangs.try_enter_cycle(gang, item.pod.key, stmt):
                rejected.append(item)
                continue
            res = self.framework.place(item.pod, self.snapshot)
            if res.ok:
                assert res.node_index is not None
                self.snapshot.reserve(res.node_index, res.requests, pod=item.pod)
                placed.append((item, res.node_index, res.requests))
                continue
            if strict and not self.gangs.reached_minimum(gang, [p.pod for p, _, _ in placed]):
                failure = (item, res.message)  # what may help: judged with the gang's earlier pods still reserved
                hint = rejection_hint(self.framework, item.pod, self.snapshot, self._gang_pods(gang, unit))
                break
            # NonStrict, or Strict once the pods placed reach the gang's minimum: a surplus pod fails alone
            unplaceable.append((item, res.message, rejection_hint(self.framework, item.pod, self.snapshot)))
        for item, i, reqs in placed:  # undo the local reservations; the commit below decides for real
            self.snapshot.reserve(i, reqs, sign=-1, pod=item.pod)

        if strict and failure is not None:
            return self._fail_strict_gang(gang, unit, placed, failure, stmt, state, span, hint)

        txn = Txn()
        for item, i, reqs in placed:
            txn.reserve.append(self.store.reserve_entry(item.pod, self.snapshot.nodes[i].name, reqs))
        if placed:
            self.gangs.assumed(gang, [item.pod.key for item, _, _ in placed], state.now, stmt, unit[0].trace)
        txn.gang_ops = stmt.ops
        ok, reason = self.store.apply(txn)
        if not ok:
            log.info("gang %s: commit conflict (%s)", gang, reason)
            return False
        self.gangs.commit(stmt)
        if placed:
            faults.reached("scheduler.after_commit")
        for item, i, reqs in placed:
            self.snapshot.reserve(i, reqs, pod=item.pod)
            state.freed.taken(self.snapshot.nodes[i].name)  # keeps the queue's gang slot counts current
            if self.reservation.enabled:
                self.reservation.note_started(item.pod.key, state.now)
            self.assumed[item.pod.key] = PodRecord(
                item.pod.key, self.snapshot.nodes[i].name, gang, reqs, item.pod, PodState.ASSUMED
            )
            state.verdicts.append(Verdict(item, Outcome.ASSUMED))
        for item in rejected:
            msg = f"{self.gangs.describe(gang)}; already tried in this scheduling cycle"
            state.verdicts.append(Verdict(item, Outcome.BACKOFF, msg))
        decision = Decision()
        if unplaceable and not self.gangs.reached_minimum(gang):
            decision = self.preemption.consider(gang, [item.pod for item, _, _ in unplaceable], state.now)
            if decision.nominated:
                self.preemption.evict_pending(self.binder, state.now, force=True)
        for item, why, pod_hint in unplaceable:
            msg = f"{self.gangs.describe(gang)}; {item.pod.name}: {why}"
            if decision.message:
                msg = f"{msg}; {decision.message}"
            self.timeouts.last_failure[gang] = f"{item.pod.name}: {why}"
            state.verdicts.append(Verdict(item, Outcome.UNSCHEDULABLE, msg, pod_hint))
            self.reports.pod(item.pod.key, msg, nominated_node=decision.nominated.get(item.pod.key, ""))
        if placed:
            state.activate.append(gang)
            span.set_attribute("phalanx.result", "assumed")  # type: ignore[attr-defined]
            span.set_attribute("phalanx.assumed", len(placed))  # type: ignore[attr-defined]
        if self.gangs.group_ready(gang):
            state.ready_groups[self.gangs.group_of(gang)] = self.gangs.record(gang).trace or unit[0].trace
        elif placed:
            waiting = f"{self.gangs.describe(gang)}; waiting for the rest of the gang"
            if len(self.gangs.group_of(gang)) > 1 and self.gangs.reached_minimum(gang):
                waiting = f"{self.gangs.describe(gang)}; waiting for the other gangs of its group"
            for item, _, _ in placed:
                self.reports.waiting(item.pod.key, waiting)  # not Unschedulable: see StatusReports
            self._report_gang(gang, GangPhase.SCHEDULING, EventReason.GANG_WAITING, waiting, state.now)
        return True

    def _fail_strict_gang(
        self,
        gang: str,
        unit: list[Popped],
        placed: list[tuple[Popped, int, Resources]],
        failure: tuple[Popped, str],
        stmt: GangStatement,
        state: RoundState,
        span: object,
        hint: Hint | None = None,
    ) -> bool:
        """Strict: one pod failed, so every assumed pod of the gang is released and the rest of the
        gang is rejected until the cycle ends. `hint`: what may help the failed pod, for the whole gang."""
        failed_item, why = failure
        previously = [k for k in self.gangs.record(gang).assumed if k in self.assumed]
        message = (
            f"{self.gangs.describe(gang)}; {failed_item.pod.name}: {why}; Strict mode released the gang's reservations"
            f"{self.reservation.note(gang)}"
        )
        self.timeouts.last_failure[gang] = f"{failed_item.pod.name}: {why}"
        for item in unit:
            self.gangs.mark_tried(gang, item.pod.key, stmt)
        if placed or previously:  # pods reached the wait stage before the failure: the gang's wait runs
            self.gangs.start_wait(gang, state.now, stmt, unit[0].trace)
        self.gangs.invalidate_cycle(gang, stmt)
        self.gangs.released(gang, previously, stmt)
        txn = Txn(gang_ops=stmt.ops)
        for key in previously:
            txn.release_pod(key, gang)
        ok, reason = self.store.apply(txn)
        if not ok:
            log.info("gang %s: release conflict (%s)", gang, reason)
            return False
        self.gangs.commit(stmt)
        released = [r for key in previously if (r := self.cache.give_back(key, state.freed)) is not None]
        # The gang holds nothing now: may evicting lower-priority units make it fit?
        decision = self.preemption.consider(gang, [r.pod for r in released] + [item.pod for item in unit], state.now)
        if decision.message:
            message = f"{message}; {decision.message}"
            if decision.nominated:
                self.preemption.evict_pending(self.binder, state.now, force=True)
        # Now that the gang holds nothing: how many of its pods each node could take (see phalanx.queueing.hints).
        hint = with_slots(hint, self.snapshot, len(unit) + len(released))
        for r in released:
            state.verdicts.append(
                Verdict(Popped(r.pod, self.gangs.record(gang).trace), Outcome.UNSCHEDULABLE, message, hint)
            )
            self.reports.pod(r.key, message, nominated_node=decision.nominated.get(r.key, ""))
        for item in unit:
            state.verdicts.append(Verdict(item, Outcome.UNSCHEDULABLE, message, hint))
            self.reports.pod(item.pod.key, message, nominated_node=decision.nominated.get(item.pod.key, ""))
        state.failed.append(gang)
        reason = EventReason.PREEMPTING if decision.nominated else EventReason.FAILED_SCHEDULING
        self._report_gang(gang, GangPhase.PENDING, reason, message, state.now, unschedulable=True)
        span.set_attribute("phalanx.result", "strict-failure")  # type: ignore[attr-defined]
        span.set_attribute("phalanx.reason", why)  # type: ignore[attr-defined]
        return True

    def _gang_pods(self, gang: str, unit: list[Popped]) -> list[PodInfo]:
        """The pods a failure of the gang sends back to the queue: the unit's and those it had reserved."""
        held = [r.pod for k in self.gangs.record(gang).assumed if (r := self.assumed.get(k)) is not None]
        return [item.pod for item in unit] + held

    def _skip_reserved(self, unit: list[Popped], state: RoundState) -> list[Popped]:
        """Pods the queue hands out again (after a restart, or a stale re-add) may already be reserved or
        bound; memory mirrors Redis for both, so this costs no round trip."""
        out = []
        for item in unit:
            key = item.pod.key
            if key in self.bound:
                state.verdicts.append(Verdict(item, Outcome.BOUND))
            elif key in self.assumed:
                state.verdicts.append(Verdict(item, Outcome.ASSUMED))
            else:
                out.append(item)
        return out

    def _reject_min_resources(
        self, gang: str, unit: list[Popped], spec: GangSpec, shortfall: str, state: RoundState
    ) -> None:
        """The gang's minResources exceed what the cluster has free. Lower-priority pods may hold what it
        lacks: the planner looks for victims freeing both minResources and a place for the gang's pods
        (Kubeflow's training-operator always declares minResources, so without this such jobs never preempt),
        and the gang passes this gate once they are gone."""
        decision = self.preemption.consider(gang, [item.pod for item in unit], state.now)
        msg = f"{self.gangs.describe(gang)}; {shortfall}"
        if decision.message:
            msg = f"{msg}; {decision.message}"
            if decision.nominated:
                self.preemption.evict_pending(self.binder, state.now, force=True)
        self.timeouts.last_failure[gang] = shortfall
        free = self.snapshot.free_total()
        hint = shortfall_hint(r for r, need in spec.min_resources.items() if free.get(r, 0) < need)
        for item in unit:
            state.verdicts.append(Verdict(item, Outcome.UNSCHEDULABLE, msg, hint))
            self.reports.pod(item.pod.key, msg, nominated_node=decision.nominated.get(item.pod.key, ""))
        reason = EventReason.PREEMPTING if decision.nominated else EventReason.FAILED_SCHEDULING
        self._report_gang(gang, GangPhase.PENDING, reason, msg, state.now, unschedulable=True)

    def _min_resources_shortfall(self, spec: GangSpec) -> str:
        if not spec.min_resources or self.gangs.placed_count(spec.key) > 0:
            return ""
        free = self.snapshot.free_total()
        short = [
            f"minResources needs {format_milli(r, need)} {r}, the cluster has {format_milli(r, free.get(r, 0))} free"
            for r, need in sorted(spec.min_resources.items())
            if free.get(r, 0) < need
        ]
        return "; ".join(short)

    # -- ordinary pods -------------------------------------------------------------------------------
    def _schedule_ordinary(self, state: RoundState) -> None:
        if not state.ordinary:
            return
        items = self._skip_reserved(state.ordinary, state)
        placed: list[tuple[Popped, int, Resources]] = []
        for item in items:
            res = self.framework.place(item.pod, self.snapshot)
            if res.ok:
                assert res.node_index is not None
                self.snapshot.reserve(res.node_index, res.requests, pod=item.pod)
                placed.append((item, res.node_index, res.requests))
            else:
                hint = rejection_hint(self.framework, item.pod, self.snapshot)
                state.verdicts.append(Verdict(item, Outcome.UNSCHEDULABLE, res.message, hint))
                self.reports.pod(item.pod.key, res.message)
        if not placed:
            return
        txn = Txn(
            reserve=[self.store.reserve_entry(item.pod, self.snapshot.nodes[i].name, reqs) for item, i, reqs in placed]
        )
        ok, reason = self.store.apply(txn)
        if not ok:
            log.info("ordinary pods: commit conflict (%s); retrying after backoff", reason)
            for item, i, reqs in placed:
                self.snapshot.reserve(i, reqs, sign=-1, pod=item.pod)
                state.verdicts.append(Verdict(item, Outcome.BACKOFF, f"commit conflict: {reason}"))
            self.snapshot.load_used(self.store.load_used())
            state.reloaded = True
            return
        assignments = []
        for item, i, reqs in placed:
            node = self.snapshot.nodes[i].name
            state.freed.taken(node)
            if self.reservation.enabled:
                self.reservation.note_started(item.pod.key, state.now)
            self.assumed[item.pod.key] = PodRecord(item.pod.key, node, item.pod.gang, reqs, item.pod, PodState.ASSUMED)
            assignments.append(Assignment(pod_key=item.pod.key, uid=item.pod.uid, node=node, gang=item.pod.gang))
        faults.reached("scheduler.after_commit")
        self.binds.dispatch(
            assignments, False, state, placed[0][0].trace, {item.pod.key: item for item, _, _ in placed}
        )

    def confirm_bound(self, pods: list[PodInfo], now: float) -> list[PodInfo]:
        """Pods the API server shows bound that this scheduler still holds as reserved: their binding was
        finished by someone else (the binder rolling a crashed batch forward, or a bind whose answer was
        lost). The cache's "finish binding": memory and Redis record them bound. Returns the pods that
        were reserved on another node than the one they are bound to (the caller counts them afresh)."""
        moved: list[PodInfo] = []
        confirmed: dict[str, list[str]] = defaultdict(list)  # gang ("" for none) -> pods
        for p in pods:
            rec = self.assumed.get(p.key)
            if rec is None:
                continue
            if rec.node != p.node_name:
                moved.append(p)
                continue
            confirmed[rec.gang].append(p.key)
        if not confirmed:
            return moved
        txn = Txn()
        record_bound(txn, confirmed, now)
        self.store.must_apply(txn)
        for key, _ in txn.set_state:
            self.assumed.pop(key, None)
            self.bound.add(key)
            self.binds.pending_pods.discard(key)
        for gang, keys in confirmed.items():
            if gang:
                self.binds.gang_bound(gang, keys, now)
        self._settle_unsettled()
        log.info("%d pods found bound by the API server while reserved here: recorded as bound", len(txn.set_state))
        return moved

    # -- reporting -----------------------------------------------------------------------------------
    def _report_gang(
        self,
        gang: str,
        phase: GangPhase,
        reason: EventReason,
        message: str,
        now: float,
        unschedulable: bool = False,
        pod_key: str = "",
    ) -> None:
        self.reports.gang(
            self.gangs.specs.get(gang),
            self.gangs.record(gang),
            phase,
            reason,
            message,
            now,
            unschedulable=unschedulable,
            pod_key=pod_key,
        )

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
