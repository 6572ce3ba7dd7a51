"""Binds a batch under the bind mutex: a satisfied gang (or GangGroup) at once, or ordinary pods.

Sequence: ask the backend whether the cluster allows each binding (`precheck`: the pod is the binder's
to bind, the node exists; outside the lock, it reads only the cluster); then, under the lock, check that
every pod is still reserved where the scheduler put it; record the intent (the pods become `binding` in Redis); write the bindings through the backend; commit `bound`
to Redis with the lock's fencing token. A crash between the intent and the commit leaves `binding` pods,
which the next holder of the lock rolls forward (`finish_interrupted`): a gang is never left partly
bound. On a backend whose writes live in Redis (the embedded cluster) the whole sequence is one Lua script that takes and
releases the mutex itself: one round trip per batch instead of four.
- all_or_nothing (a gang's first bind): if any pod's reservation is gone, or the backend refuses any pod,
  the whole batch is rolled back (every reservation released) and nothing is written to the cluster. A pod
  that no longer exists is not a refusal: it is released alone (GONE) and the rest of the gang binds, as
  when the API server answers 404. A pod that could not be checked (API server unreachable) leaves the
  batch unbound and reserved (PENDING), to be sent again.
- Otherwise a refused pod is released alone (FAILED, or GONE); a pod that could not be checked stays reserved.
- After the intent: a pod the API server refuses is released alone; one it did not answer stays
  `binding` (BIND_STATUS_PENDING) and is bound later.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from tenacity import RetryError

from phalanx import faults
from phalanx.backends.base import BindFailure, ClusterBackend
from phalanx.binding.lock import FencedLock, while_held
from phalanx.metrics.binds import record_bind
from phalanx.model.binding import Assignment, BindResult, BindStatus
from phalanx.state.durability import ReplicaWait
from phalanx.state.pod_state import PodState
from phalanx.state.reads import FULL_SCAN_EVERY
from phalanx.state.store import PodRecord, StateStore
from phalanx.state.txn import Txn, record_bound
from phalanx.telemetry.tracing import child_span, mark_linked

log = logging.getLogger(__name__)

BOUND = BindStatus.BOUND
FAILED = BindStatus.FAILED
ROLLED_BACK = BindStatus.ROLLED_BACK
GONE = BindStatus.GONE
PENDING = BindStatus.PENDING


@dataclass
class _Plan:
    """One batch between its checks and its commit (see BatchBinder._plan)."""

    assignments: list[Assignment]
    all_or_nothing: bool
    records: Mapping[str, PodRecord]
    problems: dict[str, str] = field(default_factory=dict)  # pod -> why its reservation does not hold
    started: set[str] = field(default_factory=set)  # intent recorded by an earlier attempt
    refusals: dict[str, BindFailure] = field(default_factory=dict)  # the backend's, of pods not bound yet
    before: dict[str, BindFailure] = field(default_factory=dict)  # refusals of pods not started
    results: dict[str, BindResult] = field(default_factory=dict)
    todo: list[Assignment] = field(default_factory=list)  # to bind (or bound already)
    fresh: list[Assignment] = field(default_factory=list)  # to bind, intent still to record
    already: list[Assignment] = field(default_factory=list)
    after: list[Assignment] = field(default_factory=list)
    to_write: list[Assignment] = field(default_factory=list)
    final: list[BindResult] | None = None  # decided: rolled back, PENDING, or done


class BatchBinder:
    def __init__(
        self, store: StateStore, backend: ClusterBackend, lock: FencedLock, durability: ReplicaWait | None = None
    ) -> None:
        """`durability`: the intent must be on Redis replicas before a binding is sent (state/durability.py)."""
        self.store = store
        self.backend = backend
        self.lock = lock
        self.durability = durability
        self._roll_rounds = 0  # finish_interrupted calls so far (which of them read all of podstate)

    def bind(
        self, assignments: list[Assignment], all_or_nothing: bool, now: float, trace: str = ""
    ) -> tuple[list[BindResult], int]:
        started = time.perf_counter()
        gangs = sorted({a.gang for a in assignments if a.gang})
        with child_span(
            "phalanx.binder.bind_batch",
            trace,
            {
                "phalanx.pods": len(assignments),
                "phalanx.gangs": ",".join(gangs),
                "phalanx.all_or_nothing": all_or_nothing,
            },
        ) as span:
            # The cluster's verdict first, outside the mutex: it reads the cluster, not Phalanx's state.
            refusals = self.backend.precheck(assignments)
            if refusals:
                span.set_attribute("phalanx.refused", len(refusals))
            transactional = self.backend.transactional and not refusals
            fast = self._bind_in_one_script(assignments, now) if transactional else None
            if fast is not None:
                results, fence = fast
            else:
                with self.lock.hold() as fence:
                    results = self._bind_locked(assignments, all_or_nothing, now, fence, refusals)
            span.set_attribute("phalanx.fence", fence)
            span.set_attribute("phalanx.bound", sum(1 for r in results if r.status == BOUND))
            record_bind(results, time.perf_counter() - started)
            return results, fence

    def _bind_in_one_script(self, assignments: list[Assignment], now: float) -> tuple[list[BindResult], int] | None:
        """The common case on a backend whose writes live in Redis: take the mutex, check every
        reservation, write every binding and release the mutex in one script. None when any check
        fails: the careful path below then sorts out which pods failed and what to roll back."""
        txn = Txn(
            lock=[uuid.uuid4().hex, self.lock.lease_ms],
            expect=[[a.pod_key, PodState.ASSUMED, a.node] for a in assignments],
        )
        failures = self.backend.bind(assignments, now, txn)
        if failures:  # a transactional backend reports none; be safe if one ever does
            return None
        self._commit_bound(txn, assignments, now)
        attempts = while_held(lambda answer: answer[1] == "locked", time.monotonic() + 30.0)
        try:
            ok, _, fence = attempts(self.store.apply_fenced, txn)
        except RetryError:  # another binder held the mutex for 30 s: the careful path waits its own way
            return None
        if not ok:
            return None
        return [BindResult(pod_key=a.pod_key, status=BOUND) for a in assignments], fence

    @staticmethod
    def _commit_bound(commit: Txn, bound: list[Assignment], now: float) -> None:
        """The state changes of binding `bound`: pods become bound, their gangs satisfied."""
        by_gang: dict[str, list[str]] = defaultdict(list)
        for a in bound:
            by_gang[a.gang].append(a.pod_key)
        record_bound(commit, by_gang, now)

    def bind_many(
        self, batches: list[tuple[list[Assignment], bool, str]], now: float
    ) -> list[tuple[list[BindResult], int]]:
        """Several batches (gangs ready in the same scheduling round) under one hold of the mutex: one
        reservation read, one intent, the API calls of all of them in parallel, one commit. Each batch
        keeps its own all-or-nothing rule. Measured on a real API server: binding 1,000 gangs of 3 one
        batch after another ran three API calls at a time; together, the backend's pool runs them all."""
        if len(batches) <= 1 or self.backend.transactional:  # the embedded cluster: one script per batch
            return [self.bind(a, aon, now, trace) for a, aon, trace in batches]
        started = time.perf_counter()
        everything = [a for batch, _, _ in batches for a in batch]
        others = [trace for _, _, trace in batches[1:]]
        with child_span(
            "phalanx.binder.bind_many",
            batches[0][2],
            {"phalanx.pods": len(everything), "phalanx.batches": len(batches)},
            linked=others,
        ) as span:
            # The span lives in the first batch's trace; every other gang's trace gets a link to it.
            mark_linked("phalanx.binder.bound_with_others", others, span)
            refusals = self.backend.precheck(everything)
            with self.lock.hold() as fence:
                records = self.store.get_pods([a.pod_key for a in everything])
                plans = [self._plan(a, aon, fence, refusals, records) for a, aon, _ in batches]
                results = self._execute(plans, now, fence)
            span.set_attribute("phalanx.fence", fence)
            record_bind((r for batch in results for r in batch), time.perf_counter() - started, len(batches))
            return [(r, fence) for r in results]

    def _bind_locked(
        self,
        assignments: list[Assignment],
        all_or_nothing: bool,
        now: float,
        fence: int,
        refusals: Mapping[str, BindFailure],
    ) -> list[BindResult]:
        """The careful path: check, record the intent, write the bindings, record them. `refusals`: the
        backend's precheck of `assignments`.

        Before the intent is recorded a failure releases the whole gang (all_or_nothing). After it, the
        batch is only ever rolled forward: a binding in Kubernetes cannot be undone, so pods whose
        binding started are finished by whoever holds the mutex next (this call retried, another
        replica, or `finish_interrupted` after a crash), never released while some of the gang is bound."""
        records = self.store.get_pods([a.pod_key for a in assignments])
        return self._execute([self._plan(assignments, all_or_nothing, fence, refusals, records)], now, fence)[0]

    def _plan(
        self,
        assignments: list[Assignment],
        all_or_nothing: bool,
        fence: int,
        refusals: Mapping[str, BindFailure],
        records: Mapping[str, PodRecord],
    ) -> _Plan:
        """Everything decided before the intent: what is refused, what was started already, what to write.
        A batch refused as a whole is rolled back (or left PENDING) here and carries its final results."""
        plan = _Plan(assignments, all_or_nothing, records)
        problems, started = plan.problems, plan.started
        for a in assignments:
            rec = records.get(a.pod_key)
            if rec is None:
                problems[a.pod_key] = "its reservation no longer exists"
            elif rec.node != a.node:
                problems[a.pod_key] = f"it is reserved on {rec.node}, not {a.node}"
            elif rec.state in (PodState.BINDING, PodState.BOUND):
                started.add(a.pod_key)  # binding or bound on the same node: an earlier attempt got that far
            elif rec.state != PodState.ASSUMED:
                problems[a.pod_key] = f"it is already {rec.state}"

        if log.isEnabledFor(logging.DEBUG):  # the hot path: build the dict only when it is logged
            log.debug(
                "batch of %d (all_or_nothing=%s, fence %d): %s; problems %s",
                len(assignments),
                all_or_nothing,
                fence,
                {a.pod_key: getattr(records.get(a.pod_key), "state", None) for a in assignments},
                problems,
            )
        if problems and all_or_nothing and not started:
            plan.final = self._roll_back(assignments, records, problems, fence)
            return plan
        # A reservation smaller than the pod's spec (placed from a forged copy) is never bound, and nothing of
        # its gang is: the gang was placed on wrong numbers.
        short = self._unreserved(assignments, records, problems, started)
        if short:
            problems.update(short)
            if not started and (all_or_nothing or any(a.gang for a in assignments)):
                plan.final = self._roll_back(assignments, records, problems, fence)
                return plan
        # The backend's refusals that matter: of pods reserved here and not bound yet. A pod whose binding
        # started (an earlier attempt recorded the intent) is refused below like an API server refusal;
        # the others are refused before the intent, so nothing of them reaches the cluster.
        keys = {a.pod_key for a in assignments}
        plan.refusals = {
            k: f
            for k, f in refusals.items()
            if k in keys and k not in problems and k in records and records[k].state != PodState.BOUND
        }
        plan.before = {k: f for k, f in plan.refusals.items() if k not in started}
        refused = {k: f.message for k, f in plan.before.items() if not f.gone and not f.retryable}
        if refused and all_or_nothing and not started:
            plan.final = self._roll_back(assignments, records, {**problems, **refused}, fence)
            return plan
        unchecked = {k: f.message for k, f in plan.before.items() if f.retryable}
        if unchecked and all_or_nothing and not started:  # nothing written, nothing given back: sent again later
            why = next(iter(unchecked.items()))
            log.warning("gang batch of %d pods not bound: %s: %s", len(assignments), *why)
            plan.final = [
                BindResult(
                    pod_key=a.pod_key,
                    status=PENDING,
                    message=unchecked.get(a.pod_key) or f"waits for its gang: {why[0]}: {why[1]}",
                )
                for a in assignments
            ]
            return plan
        # A missing reservation is not a missing pod (Redis may have lost it): FAILED sends the pod back to
        # the queue to be placed again; only the API server's 404 makes it GONE.
        plan.results = {k: BindResult(pod_key=k, status=FAILED, message=why) for k, why in problems.items()}
        for k, f in plan.before.items():
            status = PENDING if f.retryable else GONE if f.gone else FAILED
            plan.results[k] = BindResult(pod_key=k, status=status, message=f.message)
        plan.todo = [a for a in assignments if a.pod_key not in problems and a.pod_key not in plan.before]
        plan.fresh = [a for a in plan.todo if a.pod_key not in started]
        return plan

    def _unreserved(
        self,
        assignments: list[Assignment],
        records: Mapping[str, PodRecord],
        problems: Mapping[str, str],
        started: set[str],
    ) -> dict[str, str]:
        """Pods whose reservation falls short of their spec in the cluster, with why (see ClusterBackend)."""
        out: dict[str, str] = {}
        for a in assignments:
            rec = records.get(a.pod_key)
            if rec is None or a.pod_key in problems or a.pod_key in started:
                continue
            failure = self.backend.unreserved(a, rec.requests)
            # A spec that could not be read now (a GET on a cache miss failing) was read by the precheck a
            # moment ago, which refuses what it cannot read: only a definite shortfall refuses here.
            if failure is not None and not failure.retryable:
                log.warning("binding refused: %s", failure.message)
                out[a.pod_key] = failure.message
        return out

    def _execute(self, plans: list[_Plan], now: float, fence: int) -> list[list[BindResult]]:
        """Intent, bindings and commit for every plan not decided yet, each step once for all of them."""
        live = [p for p in plans if p.final is None]
        fresh = [a for p in live for a in p.fresh]
        if fresh and not self.backend.transactional:
            # The point of no return, made durable before the first API call.
            intent = Txn(
                fence=fence,
                expect=[[a.pod_key, PodState.ASSUMED, a.node] for a in fresh],
                set_state=[[a.pod_key, PodState.BINDING] for a in fresh],
            )
            ok, reason = self.store.apply(intent)
            if not ok:  # fenced out, or a reservation changed since the check: nothing was written
                if len(live) > 1:  # which batch changed is not known: each on its own (it fails alone)
                    log.info("joint binding intent refused (%s); batch by batch", reason)
                    return [
                        p.final
                        if p.final is not None
                        else self._bind_locked(p.assignments, p.all_or_nothing, now, fence, p.refusals)
                        for p in plans
                    ]
                plan = live[0]
                log.warning("binding intent refused: %s", reason)
                if plan.started:  # part of the batch is past the point of no return: retry, never undo
                    # Only the missing reservations are final; a refused pod is not released yet (no commit).
                    plan.final = [
                        plan.results[a.pod_key]
                        if a.pod_key in plan.problems
                        else BindResult(pod_key=a.pod_key, status=PENDING, message=reason)
                        for a in plan.assignments
                    ]
                else:  # nothing of it was written: give the reservations back, as before any bind
                    plan.final = self._roll_back(
                        plan.assignments, plan.records, {**plan.problems, plan.fresh[0].pod_key: reason}, fence
                    )
                return [p.final or [] for p in plans]
            faults.reached("binder.after_intent")
        # Refused before the intent: their reservations are given back with this commit.
        commit = Txn(fence=fence)
        for p in live:
            gangs = {a.pod_key: a.gang for a in p.assignments}
            for k, f in p.before.items():
                if not f.retryable:
                    commit.release_pod(k, gangs[k])
        to_write_all: list[Assignment] = []
        for p in live:
            p.already = [a for a in p.todo if p.records[a.pod_key].state == PodState.BOUND]
            p.after = [a for a in p.todo if a.pod_key in p.refusals]  # started, refused now: as by the API server
            p.to_write = [
                a for a in p.todo if p.records[a.pod_key].state != PodState.BOUND and a.pod_key not in p.refusals
            ]
            to_write_all += p.to_write
        failures: dict[str, BindFailure] = self._not_durable(to_write_all)
        if to_write_all and not failures:
            failures = self.backend.bind(to_write_all, now, commit)
        bound: list[Assignment] = []
        for p in live:
            failures.update((a.pod_key, p.refusals[a.pod_key]) for a in p.after)
            bound += p.already
            for a in p.already:
                p.results[a.pod_key] = BindResult(pod_key=a.pod_key, status=BOUND)
            for a in p.to_write + p.after:
                failure = failures.get(a.pod_key)
                if failure is None:
                    bound.append(a)
                    p.results[a.pod_key] = BindResult(pod_key=a.pod_key, status=BOUND)
                elif failure.retryable:  # stays "binding": rolled forward later, never released
                    p.results[a.pod_key] = BindResult(pod_key=a.pod_key, status=PENDING, message=failure.message)
                else:
                    commit.release_pod(a.pod_key, a.gang)
                    status = GONE if failure.gone else FAILED
                    p.results[a.pod_key] = BindResult(pod_key=a.pod_key, status=status, message=failure.message)
        faults.reached("binder.before_commit")
        self._commit_bound(commit, bound, now)
        ok, reason = self.store.apply(commit)
        if not ok:
            # Fenced out: a newer holder exists. The bindings written stay "binding" in Redis and are
            # recorded by whoever finishes them; nothing is released.
            log.error("bind commit refused: %s", reason)
            for p in live:
                p.final = [
                    p.results[a.pod_key]
                    if a.pod_key in p.problems
                    else BindResult(pod_key=a.pod_key, status=PENDING, message=reason)
                    for a in p.assignments
                ]
        for p in live:
            if p.final is None:
                p.final = [p.results[a.pod_key] for a in p.assignments]
        return [p.final or [] for p in plans]

    def _not_durable(self, to_write: list[Assignment]) -> dict[str, BindFailure]:
        """Every pod of `to_write`, retryable (stays `binding`, sent later), when the intent (this call's or an
        earlier one's) is not on enough replicas to survive a failover; else nothing."""
        if not to_write or self.durability is None:
            return {}
        durable = self.durability.confirm()
        if durable.ok:
            return {}
        return {a.pod_key: BindFailure(durable.reason(), retryable=True) for a in to_write}

    def finish_interrupted(self, now: float) -> list[BindResult]:
        """Rolls forward every binding that started and was not recorded (a binder that crashed or was
        fenced out mid-batch): binds its pods where they were reserved and records them. Idempotent."""
        if self.backend.transactional:
            return []  # its bindings are written inside the commit: nothing can be half done
        full = self._roll_rounds % FULL_SCAN_EVERY == 0  # else the binding index (StateReads.pods_binding)
        self._roll_rounds += 1
        pending = self.store.pods_binding(full)
        if not pending:
            return []
        started = time.perf_counter()
        assignments = [r.assignment() for r in sorted(pending.values(), key=lambda r: r.key)]
        refusals = self.backend.precheck(assignments)
        with self.lock.hold() as fence:
            # Read again under the mutex: pods a live batch was binding when they were first read are bound
            # by now, not interrupted (rolling them "forward" again cost an API call each under load).
            still = self.store.pods_binding(full)
            assignments = [a for a in assignments if a.pod_key in still]
            if not assignments:
                return []
            results = self._bind_locked(assignments, False, now, fence, refusals)
        record_bind(results, time.perf_counter() - started)  # a roll-forward is a batch bind too
        done = sum(1 for r in results if r.status == BOUND)
        log.warning("rolled forward %d interrupted bindings (%d bound)", len(assignments), done)
        return results

    def _roll_back(
        self, assignments: list[Assignment], records: Mapping[str, PodRecord], problems: dict[str, str], fence: int
    ) -> list[BindResult]:
        first = next(iter(problems.items()))
        log.info("rolling back a gang batch of %d pods: %s: %s", len(assignments), *first)
        # Only reservations are undone: a pod already bound runs in the cluster and keeps its capacity.
        held = [a for a in assignments if getattr(records.get(a.pod_key), "state", None) == PodState.ASSUMED]
        rollback = Txn(fence=fence)
        for a in held:
            rollback.release_pod(a.pod_key, a.gang)
        ok, reason = self.store.apply(rollback)
        if not ok:
            # Fenced out mid-rollback. Releasing a reservation that is still only assumed is safe without
            # the lock (nobody has bound it), so do that pod by pod; anything bound meanwhile stays.
            log.warning("rollback fenced out (%s); releasing still-assumed pods one by one", reason)
            for a in held:
                one = Txn(expect=[[a.pod_key, PodState.ASSUMED, ""]])
                one.release_pod(a.pod_key, a.gang)
                self.store.apply(one)
        out = []
        for a in assignments:
            if a.pod_key in problems:
                why = problems[a.pod_key]
                out.append(BindResult(pod_key=a.pod_key, status=FAILED, message=why))
            else:
                out.append(
                    BindResult(
                        pod_key=a.pod_key,
                        status=ROLLED_BACK,
                        message=f"rolled back with its gang: {first[0]}: {first[1]}",
                    )
                )
        return out
