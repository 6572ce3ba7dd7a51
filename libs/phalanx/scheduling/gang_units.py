"""Places one gang's popped pods all-or-nothing: the gang's gates, one attempt, and what a failure sends back.

A unit is the run of a gang's pods one pop handed out. Its gates come first (not declared, invalid, timed
out, once satisfied, minResources); then one `Attempt` places the pods on the snapshot and commits the
reservations with the gang's operations. Strict gangs fail whole: the attempt is discarded, the pods the
gang had reserved before are released in Redis, and preemption is asked whether evicting lower-priority
units would make room. NonStrict pods fail alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from phalanx import faults
from phalanx.framework.framework import Framework
from phalanx.gang.manager import GangStatus
from phalanx.model.objects import GangSpec, PodInfo
from phalanx.model.quantity import format_milli
from phalanx.model.status import EventReason, GangPhase
from phalanx.queueing.hints import Hint
from phalanx.queueing.scheduling_queue import Outcome
from phalanx.scheduling.attempt import Attempt, skip_reserved
from phalanx.scheduling.cache import SchedulerCache
from phalanx.scheduling.hints import rejection_hint, shortfall_hint, with_slots
from phalanx.scheduling.ports import BinderPort, Popped, Verdict
from phalanx.scheduling.preemption import Decision, Preemptions
from phalanx.scheduling.reports import StatusReports
from phalanx.scheduling.reservation import ReservationPlanner
from phalanx.scheduling.round import RoundState
from phalanx.scheduling.timeouts import GangTimeouts
from phalanx.state.store import StateStore
from phalanx.state.txn import Txn
from phalanx.telemetry.tracing import child_span

log = logging.getLogger(__name__)


class GangUnits:
    def __init__(
        self,
        store: StateStore,
        cache: SchedulerCache,
        framework: Framework,
        reports: StatusReports,
        timeouts: GangTimeouts,
        reservation: ReservationPlanner,
        preemption: Preemptions,
        binder: Callable[[], BinderPort],
    ) -> None:
        self.store = store
        self.cache = cache
        self.framework = framework
        self.reports = reports
        self.timeouts = timeouts
        self.reservation = reservation
        self.preemption = preemption
        self._binder = binder  # looked up at each use: a test may swap the scheduler's binder

    def schedule(self, gang: str, unit: list[Popped], state: RoundState) -> None:
        gangs = self.cache.gangs
        status = gangs.status(gang)
        if status == GangStatus.UNDECLARED:
            msg = f"gang {gang} is not declared yet: its PodGroup or ConfigMap does not exist"
            state.reject(unit, Outcome.UNSCHEDULABLE, msg, self.reports)
            return
        if status == GangStatus.INVALID:
            state.reject(unit, Outcome.DROPPED, gangs.specs[gang].invalid, self.reports)
            return
        if status == GangStatus.TIMED_OUT:
            if not self.timeouts.turn_away(gang, unit, state):
                self.schedule(gang, unit, state)  # its backoff is over: tried again, as new
            return
        unit = skip_reserved(self.cache, unit, state)
        if not unit:
            return
        if status == GangStatus.SATISFIED:
            state.ordinary.extend(unit)  # once-satisfied: the gang rules no longer apply
            return
        spec = gangs.specs[gang]
        with child_span(
            "phalanx.scheduler.gang_attempt", unit[0].trace, {"phalanx.gang": gang, "phalanx.pods": len(unit)}
        ) as span:
            shortfall = self._min_resources_shortfall(spec)
            if shortfall:
                span.set_attribute("phalanx.result", "min-resources")
                self._reject_min_resources(gang, unit, spec, shortfall, state)
                return
            for _ in range(2):
                if self._attempt(gang, unit, state, span):
                    return
                # Another writer changed a node we chose: refresh and decide again.
                self.cache.reload_usage(self.store.load_used())
                state.reloaded = True
            state.reject(unit, Outcome.BACKOFF, f"{gangs.describe(gang)}; commit conflicts, retrying", self.reports)

    def _attempt(self, gang: str, unit: list[Popped], state: RoundState, span: object) -> bool:
        """One attempt at the unit. False: Redis refused the commit (a conflict), nothing changed."""
        gangs, snapshot = self.cache.gangs, self.cache.snapshot
        unit = gangs.required_first(gang, unit, lambda item: item.pod)  # each role's minimum first (Volcano)
        strict = gangs.strict(gang)
        attempt = Attempt(self.cache, self.store, gang)
        rejected: list[Popped] = []
        failure: tuple[Popped, str] | None = None
        unplaceable: list[tuple[Popped, str, Hint | None]] = []  # NonStrict failures: they touch no other pod
        hint: Hint | None = None
        for item in unit:
            if strict and not gangs.try_enter_cycle(gang, item.pod.key, attempt.stmt):
                rejected.append(item)
                continue
            res = self.framework.place(item.pod, snapshot)
            if res.ok:
                assert res.node_index is not None
                attempt.place(item, res.node_index, res.requests)
                continue
            if strict and not gangs.reached_minimum(gang, [p.item.pod for p in attempt.placed]):
                failure = (item, res.message)  # what may help: judged with the gang's earlier pods still reserved
                hint = rejection_hint(self.framework, item.pod, snapshot, self._gang_pods(gang, unit))
                break
            # NonStrict, or Strict once the pods placed reach the gang's minimum: a surplus pod fails alone
            unplaceable.append((item, res.message, rejection_hint(self.framework, item.pod, snapshot)))

        if strict and failure is not None:
            placed_any = bool(attempt.placed)
            attempt.discard()
            return self._fail_strict(gang, unit, placed_any, failure, attempt, state, span, hint)

        if attempt.placed:
            gangs.assumed(gang, [p.item.pod.key for p in attempt.placed], state.now, attempt.stmt, unit[0].trace)
        ok, reason = attempt.commit()
        if not ok:
            log.info("gang %s: commit conflict (%s)", gang, reason)
            return False
        if attempt.placed:
            faults.reached("scheduler.after_commit")
        for p in attempt.placed:
            state.freed.taken(attempt.node_name(p))  # keeps the queue's gang slot counts current
            if self.reservation.enabled:
                self.reservation.note_started(p.item.pod.key, state.now)
            state.verdicts.append(Verdict(p.item, Outcome.ASSUMED))
        for item in rejected:
            msg = f"{gangs.describe(gang)}; already tried in this scheduling cycle"
            state.verdicts.append(Verdict(item, Outcome.BACKOFF, msg))
        decision = Decision()
        if unplaceable and not gangs.reached_minimum(gang):
            decision = self.preemption.consider(gang, [item.pod for item, _, _ in unplaceable], state.now)
            if decision.nominated:
                self.preemption.evict_pending(self._binder(), state.now, force=True)
        for item, why, pod_hint in unplaceable:
            msg = f"{gangs.describe(gang)}; {item.pod.name}: {why}"
            if decision.message:
                msg = f"{msg}; {decision.message}"
            self.timeouts.last_failure[gang] = f"{item.pod.name}: {why}"
            state.verdicts.append(Verdict(item, Outcome.UNSCHEDULABLE, msg, pod_hint))
            self.reports.pod(item.pod.key, msg, nominated_node=decision.nominated.get(item.pod.key, ""))
        if attempt.placed:
            state.activate.append(gang)
            span.set_attribute("phalanx.result", "assumed")  # type: ignore[attr-defined]
            span.set_attribute("phalanx.assumed", len(attempt.placed))  # type: ignore[attr-defined]
        if gangs.group_ready(gang):
            state.ready_groups[gangs.group_of(gang)] = gangs.record(gang).trace or unit[0].trace
        elif attempt.placed:
            waiting = f"{gangs.describe(gang)}; waiting for the rest of the gang"
            if len(gangs.group_of(gang)) > 1 and gangs.reached_minimum(gang):
                waiting = f"{gangs.describe(gang)}; waiting for the other gangs of its group"
            for p in attempt.placed:
                self.reports.waiting(p.item.pod.key, waiting)  # not Unschedulable: see StatusReports
            self.report(gang, GangPhase.SCHEDULING, EventReason.GANG_WAITING, waiting, state.now)
        return True

    def _fail_strict(
        self,
        gang: str,
        unit: list[Popped],
        placed_any: bool,
        failure: tuple[Popped, str],
        attempt: Attempt,
        state: RoundState,
        span: object,
        hint: Hint | None = None,
    ) -> bool:
        """Strict: one pod failed, so every assumed pod of the gang is released and the rest of the
        gang is rejected until the cycle ends. `hint`: what may help the failed pod, for the whole gang."""
        gangs, stmt = self.cache.gangs, attempt.stmt
        failed_item, why = failure
        previously = [k for k in gangs.record(gang).assumed if k in self.cache.assumed]
        message = (
            f"{gangs.describe(gang)}; {failed_item.pod.name}: {why}; Strict mode released the gang's reservations"
            f"{self.reservation.note(gang)}"
        )
        self.timeouts.last_failure[gang] = f"{failed_item.pod.name}: {why}"
        for item in unit:
            gangs.mark_tried(gang, item.pod.key, stmt)
        if placed_any or previously:  # pods reached the wait stage before the failure: the gang's wait runs
            gangs.start_wait(gang, state.now, stmt, unit[0].trace)
        gangs.invalidate_cycle(gang, stmt)
        gangs.released(gang, previously, stmt)
        txn = Txn(gang_ops=stmt.ops)
        for key in previously:
            txn.release_pod(key, gang)
        ok, reason = self.store.apply(txn)
        if not ok:
            log.info("gang %s: release conflict (%s)", gang, reason)
            return False
        self.cache.commit_gangs(stmt)
        released = [r for key in previously if (r := self.cache.forget_pod(key, state.freed)) is not None]
        # The gang holds nothing now: may evicting lower-priority units make it fit?
        decision = self.preemption.consider(gang, [r.pod for r in released] + [item.pod for item in unit], state.now)
        if decision.message:
            message = f"{message}; {decision.message}"
            if decision.nominated:
                self.preemption.evict_pending(self._binder(), state.now, force=True)
        # Now that the gang holds nothing: how many of its pods each node could take (see phalanx.queueing.hints).
        hint = with_slots(hint, self.cache.snapshot, len(unit) + len(released))
        for r in released:
            state.verdicts.append(
                Verdict(Popped(r.pod, gangs.record(gang).trace), Outcome.UNSCHEDULABLE, message, hint)
            )
            self.reports.pod(r.key, message, nominated_node=decision.nominated.get(r.key, ""))
        for item in unit:
            state.verdicts.append(Verdict(item, Outcome.UNSCHEDULABLE, message, hint))
            self.reports.pod(item.pod.key, message, nominated_node=decision.nominated.get(item.pod.key, ""))
        state.failed.append(gang)
        reason = EventReason.PREEMPTING if decision.nominated else EventReason.FAILED_SCHEDULING
        self.report(gang, GangPhase.PENDING, reason, message, state.now, unschedulable=True)
        span.set_attribute("phalanx.result", "strict-failure")  # type: ignore[attr-defined]
        span.set_attribute("phalanx.reason", why)  # type: ignore[attr-defined]
        return True

    def _gang_pods(self, gang: str, unit: list[Popped]) -> list[PodInfo]:
        """The pods a failure of the gang sends back to the queue: the unit's and those it had reserved."""
        assumed = self.cache.assumed
        held = [r.pod for k in self.cache.gangs.record(gang).assumed if (r := assumed.get(k)) is not None]
        return [item.pod for item in unit] + held

    def _reject_min_resources(
        self, gang: str, unit: list[Popped], spec: GangSpec, shortfall: str, state: RoundState
    ) -> None:
        """The gang's minResources exceed what the cluster has free. Lower-priority pods may hold what it
        lacks: the planner looks for victims freeing both minResources and a place for the gang's pods
        (Kubeflow's training-operator always declares minResources, so without this such jobs never preempt),
        and the gang passes this gate once they are gone."""
        decision = self.preemption.consider(gang, [item.pod for item in unit], state.now)
        msg = f"{self.cache.gangs.describe(gang)}; {shortfall}"
        if decision.message:
            msg = f"{msg}; {decision.message}"
            if decision.nominated:
                self.preemption.evict_pending(self._binder(), state.now, force=True)
        self.timeouts.last_failure[gang] = shortfall
        free = self.cache.snapshot.free_total()
        hint = shortfall_hint(r for r, need in spec.min_resources.items() if free.get(r, 0) < need)
        for item in unit:
            state.verdicts.append(Verdict(item, Outcome.UNSCHEDULABLE, msg, hint))
            self.reports.pod(item.pod.key, msg, nominated_node=decision.nominated.get(item.pod.key, ""))
        reason = EventReason.PREEMPTING if decision.nominated else EventReason.FAILED_SCHEDULING
        self.report(gang, GangPhase.PENDING, reason, msg, state.now, unschedulable=True)

    def _min_resources_shortfall(self, spec: GangSpec) -> str:
        if not spec.min_resources or self.cache.gangs.placed_count(spec.key) > 0:
            return ""
        free = self.cache.snapshot.free_total()
        short = [
            f"minResources needs {format_milli(r, need)} {r}, the cluster has {format_milli(r, free.get(r, 0))} free"
            for r, need in sorted(spec.min_resources.items())
            if free.get(r, 0) < need
        ]
        return "; ".join(short)

    def report(
        self,
        gang: str,
        phase: GangPhase,
        reason: EventReason,
        message: str,
        now: float,
        unschedulable: bool = False,
    ) -> None:
        gangs = self.cache.gangs
        self.reports.gang(
            gangs.specs.get(gang), gangs.record(gang), phase, reason, message, now, unschedulable=unschedulable
        )
