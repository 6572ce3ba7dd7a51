"""Sending decided binds to the binder and taking in its answers.

A gang (or GangGroup) that reached its minimum, or an ordinary pod reserved, goes to the binder; its
answer is mirrored in the cache and in the queue's verdicts. A bind whose answer is unknown (the binder is
down) or PENDING keeps its reservations and is sent again after a short backoff: a decided gang is
finished, never dropped.
"""

from __future__ import annotations

import logging
from collections import defaultdict

from phalanx.gang.manager import GangStatus
from phalanx.gang.ops import PodsBound
from phalanx.metrics.catalog import GANG_WAIT
from phalanx.model.binding import Assignment, BindResult, BindStatus
from phalanx.model.status import EventReason, GangPhase
from phalanx.queueing.scheduling_queue import Outcome
from phalanx.scheduling.attempt_metrics import observe_bound
from phalanx.scheduling.cache import SchedulerCache
from phalanx.scheduling.ports import BinderPort, Carry, Popped, Verdict
from phalanx.scheduling.reports import StatusReports
from phalanx.scheduling.round import RoundState
from phalanx.state.pod_state import PodState
from phalanx.state.store import PodRecord
from phalanx.telemetry.failures import rpc_failure
from phalanx.telemetry.tracing import child_span, mark_linked, nested_traceparent

log = logging.getLogger(__name__)


