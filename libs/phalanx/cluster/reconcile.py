"""Reconciliation: a comparer of the API server's truth, the scheduler's state (memory and Redis) and the queue.

It only compares: what it reads comes through three small interfaces (reconcile_views.py: the mirror of the
API server, the scheduler, the feed's public handlers), and what it repairs goes through the same handlers and
scheduler calls as watch events do. It knows no feed: the feed composes it (feed.ClusterFeed.maintenance).

Three things can make them disagree, and each has its own repair here:
- Redis restarted (new run id): it may have lost its last writes. The scheduler reloads its memory from
  Redis and reconciliation runs at once, a few times in a row.
- Redis was emptied (its epoch key is gone): the scheduler reloads (nothing), learns every gang in use
  again, and reconciliation refills nodes, bound pods and the queue from the mirror of the API server.
- Drift of any other cause (a batch of events that failed to apply, a bug): the periodic pass.

A pass compares the mirror of the API server with Redis, and Redis with the scheduler's memory,
like kube-scheduler's cache comparer, and repairs:
- nodes missing or different in Redis; nodes Redis has that the API server does not;
- pods bound in the API server that Redis does not count (added at once: over-counting is the safe side);
- reservations whose binding the API server shows done (recorded as bound when a second pass still sees
  them so: until then the binder's own roll-forward usually has);
- records of pods that finished, were deleted, are pending although Redis says bound, or are bound
  elsewhere: released only when the same finding is seen on two passes in a row, so a watch event
  still in flight cannot make it release capacity that is really in use;
- per-node usage that differs from the sum of the records (recomputed inside Redis, atomically);
- scheduler memory that differs from Redis on two passes in a row (reloaded);
- pending pods the queue may have lost (handed to it again; those it holds stay where they are).
Every repair is counted by kind (`totals`) and logged in one line per pass. A periodic pass reads Redis on a
thread of its own while the feed goes on applying events, then compares on the feed's thread.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from phalanx.background import in_background
from phalanx.cluster.reconcile_views import ApiServerView, FeedHandlers, SchedulerState
from phalanx.metrics.catalog import RECONCILE_REPAIRS
from phalanx.model.objects import NodeInfo, PodInfo
from phalanx.state.pod_state import PodMark, PodState

log = logging.getLogger(__name__)

IDENTITY_CHECK_SECONDS = 1.0
FAST_PASSES_AFTER_RESTART = 3
FAST_PASS_SECONDS = 2.0
# A pass reads every pod record from Redis: its cost grows with the cluster (passes over 1,800 pods took
# 46-176 ms on 2 busy cores; only their memory check holds the scheduler's lock). The records are read as
# marks (node, uid, state), not pods: 214 against 704 ms of CPU for 30,000 records. The next regular pass
# waits at least this many times as long as the last took, so reconciliation stays under 1/20 of the
# scheduler's time however large the cluster.
PASS_COST_FACTOR = 20.0


class Maintenance:
    """Run from the feed's thread between event batches (`tick`); a periodic pass's Redis reads run on a
    thread of their own meanwhile."""

    def __init__(
        self,
        api: ApiServerView,
        scheduler: SchedulerState,
        handlers: FeedHandlers,
        lock: AbstractContextManager[Any],
        now: Callable[[], float],
        reconcile_interval: float = 10.0,
    ) -> None:
        self.api = api
        self.scheduler = scheduler
        self.handlers = handlers
        self.lock = lock  # the scheduler's: a pass holds it as a batch of events does
        self.now = now
        self.interval = reconcile_interval
        self.specs_unsure = False  # a batch failed to apply: the gang specs it carried may not be in Redis
        self._clock = time.monotonic
        self._identity: tuple[str, str] | None = None
        self._next_identity_check = 0.0
        self._next_pass = self._clock() + reconcile_interval
        self._fast_passes = 0
        self._suspects: set[tuple[str, ...]] = set()  # release findings of the previous pass
        self._unconfirmed: set[str] = set()  # bindings the API server showed and Redis did not, last pass
        self._memory_suspect = False  # the previous pass found memory and Redis apart
        self._retry_after_restart = False  # Redis restarted or was emptied: the next pass retries everything
        self.totals: Counter[str] = Counter()
        self.last_pass_quiet = False  # the last pass found nothing and held the lock only for the memory check
        self._reads: Future[_Reads] | None = None  # a periodic pass's reads, on their own thread

    def request_reconcile(self, specs_unsure: bool = False) -> None:
        """A pass at the next tick; `specs_unsure`: a batch failed to apply, so every gang spec is re-sent."""
        self.specs_unsure = self.specs_unsure or specs_unsure
        self._next_pass = 0.0

    def rebuilt(self) -> None:
        """The feed's first batch (the rebuild) was applied: it compared the API server with Redis just now, so
        the first regular pass is due an interval from here, not from the feed's start. Otherwise, where the
        rebuild took longer than the interval (30,000 pods: 24 s), a pass reading every record from Redis followed
        it at once, on the feed's thread, and gangs created meanwhile waited for it to end."""
        if self._next_pass > 0.0:  # a pass requested meanwhile (a failed batch) stays due at once
            self._next_pass = self._clock() + self.interval

    def tick(self) -> None:
        now = self._clock()
        if now >= self._next_identity_check:
            self._next_identity_check = now + IDENTITY_CHECK_SECONDS
            self._check_identity()
        if self._reads is not None:
            if self._reads.done():
                self._end_pass()
            return
        if now >= self._next_pass:
            self._next_pass = now + FAST_PASS_SECONDS  # a failed pass is retried, not spun on
            if self._must_repair():
                self._repair_pass()
                self._schedule_next(self._clock() - now)
            else:
                # The reads (every record and the usage: 30-50 ms at 1,800 pods on 2 busy cores) go on a thread
                # of their own, and this one goes on applying events until they are in: run here, they held back
                # every pod created meanwhile (steady arrival's slowest pods came every 10 s, one pass apart).
                self._reads = in_background(self._read, name="reconcile-reads")

    def _end_pass(self) -> None:
        """Compares what the background reads found with the mirror now, and repairs or checks memory."""
        reads_future, self._reads = self._reads, None
        assert reads_future is not None
        reads = reads_future.result()  # what the reads raised is the maintenance's failure (retried)
        began = self._clock()
        self._after_reads(reads)
        self._schedule_next(reads.seconds + self._clock() - began)

    def _schedule_next(self, took: float) -> None:
        log.debug(
            "reconcile: a pass took %.1f ms (%s)",
            took * 1000,
            "found nothing" if self.last_pass_quiet else "compared and repaired under the lock",
        )
        if self._fast_passes > 0:
            self._fast_passes -= 1
            self._next_pass = self._clock() + FAST_PASS_SECONDS
        else:
            self._next_pass = self._clock() + max(self.interval, PASS_COST_FACTOR * took)

    # -- Redis restarts and wipes ----------------------------------------------------------------------
    def _check_identity(self) -> None:
        identity = self.scheduler.store.identity()
        previous, self._identity = self._identity, identity
        if previous is None or previous == identity:
            return
        emptied = previous[1] != identity[1]
        if emptied:
            log.error("Redis lost Phalanx's state (its epoch changed): rebuilding it from the API server")
        else:
            log.warning("Redis restarted (run id %s -> %s): reloading and reconciling", previous[0], identity[0])
        with self.lock:
            self.scheduler.resync()
            self.handlers.resend_gangs()  # a restarted Redis may have lost the newest specs, an emptied one all
        self._suspects.clear()
        self._retry_after_restart = True  # verdicts given while Redis was away may have been on an empty view
        self._fast_passes = FAST_PASSES_AFTER_RESTART
        self.request_reconcile()

    # -- one pass ----------------------------------------------------------------------------------------
    def reconcile(self) -> Counter[str]:
        """One pass, its reads on this thread (the feed's periodic passes read on another: `tick`). Its
        comparisons of the mirror with Redis run first without the scheduler's lock: a pass holding it
        throughout kept scheduling waiting 71-179 ms every 10 s under steady arrival (1,800 pods, 2 busy
        cores), longer on larger clusters; a pass that finds nothing holds it 6-11 ms. The whole pass runs
        under the lock, comparing again before it repairs, only when there is something to repair now: a node
        or a bound pod Redis lacks, a finding or an unrecorded binding seen on the previous pass too, usage
        that was wrong, or a suspicion left by a failed batch, a Redis restart or the memory check. A finding
        seen once is only remembered: most are a watch event still on its way (the binder records a binding
        before the API server's event of it reaches the feed)."""
        if self._must_repair():
            self.last_pass_quiet = False
            return self._repair_pass()
        return self._after_reads(self._read())

    def _must_repair(self) -> bool:
        return self.specs_unsure or self._retry_after_restart or self._memory_suspect

    def _read(self) -> _Reads:
        """What a pass reads from Redis; touches neither the mirror nor the scheduler's memory, so it may run
        on any thread. Usage that differs from the records is recomputed inside Redis, atomically with respect
        to every write; whether it differs is found from the records read here (the recomputation stops Redis
        for every other client while it runs)."""
        began, store = self._clock(), self.scheduler.store
        nodes = {n.name: n for n in store.load_nodes()}
        records, drifted = store.marks_and_usage_drift()  # node, uid and state: a pass reads every record
        usage_fixed = store.repair_usage() if drifted else 0
        return _Reads(nodes, records, usage_fixed, self._clock() - began)

    def _after_reads(self, reads: _Reads) -> Counter[str]:
        """The rest of a pass, on the feed's thread: the reads against the mirror as it is now, then a locked
        repair pass if anything needs one, or the memory check."""
        self.last_pass_quiet = False
        if self._must_repair():  # asked for since the reads began (a batch failed, Redis restarted): this pass is it
            return self._repair_pass(reads.usage_fixed)
        found = self._compare(reads.nodes, reads.records)
        store = self.scheduler.store
        # The mirror may have moved on since the reads (events applied while they ran): what looks missing from
        # Redis is looked up again before it counts. A pod bound since was recorded before its binding, and a
        # node the feed changed since was written with it.
        if found.add:
            recorded = store.get_pods([p.key for p in found.add])
            found.add = [p for p in found.add if p.key not in recorded]
        if found.changed_nodes:
            now_in_redis = {n.name: n for n in store.load_nodes()}
            found.changed_nodes = [n for n in found.changed_nodes if now_in_redis.get(n.name) != n]
        unconfirmed = {p.key for p in found.confirm}
        if (
            reads.usage_fixed
            or found.changed_nodes
            or found.add
            or found.findings & self._suspects
            or unconfirmed & self._unconfirmed
        ):
            return self._repair_pass(reads.usage_fixed)
        self._suspects, self._unconfirmed = found.findings, unconfirmed
        self._quiet_memory_check()
        self.last_pass_quiet = True
        return Counter()

    def _scan(self) -> _Scan:
        """The mirror against Redis, read now (a repair pass, under the lock)."""
        store = self.scheduler.store
        return self._compare({n.name: n for n in store.load_nodes()}, store.load_pod_marks())

    def _compare(self, in_redis: Mapping[str, NodeInfo], records: dict[str, PodMark]) -> _Scan:
        """Redis's nodes and reservations (`in_redis`, `records`) against the mirror: nodes, and each
        reservation against the pod the API server shows. Reads the mirror, so it runs on the feed's thread
        (the mirror changes on that thread only); what it finds is only a finding until a locked pass has
        seen it too."""
        view, s = self.api, self.scheduler
        nodes = {name: s.framework.prepare_node(n) for name, n in view.mirror_nodes().items()}
        changed = [n for name, n in sorted(nodes.items()) if in_redis.get(name) != n]
        bound = view.mirror_bound()
        findings: set[tuple[str, ...]] = set()
        confirm = []
        add = []
        for key, rec in sorted(records.items()):
            api = bound.get(key)
            if api is None:
                if not view.mirror_has(key):
                    findings.add(("stale-record", key, rec.node, rec.state))
                elif rec.state == PodState.BOUND:
                    findings.add(("stale-bound", key, rec.node, rec.state))
            elif api.node_name != rec.node:
                findings.add(("moved", key, rec.node, api.node_name))
            elif rec.state != PodState.BOUND and (not rec.uid or rec.uid == api.uid):
                confirm.append(api)
        for key, pod in sorted(bound.items()):
            if key not in records and pod.node_name in s.snapshot.index:
                add.append(pod)
        for name in sorted(set(in_redis) - set(nodes)):
            findings.add(("stale-node", name))
        return _Scan(records, bound, changed, findings, confirm, add)

    def _quiet_memory_check(self) -> None:
        """A pass that found nothing still compares the scheduler's memory with Redis (a difference seen twice
        is reloaded, by the locked pass the next one becomes) and refills the queue. Under the lock only the
        reads and copies: states without the records, usage, the memory's sets."""
        s = self.scheduler
        with self.lock:
            states = s.store.pod_states()
            view = self._memory_view(states)
            self.handlers.requeue_missing()
        self._memory_suspect = bool(view.differs())

    def _memory_view(self, states: dict[str, PodState]) -> _MemoryView:
        """Redis's usage and the scheduler's memory beside `states`; called under the lock."""
        s = self.scheduler
        return _MemoryView(states, s.store.load_used(), set(s.assumed), set(s.bound), s.snapshot.used_map())

    def _repair_pass(self, usage_fixed: int = 0) -> Counter[str]:
        """The whole pass under the scheduler's lock: compares again, then repairs what it finds.
        `usage_fixed`: usage fields the quick look already repaired (counted here)."""
        s, handlers = self.scheduler, self.handlers
        store = s.store
        repairs: Counter[str] = Counter()
        if usage_fixed:
            repairs["usage"] += usage_fixed
        with self.lock:
            now = self.now()
            if self.specs_unsure:  # a batch failed to apply: the gang specs it carried may be lost
                handlers.resend_gangs()
                self.specs_unsure = False
                repairs["gang specs re-sent"] += 1
            found = self._scan()
            if found.changed_nodes:
                s.upsert_nodes(found.changed_nodes)
                repairs["node"] += len(found.changed_nodes)
                # A bound pod is counted only on a node the snapshot has: on nodes just restored (Redis
                # emptied) they are found by comparing again. Counted in a later pass instead, they would
                # leave that capacity free meanwhile, for the scheduler to hand out twice.
                found = self._scan()

            # Only pods the scheduler holds as reserved can be confirmed through it; others (a reservation its
            # memory lost) are recorded after the memory check below.
            self._unconfirmed = set()  # confirmed here, or not ours to confirm
            held = [p for p in found.confirm if p.key in s.assumed]
            if held:
                moved = {p.key for p in s.confirm_bound(held, now)}
                confirmed = len({p.key for p in held} - moved)
                if confirmed:
                    repairs["unrecorded-binding"] += confirmed
            if found.add:
                handlers.add_bound(found.add)
                repairs["uncounted-pod"] += len(found.add)

            # Releases only for what the previous pass saw too (see the module docstring).
            sure = found.findings & self._suspects
            self._suspects = found.findings - sure
            release = sorted({f[1] for f in sure if f[0] in ("stale-record", "stale-bound", "moved")})
            if release:
                s.release_pods(release)
                for kind, n in Counter(f[0] for f in sure if f[0] != "stale-node").items():
                    repairs[kind] += n
                moved_pods = [found.bound[f[1]] for f in sure if f[0] == "moved" and f[1] in found.bound]
                if moved_pods:
                    handlers.add_bound(moved_pods)
            gone_nodes = sorted(f[1] for f in sure if f[0] == "stale-node")
            if gone_nodes:
                s.remove_nodes(gone_nodes, now)
                repairs["stale-node"] += len(gone_nodes)

            fixed = store.repair_usage()
            if fixed:
                repairs["usage"] += fixed

            # Read again only if this pass changed the records.
            marks = store.load_pod_marks() if repairs or sure else found.records
            differs = self._memory_view({k: m.state for k, m in marks.items()}).differs()
            if differs and self._memory_suspect:
                log.warning("reconcile: scheduler memory differs from Redis: %s", differs)
                s.resync()
                repairs["scheduler-memory"] += 1
                differs = ""
            self._memory_suspect = bool(differs)

            handlers.requeue_missing()
            if repairs or self._retry_after_restart:
                handlers.retry_unschedulable()
                self._retry_after_restart = False
        if repairs:
            self.totals.update(repairs)
            for kind, n in repairs.items():
                RECONCILE_REPAIRS.labels(kind).inc(n)
            log.warning(
                "reconcile: repaired %d (%s)",
                sum(repairs.values()),
                ", ".join(f"{k}={v}" for k, v in sorted(repairs.items())),
            )
        return repairs


