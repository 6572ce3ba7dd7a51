"""Gang wait timeouts: a gang whose wait ran out before it reached its minimum (with the rest of its
GangGroup) gives back every reservation, and its pods are told why, naming what it lacked.

Every timer is set by the scheduler (the binder only clears them, when it binds), so the earliest deadline
known here is a safe lower bound: before it nothing can be due and Redis need not be asked.
"""

from __future__ import annotations

from phalanx.gang.manager import GangStatus
from phalanx.metrics.catalog import GANG_TIMEOUTS
from phalanx.model.keys import KOORD_TIMEOUT
from phalanx.model.status import EventReason, GangPhase
from phalanx.scheduling.binds import BindDispatch
from phalanx.scheduling.cache import SchedulerCache
from phalanx.scheduling.ports import Carry
from phalanx.scheduling.reports import StatusReports
from phalanx.state.store import StateStore
from phalanx.state.txn import Txn
from phalanx.telemetry.tracing import child_span


class GangTimeouts:
    def __init__(self, store: StateStore, cache: SchedulerCache, binds: BindDispatch, reports: StatusReports) -> None:
        self.store = store
        self.cache = cache
        self.binds = binds
        self.reports = reports
        self.next_deadline: float | None = None
        # The last reason a pod of each gang could not be placed, so a timeout message still names the
        # missing resource.
        self.last_failure: dict[str, str] = {}
        # Each timed-out gang's message as said when its wait ran out, so pods turned away later are told
        # the counts of that moment, not the zero left once its reservations were released.
        self._said: dict[str, str] = {}

    def reload(self) -> None:
        self.next_deadline = self.store.next_timer()

    def refresh(self) -> None:
        """Re-reads the next deadline if a gang's timer was set or cleared since the last read."""
        gangs = self.cache.gangs
        if gangs.timers_changed:
            gangs.timers_changed = False
            self.next_deadline = self.store.next_timer()

    def none_before(self, instant: float) -> bool:
        self.refresh()
        return self.next_deadline is None or self.next_deadline > instant

    def forget(self, gang: str) -> None:
        self.last_failure.pop(gang, None)
        self._said.pop(gang, None)

    def expire(self, now: float, carry: Carry) -> None:
        """Times out every gang whose wait has run out by `now` (with its GangGroup partners)."""
        if self.next_deadline is None or now < self.next_deadline:
            return
        gangs = self.cache.gangs
        due_all, self.next_deadline = self.store.timers(now)
        # A gang placed whole whose binding has not finished (binder down, API server slow) is not late:
        # it is being bound. Its timer is cleared when the binding is recorded.
        due = [g for g in due_all if gangs.status(g) != GangStatus.SATISFIED and not self.binds.decided(g)]
        if not due:
            return
        expired: set[str] = set()
        for gang in due:
            expired.update(g for g in gangs.group_of(gang) if gangs.status(g) != GangStatus.SATISFIED)
        txn = Txn()
        stmt = gangs.begin()
        victims: dict[str, list[str]] = {}
        messages: dict[str, str] = {}
        for gang in sorted(expired):  # all before any release: a message counts its group partners' pods too
            messages[gang] = self._said[gang] = self._message(gang)
        for gang in sorted(expired):
            rec = gangs.record(gang)
            victims[gang] = sorted(set(rec.rounds) | rec.assumed)
            for k in sorted(rec.assumed):
                if k in self.cache.assumed:
                    txn.release_pod(k, gang)
            gangs.timed_out(gang, stmt)
        txn.gang_ops = stmt.ops
        self.store.must_apply(txn)
        gangs.commit(stmt)
        GANG_TIMEOUTS.inc(len(expired))
        to_remove: list[str] = []
        for gang, pods in victims.items():
            with child_span(
                "phalanx.scheduler.gang_timeout",
                gangs.record(gang).trace,
                {"phalanx.gang": gang, "phalanx.pods": len(pods)},
            ):
                for key in pods:
                    self.cache.give_back(key, carry.freed)
                    self.reports.pod(
                        key, messages[gang], annotations={KOORD_TIMEOUT: "true"}, event=EventReason.GANG_TIMEOUT
                    )
                    to_remove.append(key)
            self.reports.gang(
                gangs.specs.get(gang),
                gangs.record(gang),
                GangPhase.FAILED,
                EventReason.GANG_TIMEOUT,
                messages[gang],
                now,
                unschedulable=True,
                pod_key=pods[0] if pods else "",
            )
        carry.remove.extend(to_remove)  # the released capacity (carry.freed) may fit others

    def said(self, gang: str) -> str:
        """What a pod of a timed-out gang is told."""
        said = self._said.get(gang)
        if said is not None:
            return said
        # Timed out before this process started: what it had placed then went with its reservations.
        return (
            f"gang {gang} timed out after waiting {self.cache.gangs.wait_seconds(gang):g}s; it will not be "
            f"scheduled again until its pods are recreated"
        )

    def _message(self, gang: str) -> str:
        """Why the wait ran out, said while the gang still holds its reservations (they are counted). A gang
        that reached its minimum waited for the members of its GangGroup that did not: those are named."""
        gangs = self.cache.gangs
        partners = [k for k in gangs.group_of(gang) if k != gang and not gangs.reached_minimum(k)]
        if partners and gangs.reached_minimum(gang):
            why = "; ".join(self._partner_progress(k) for k in partners)
        elif last := self.last_failure.get(gang):
            why = f"last failure: {last}"
        else:
            why = "too few of its pods were created"
        return (
            f"gang {gang} timed out after waiting {gangs.wait_seconds(gang):g}s with "
            f"{gangs.placed_count(gang)}/{gangs.min_of(gang)} pods placed ({why}); it will not be scheduled "
            f"again until its pods are recreated"
        )

    def _partner_progress(self, gang: str) -> str:
        gangs = self.cache.gangs
        if gang not in gangs.specs:
            return f"waiting for GangGroup member {gang}, which is not declared"
        last = self.last_failure.get(gang)
        return (
            f"waiting for GangGroup member {gang} which has {gangs.placed_count(gang)}/{gangs.min_of(gang)} "
            f"pods placed" + (f", its last failure: {last}" if last else "")
        )
