"""Applies what the cluster did (nodes and gangs changed, pods finished or found bound) to Redis, then to
the scheduler's cache: Redis first, so that a process dying in between leaves memory to be rebuilt from a
state that has the change, never one that lacks it."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Collection
from concurrent.futures import Future, ThreadPoolExecutor

from phalanx import faults
from phalanx.framework.framework import Framework
from phalanx.gang.ops import BoundPodsFound, GangOp, SatisfactionLost
from phalanx.gang.statement import GangStatement
from phalanx.model.objects import GangSpec, NodeInfo, PodInfo
from phalanx.queueing.hints import FreedCapacity
from phalanx.scheduling.binds import BindDispatch
from phalanx.scheduling.cache import SchedulerCache
from phalanx.scheduling.preemption import Preemptions
from phalanx.scheduling.reports import StatusReports
from phalanx.scheduling.reservation import ReservationPlanner
from phalanx.scheduling.timeouts import GangTimeouts
from phalanx.state.pod_state import PodState
from phalanx.state.store import PodRecord, StateStore
from phalanx.state.txn import Txn, record_bound

log = logging.getLogger(__name__)

# Bound pods recorded per Redis transaction when a rebuild finds them: the transaction's arguments are built
# whole in memory (about 4.6 KB a pod with its gang operation, measured with memray at 10,000 pods).
BOUND_PODS_PER_TXN = 2_000


class ClusterState:
    def __init__(
        self,
        store: StateStore,
        cache: SchedulerCache,
        framework: Framework,
        reports: StatusReports,
        timeouts: GangTimeouts,
        reservation: ReservationPlanner,
        preemption: Preemptions,
        binds: BindDispatch,
    ) -> None:
        self.store = store
        self.cache = cache
        self.framework = framework
        self.reports = reports
        self.timeouts = timeouts
        self.reservation = reservation
        self.preemption = preemption
        self.binds = binds

    # -- nodes and gangs -------------------------------------------------------------------------
    def upsert_nodes(self, nodes: list[NodeInfo]) -> None:
        nodes = self.framework.prepare_nodes(nodes)  # e.g. GPUs are placed device by device
        self.store.put_nodes(nodes)
        self.cache.add_nodes(nodes)

    def remove_nodes(self, names: list[str], unbind: bool = False) -> list[PodRecord]:
        """Redis releases the removed nodes' pods; memory forgets their reservations, and with `unbind` their
        bindings too (see phalanx.scheduling.events.FeederRules). Returns every pod they held."""
        stmt = self.cache.gangs.begin()

        def lost(victims: list[PodRecord]) -> list[GangOp]:  # in the transaction that releases them
            self._pods_gone(victims, set(), stmt)
            return stmt.ops

        victims = self.store.remove_nodes(names, lost)
        self._gangs_lost_pods(stmt)
        self.cache.remove_nodes(names)
        for r in victims:
            self.cache.forget_pod(r.key)  # the node is gone: only the gang forgets the pod
            if unbind:
                self.cache.unbind(r.key)
        return victims

    def upsert_gangs(self, specs: list[GangSpec]) -> None:
        self.store.put_gangs(specs)
        self.cache.upsert_gangs(specs)

    def remove_gangs(self, keys: list[str]) -> None:
        self.store.remove_gangs(keys)
        self.cache.remove_gangs(keys)

    def forget_gangs(self, keys: list[str]) -> list[str]:
        """Drops every trace of gangs nothing refers to any more (their pods are gone and no object declares
        them), so a long-running scheduler does not grow with every job it has seen; a pod that declares one
        later starts it afresh. A gang still holding reservations is kept. Returns the gangs forgotten."""
        records = self.cache.gangs.records
        gone = [k for k in keys if (rec := records.get(k)) is None or not rec.assumed]
        if not gone:
            return []
        self.store.forget_gangs(gone)
        for key in gone:
            self.cache.forget_gang(key)
            self.timeouts.forget(key)
            self.reservation.forget(key)
            self.reports.forget_gang(key)  # GangManager.forget flags the timers: the next step re-reads them
        return gone

    def forget_pods(self, keys: list[str]) -> None:
        """Deleted pods: the last message reported for each is not needed any more."""
        self.reports.forget_pods(keys)
        self.preemption.forget_pods(keys)

    # -- pods that ended -------------------------------------------------------------------------
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
        stmt = self.cache.gangs.begin()
        # A victim this scheduler had evicted did not finish its work, whatever its last phase says (a
        # worker may exit 0 on SIGTERM): its gang lost it.
        victims = {v.pod_key for n in self.preemption.nominations.values() for v in n.victims} if succeeded else set()
        txn.gang_ops = self._pods_gone(list(records.values()), set(succeeded) - victims, stmt)
        self.store.must_apply(txn)
        self._gangs_lost_pods(stmt)  # Redis took them out of their gangs' sets: so does memory
        for r in records.values():
            self.cache.remove_pod(r, freed)
        return len(records)

    def _pods_gone(self, records: list[PodRecord], succeeded: set[str], stmt: GangStatement) -> list[GangOp]:
        """The gang operations of releasing `records` for good (see GangManager.pods_gone)."""
        by_gang: dict[str, list[PodRecord]] = defaultdict(list)
        for r in records:
            if r.gang:
                by_gang[r.gang].append(r)
        for gang, rs in sorted(by_gang.items()):
            done = sum(1 for r in rs if r.key in succeeded and r.state == PodState.BOUND)  # only bound pods ran
            self.cache.gangs.pods_gone(gang, [r.key for r in rs], done, stmt)
        if any(isinstance(op, SatisfactionLost) for op in stmt.ops):
            faults.reached("scheduler.before_unsatisfy")
        return stmt.ops

    def _gangs_lost_pods(self, stmt: GangStatement) -> None:
        """Redis accepted the statement of pods gone: memory takes it; gangs it unsatisfied start afresh."""
        self.cache.commit_gangs(stmt)
        for op in stmt.ops:
            if isinstance(op, SatisfactionLost):
                self._satisfaction_lost(op.gang)

    def _satisfaction_lost(self, gang: str) -> None:
        gangs = self.cache.gangs
        rec = gangs.record(gang)
        log.info(
            "gang %s: %d pods bound, %d succeeded, below its minimum %s: its pods are placed all-or-nothing again",
            gang,
            len(rec.bound),
            rec.succeeded,
            gangs.min_of(gang),
        )
        # The next attempt is a new one: its phases and Events are reported afresh, not taken for repeats.
        self.reports.forget_gang(gang)
        self.timeouts.forget(gang)

    def settle_gangs(self, keys: Collection[str]) -> None:
        """Gangs marked satisfied below their minimum (GangManager.unsettled, or found so on a restart) lose
        the mark, committed to Redis first."""
        if not keys:
            return
        gangs = self.cache.gangs
        stmt = gangs.begin()
        if not [k for k in sorted(keys) if gangs.settle(k, stmt)]:
            return
        self.store.must_apply(Txn(gang_ops=stmt.ops))
        self._gangs_lost_pods(stmt)

    def settle_unsettled(self) -> None:
        if self.cache.gangs.unsettled:
            self.settle_gangs(self.cache.gangs.take_unsettled())

    # -- pods found bound ------------------------------------------------------------------------
    def add_bound_pods(self, pods: list[PodInfo]) -> None:
        """Pods found already bound (e.g. on a restart against a real cluster) hold their node's capacity; in
        transactions of at most BOUND_PODS_PER_TXN pods, each applied to Redis and then to memory, so a
        rebuild of 30,000 bound pods does not build one transaction's arguments for all of them at once.

        Each transaction goes to Redis on a thread of its own while the next one is built here (a rebuild's
        15 waited for Redis 1.8 s in all, one after the other, while the machine's other core was idle);
        memory takes a transaction's pods once Redis has them, in order. Should one fail, what was built
        after it was held in memory only, as the failed one's pods were: the caller's reconciliation
        repairs memory from Redis and the API server. Memory's usage is read back from Redis once, after
        the last."""
        seen: set[str] = set()
        if len(pods) <= BOUND_PODS_PER_TXN:  # one transaction: nothing to build meanwhile
            txn = self._bound_txn(pods, seen)
            if txn is not None:
                self.store.must_apply(txn)
                self._record(txn)
                self.cache.reload_usage(self.store.load_used())
            return
        applied = False
        writing: tuple[Future[None], Txn] | None = None
        with ThreadPoolExecutor(1, thread_name_prefix="bound-pods") as writer:
            for start in range(0, len(pods), BOUND_PODS_PER_TXN):
                txn = self._bound_txn(pods[start : start + BOUND_PODS_PER_TXN], seen)
                if writing is not None:
                    self._recorded(*writing)
                    applied, writing = True, None
                if txn is not None:
                    writing = (writer.submit(self.store.must_apply, txn), txn)
            if writing is not None:
                self._recorded(*writing)
                applied = True
        if applied:
            self.cache.reload_usage(self.store.load_used())

    def _bound_txn(self, pods: list[PodInfo], seen: set[str]) -> Txn | None:
        """The transaction recording those of `pods` that Redis and `seen` lack, their capacity held in
        memory; None when there are none."""
        known = self.store.get_pods([p.key for p in pods])
        snapshot = self.cache.snapshot
        txn = Txn()
        for p in pods:
            if p.key in known or p.key in seen or p.node_name not in snapshot.index:
                continue
            seen.add(p.key)
            # A fact, not a decision: counted even where it over-commits the node as Redis sees it. Its
            # GPUs take devices (the first free ones), or a later pod would be handed the same devices.
            i = snapshot.index[p.node_name]
            held = self.framework.held_on(p, snapshot, i)
            self.cache.hold(i, held, p)
            txn.facts.append(self.store.reserve_entry(p, p.node_name, held))
            if p.gang:
                txn.gang_ops.append(BoundPodsFound(p.gang, (p.key,)))
        return txn if txn.facts else None

    def _recorded(self, written: Future[None], txn: Txn) -> None:
        """Waits for `txn`'s write (raising its error), then memory records its pods as bound."""
        written.result()
        self._record(txn)

    def _record(self, txn: Txn) -> None:
        self.cache.add_pods(entry[0] for entry in txn.facts)
        self.cache.apply_gang_ops(txn.gang_ops)  # so gang counts include them

    def confirm_bound(self, pods: list[PodInfo], now: float) -> list[PodInfo]:
        """Pods the API server shows bound that this scheduler still holds as reserved: their binding was
        finished by someone else (the binder rolling a crashed batch forward, or a bind whose answer was
        lost). The cache's "finish binding": memory and Redis record them bound. Returns the pods that
        were reserved on another node than the one they are bound to (the caller counts them afresh)."""
        moved: list[PodInfo] = []
        confirmed: dict[str, list[str]] = defaultdict(list)  # gang ("" for none) -> pods
        for p in pods:
            rec = self.cache.assumed.get(p.key)
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
            self.cache.finish_binding(key)
            self.binds.pending_pods.discard(key)
        for gang, keys in confirmed.items():
            if gang:
                self.binds.gang_bound(gang, keys, now)
        self.settle_unsettled()
        log.info("%d pods found bound by the API server while reserved here: recorded as bound", len(txn.set_state))
        return moved