@dataclass
class _Reads:
    """What a pass read from Redis, and how long the reads took."""

    nodes: dict[str, NodeInfo]
    records: dict[str, PodMark]
    usage_fixed: int  # usage fields recomputed and fixed inside Redis
    seconds: float


@dataclass
class _Scan:
    """What comparing the mirror with Redis found, before any repair."""

    records: dict[str, PodMark]
    bound: dict[str, PodInfo]  # the mirror's bound pods
    changed_nodes: list[NodeInfo]
    findings: set[tuple[str, ...]]
    confirm: list[PodInfo]
    add: list[PodInfo]

    def clean(self) -> bool:
        return not (self.changed_nodes or self.findings or self.confirm or self.add)


@dataclass
class _MemoryView:
    """Redis's reservations and usage beside the scheduler's memory of them, read at one moment (under the
    scheduler's lock), compared after."""

    states: dict[str, PodState]  # every reservation's state in Redis
    redis_used: dict[tuple[str, str], int]
    assumed: set[str]  # in the scheduler's memory
    bound: set[str]
    memory_used: dict[tuple[str, str], int]

    def differs(self) -> str:
        """How the scheduler's memory differs from Redis ("" when it does not), for the log line."""
        assumed = {k for k, st in self.states.items() if st in (PodState.ASSUMED, PodState.BINDING)}
        bound = {k for k, st in self.states.items() if st == PodState.BOUND}
        out = []
        for name, mine, theirs in (("assumed", self.assumed, assumed), ("bound", self.bound, bound)):
            if mine != theirs:
                out.append(
                    f"{name}: only in memory {sorted(mine - theirs)[:5]}, only in Redis {sorted(theirs - mine)[:5]}"
                )
        mem, red = self.memory_used, {k: v for k, v in self.redis_used.items() if v}
        wrong = sorted(k for k in set(mem) | set(red) if mem.get(k, 0) != red.get(k, 0))
        if wrong:
            out.append(
                "usage: "
                + ", ".join(f"{n}/{r} memory {mem.get((n, r), 0)} Redis {red.get((n, r), 0)}" for n, r in wrong[:5])
            )
        return "; ".join(out)