class BindDispatch:
    def __init__(self, cache: SchedulerCache, binder: BinderPort, reports: StatusReports) -> None:
        self.cache = cache
        self.binder = binder
        self.reports = reports
        # Binds that were decided but did not complete (binder unreachable, or it answered PENDING).
        self.pending_groups: dict[tuple[str, ...], str] = {}  # gang group -> trace
        self.pending_pods: set[str] = set()  # ordinary pods (no gang, or a satisfied one's surplus)
        self._retry_at = 0.0
        self._backoff = 0.0

    def next_retry(self) -> float | None:
        """When the unfinished binds are due again (None: there are none)."""
        return self._retry_at if (self.pending_groups or self.pending_pods) else None

    def forget_pending(self) -> None:
        self.pending_groups.clear()
        self.pending_pods.clear()
        self._retry_at = 0.0

    def resume(self, record_key: str, gang: str, state: PodState) -> None:
        """A reservation found in Redis (a restart): a bind decided for it is sent again."""
        gangs = self.cache.gangs
        if not gang:
            self.pending_pods.add(record_key)
        elif state == PodState.BINDING or gangs.group_ready(gang):  # a started binding is finished whatever
            self.pending_groups[gangs.group_of(gang)] = gangs.record(gang).trace

    def decided(self, gang: str) -> bool:
        """Whether the gang's bind has been decided (so a timer falling due is not a timeout)."""
        gangs = self.cache.gangs
        if gangs.group_of(gang) in self.pending_groups or gangs.group_ready(gang):
            return True
        return any(r.state == PodState.BINDING for k in gangs.record(gang).assumed if (r := self.cache.assumed.get(k)))

    # -- sending ---------------------------------------------------------------------------------
    def bind_ready(self, state: RoundState) -> None:
        """Binds every gang (or GangGroup) that became ready this round: one batch each, all sent to the
        binder in one message when there are several."""
        gangs = self.cache.gangs
        batches = []
        for group, trace in sorted(state.ready_groups.items()):
            records = sorted(self._reserved(group), key=lambda r: r.key)
            if not records:
                continue
            assignments = [r.assignment() for r in records]
            all_or_nothing = any(gangs.status(g) != GangStatus.SATISFIED for g in group)
            batches.append((group, trace, assignments, all_or_nothing, {r.key: Popped(r.pod, trace) for r in records}))
        if len(batches) == 1:
            group, trace, assignments, all_or_nothing, items = batches[0]
            # A GangGroup binds in one batch, in the trace of the group; each member gang's own trace
            # links to that bind (and the bind back to them), so no member's trace ends without it.
            members = [t for t in (gangs.trace_of(g) for g in group) if t and t != trace]
            with child_span(
                "phalanx.scheduler.dispatch_bind",
                trace,
                {"phalanx.gangs": ",".join(group), "phalanx.pods": len(assignments)},
                linked=members,
            ) as span:
                mark_linked("phalanx.scheduler.bound_with_group", members, span, {"phalanx.gangs": ",".join(group)})
                self.dispatch(assignments, all_or_nothing, state, trace, items)
        elif batches:
            try:
                results = self.binder.bind_many([(a, aon, trace) for _, trace, a, aon, _ in batches], state.now)
            except Exception as exc:
                for _, _, assignments, _, items in batches:
                    self._unfinished(assignments, state, items, self._binder_silent(exc))
                return
            for (_, _, assignments, _, items), batch_results in zip(batches, results):
                self._take_results(batch_results, assignments, state, items)

    def _reserved(self, group: tuple[str, ...]) -> list[PodRecord]:
        """The group's reserved pods. Until a gang is satisfied its record lists them (the Lua transaction
        that reserves a gang's pods adds them to it), so they are read from there rather than found by
        scanning every reservation, which was quadratic in a burst of small gangs. A satisfied gang's later
        pods are reserved as ordinary pods, outside that list: a group with one is scanned."""
        gangs = self.cache.gangs
        if any(gangs.status(g) == GangStatus.SATISFIED for g in group):
            return [r for r in self.cache.assumed.values() if r.gang in group]
        return [r for g in group for k in gangs.record(g).assumed if (r := self.cache.assumed.get(k)) and r.gang == g]

    def dispatch(
        self,
        assignments: list[Assignment],
        all_or_nothing: bool,
        state: RoundState,
        trace: str,
        items: dict[str, Popped],
    ) -> None:
        try:
            results = self.binder.bind(assignments, all_or_nothing, state.now, nested_traceparent(trace))
        except Exception as exc:  # the binder is down or restarting: its answer is unknown, not negative
            self._unfinished(assignments, state, items, self._binder_silent(exc))
            return
        self._take_results(results, assignments, state, items)

    def retry(self, now: float, carry: Carry, force: bool = False) -> None:
        """Sends again the binds that did not finish, once their backoff is over."""
        if not (self.pending_groups or self.pending_pods) or (now < self._retry_at and not force):
            return
        state = RoundState(now)
        groups, pods = dict(self.pending_groups), sorted(self.pending_pods)
        self.pending_groups.clear()
        self.pending_pods.clear()
        state.ready_groups = groups
        self.bind_ready(state)
        records = [self.cache.assumed[k] for k in pods if k in self.cache.assumed]
        if records:
            assignments = [r.assignment() for r in records]
            self.dispatch(assignments, False, state, "", {r.key: Popped(r.pod) for r in records})
        if not (self.pending_groups or self.pending_pods):
            self._backoff = 0.0
        state.into(carry)

    def _binder_silent(self, exc: Exception) -> str:
        return f"the binder at {getattr(self.binder, 'address', '?')} did not answer: {rpc_failure(exc)}"

    def _unfinished(self, assignments: list[Assignment], state: RoundState, items: dict[str, Popped], why: str) -> None:
        """A decided bind that did not complete keeps its reservations and is sent again later; its pods
        leave the queue (the scheduler owns them now), so none is left in flight."""
        log.warning("bind of %d pods not finished (%s); retrying", len(assignments), why.splitlines()[0][:300])
        for a in assignments:
            if a.pod_key not in self.cache.assumed:
                continue
            state.verdicts.append(Verdict(items[a.pod_key], Outcome.ASSUMED))
            if a.gang:
                self.pending_groups[self.cache.gangs.group_of(a.gang)] = items[a.pod_key].trace
            else:
                self.pending_pods.add(a.pod_key)
        if self._retry_at <= state.now:  # one backoff step per retry, however many batches failed
            # Short and capped: a failed call to a binder that is down costs little, and a restarted
            # binder should get the decided gangs within a second or two.
            self._backoff = min(max(self._backoff * 2, 0.25), 2.0)
            self._retry_at = state.now + self._backoff

    # -- answers ---------------------------------------------------------------------------------
    def _take_results(
        self, results: list[BindResult], assignments: list[Assignment], state: RoundState, items: dict[str, Popped]
    ) -> None:
        """Mirrors the binder's verdicts in memory and in the queue's verdicts."""
        by_key = {a.pod_key: a for a in assignments}
        bound_by_gang: dict[str, list[str]] = defaultdict(list)
        unfinished: list[Assignment] = []
        if log.isEnabledFor(logging.DEBUG):
            log.debug("bind results: %s", {r.pod_key: r.status for r in results})
        for res in results:
            a = by_key[res.pod_key]
            item = items[res.pod_key]
            if res.status == BindStatus.BOUND:
                self.cache.finish_binding(res.pod_key)
                if a.gang:
                    bound_by_gang[a.gang].append(res.pod_key)
                state.verdicts.append(Verdict(item, Outcome.BOUND))
                state.bound += 1
                observe_bound(state.now, item.pod.created_at)
                self.reports.forget_pods([res.pod_key])  # placed: a later failure is news again
                continue
            if res.status == BindStatus.PENDING:
                unfinished.append(a)  # started and kept: finished later, never released
                continue
            # Not bound: the binder already released the reservation in Redis; memory follows, and pods
            # that found no room get another try.
            self.cache.forget_pod(res.pod_key, state.freed)
            if res.status == BindStatus.GONE:
                state.verdicts.append(Verdict(item, Outcome.DROPPED, res.message))
            else:
                state.verdicts.append(Verdict(item, Outcome.BACKOFF, res.message))
                self.reports.pod(res.pod_key, f"binding failed: {res.message}")
        if unfinished:
            why = next(r.message for r in results if r.pod_key == unfinished[0].pod_key)
            self._unfinished(unfinished, state, items, why)
        for gang, keys in bound_by_gang.items():
            self.gang_bound(gang, keys, state.now)

    def gang_bound(self, gang: str, keys: list[str], now: float) -> None:
        """Pods of the gang were recorded bound in Redis (by the binder): memory follows; the first bind
        of a gang is reported as its scheduling."""
        gangs = self.cache.gangs
        first = gangs.record(gang).satisfied_at is None
        self.cache.apply_gang_ops([PodsBound(gang, tuple(keys), now)])
        if not first:  # later binds of a satisfied gang change only counters, which the cluster feed reports
            return
        spec = gangs.specs.get(gang)
        if spec is not None:
            GANG_WAIT.observe(max(now - spec.created_at, 0.0))
        message = f"gang {gang}: {len(gangs.record(gang).bound)}/{gangs.min_of(gang)} pods bound"
        self.reports.gang(spec, gangs.record(gang), GangPhase.SCHEDULED, EventReason.GANG_SCHEDULED, message, now)
