"""Gang wait timeouts: a gang whose wait ran out before it reached its minimum (with the rest of its
GangGroup) gives back every reservation, and its pods are told why, naming what it lacked.

What happens next follows the form that declared the gang (phalanx.intake.gangs.timeout_is_final):
- Koordinator's (annotations, or its scheduling.sigs.k8s.io PodGroup): final. Every pod is marked
  gang.scheduling.koordinator.sh/timeout, leaves the queue, and is not scheduled again.
- the others (scheduler-plugins, Volcano and Workload API PodGroups, the lightweight, kube-batch,
  delayed-binding and ConfigMap forms): the gang backs off for the scheduler's retry backoff and is then
  tried again with a fresh wait, as Coscheduling does with a group rejected after its wait. The gang record
  in Redis says until when (`retry_at`, and the timer fires then), so a restarted scheduler keeps the backoff.
  Its pods stay in the queue, parked as unschedulable until the backoff ends (a node change or a pop in
  between is answered with the same message); the pods it had reserved are handed back to the queue first.

Every timer is set by the scheduler (the binder only clears them, when it binds), so the earliest deadline
known here is a safe lower bound: before it nothing can be due and Redis need not be asked.
"""

from __future__ import annotations

from collections.abc import Callable

from phalanx import faults
from phalanx.gang.manager import GangStatus
from phalanx.intake.gangs import timeout_is_final
from phalanx.metrics.catalog import GANG_TIMEOUTS
from phalanx.model.keys import KOORD_TIMEOUT
from phalanx.model.status import EventReason, GangPhase
from phalanx.queueing.hints import Hint
from phalanx.queueing.scheduling_queue import Outcome
from phalanx.scheduling.binds import BindDispatch
from phalanx.scheduling.cache import SchedulerCache
from phalanx.scheduling.ports import Carry, Popped, QueuePort, Verdict
from phalanx.scheduling.reports import StatusReports
from phalanx.scheduling.round import RoundState
from phalanx.state.store import StateStore
from phalanx.state.txn import Txn
from phalanx.telemetry.tracing import child_span

DEFAULT_RETRY_BACKOFF = 10.0  # seconds; Coscheduling's podGroupBackoffSeconds is 0 by default
# A backing-off gang's pods wait for the end of the backoff, not for capacity: only a node change moves them
# earlier (and they are told the same again).
BACKING_OFF = Hint(node_change_only=True)


class GangTimeouts:
    def __init__(
        self,
        store: StateStore,
        cache: SchedulerCache,
        binds: BindDispatch,
        reports: StatusReports,
        queue: Callable[[], QueuePort] | None = None,
        retry_backoff: float = DEFAULT_RETRY_BACKOFF,
    ) -> None:
        """`queue`: the scheduler's queue as it is now (tests swap it); `retry_backoff`: seconds a retrying
        form's gang waits after its timeout before it is tried again."""
        self.store = store
        self.cache = cache
        self.binds = binds
        self.reports = reports
        self._queue = queue
        self.retry_backoff = retry_backoff
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
        if self.cache.gangs.take_timers_changed():
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
        # A timed-out gang's timer is the end of its backoff (only retrying forms keep one): it is tried again.
        backed_off = [g for g in due_all if gangs.status(g) == GangStatus.TIMED_OUT and gangs.retry_at(g) is not None]
        if backed_off:
            self.lift(backed_off, now, carry)
        # A gang placed whole whose binding has not finished (binder down, API server slow) is not late:
        # it is being bound. Its timer is cleared when the binding is recorded.
        due = [
            g
            for g in due_all
            if g not in backed_off
            and gangs.status(g) not in (GangStatus.SATISFIED, GangStatus.TIMED_OUT)
            and not self.binds.decided(g)
        ]
        if not due:
            return
        expired: set[str] = set()
        for gang in due:  # a partner already timed out (backing off) holds nothing and keeps its own clock
            expired.update(
                g for g in gangs.group_of(gang) if gangs.status(g) not in (GangStatus.SATISFIED, GangStatus.TIMED_OUT)
            )
        txn = Txn()
        stmt = gangs.begin()
        victims: dict[str, list[str]] = {}
        messages: dict[str, str] = {}
        retry_at = {g: None if self._final(g) else now + self.retry_backoff for g in expired}
        for gang in sorted(expired):  # all before any release: a message counts its group partners' pods too
            messages[gang] = self._said[gang] = self._message(gang, retry_at[gang] is not None)
        handed_back: list[Verdict] = []
        for gang in sorted(expired):
            rec = gangs.record(gang)
            victims[gang] = sorted(set(rec.rounds) | rec.assumed)
            for k in sorted(rec.assumed):
                if (held := self.cache.assumed.get(k)) is not None:
                    txn.release_pod(k, gang)
                    if retry_at[gang] is not None:
                        handed_back.append(Verdict(Popped(held.pod, rec.trace), Outcome.UNSCHEDULABLE, "", BACKING_OFF))
            gangs.timed_out(gang, stmt, retry_at[gang])
        retrying = sorted(g for g, t in retry_at.items() if t is not None)
        if retrying:
            # The queue hears first: the pods a retrying gang had reserved left it when they were placed, and
            # must be there when it is tried again. Should this process die before the commit below, the
            # reservations still stand (a pod popped meanwhile is answered from them) and the timer is
            # still due, so the next process times the gang out again.
            self.queue.done(handed_back, [], retrying, now)
        txn.gang_ops = stmt.ops
        self.store.must_apply(txn)
        self.cache.commit_gangs(stmt)
        faults.reached("scheduler.after_timeout")
        GANG_TIMEOUTS.inc(len(expired))
        to_remove: list[str] = []
        for gang, pods in victims.items():
            final = retry_at[gang] is None
            with child_span(
                "phalanx.scheduler.gang_timeout",
                gangs.record(gang).trace,
                {"phalanx.gang": gang, "phalanx.pods": len(pods), "phalanx.final": final},
            ):
                for key in pods:
                    self.cache.forget_pod(key, carry.freed)
                    self.reports.pod(
                        key,
                        messages[gang],
                        annotations={KOORD_TIMEOUT: "true"} if final else None,
                        event=EventReason.GANG_TIMEOUT,
                    )
                    if final:
                        to_remove.append(key)
            # scheduler-plugins shows a gang that will be tried again as Pending (its controller never sets
            # Failed for a timeout), Volcano as Pending with its Unschedulable condition.
            self.reports.gang(
                gangs.specs.get(gang),
                gangs.record(gang),
                GangPhase.FAILED if final else GangPhase.PENDING,
                EventReason.GANG_TIMEOUT,
                messages[gang],
                now,
                unschedulable=True,
                pod_key=pods[0] if pods else "",
                occurrence=True,  # a retrying gang stays Pending: its timeout still gets its Event
            )
        carry.remove.extend(to_remove)  # the released capacity (carry.freed) may fit others

    def lift(self, keys: list[str], now: float, carry: Carry | None = None) -> None:
        """Ends the backoff of timed-out gangs of retrying forms: each is tried again as new (a fresh wait
        and Strict cycle), and its pods parked in the queue become active."""
        gangs = self.cache.gangs
        # Activated first: should this process die before the commit, the pods are active and the timer
        # still due (the next process lifts it again); after it, nothing would wake them.
        self.queue.done([], sorted(keys), [], now)
        stmt = gangs.begin()
        for gang in sorted(keys):
            gangs.lift_timeout(gang, stmt)
        self.store.must_apply(Txn(gang_ops=stmt.ops))
        self.cache.commit_gangs(stmt)
        for gang in keys:
            self._said.pop(gang, None)
        if carry is not None:
            # Again after whatever the next pop delivers: a verdict parking one of its pods (sent before the
            # backoff ended, delivered after) must not leave it parked.
            carry.activate.extend(sorted(keys))

    def turn_away(self, gang: str, unit: list[Popped], state: RoundState) -> bool:
        """Pods of a timed-out gang popped from the queue: a final timeout drops them (marked timed out); a
        retrying gang's pods wait for its backoff to end. Returns False when the backoff is over after all
        (its timer not handled yet, or the gang timed out under a version that made every timeout final):
        the gang is lifted here, and the caller schedules the pods."""
        gangs = self.cache.gangs
        retry_at = gangs.retry_at(gang)
        if retry_at is None and self._final(gang):
            said = self.said(gang)
            for item in unit:
                self.reports.pod(item.pod.key, said, annotations={KOORD_TIMEOUT: "true"})
            state.reject(unit, Outcome.DROPPED, said, None)
            return True
        if retry_at is None or retry_at <= state.now:
            self.lift([gang], state.now)
            return False
        state.reject(unit, Outcome.UNSCHEDULABLE, self.said(gang), self.reports, BACKING_OFF)
        return True

    @property
    def queue(self) -> QueuePort:
        if self._queue is None:
            raise RuntimeError("GangTimeouts was given no queue: retrying gangs need one")
        return self._queue()

    def _final(self, gang: str) -> bool:
        """Whether the gang's timeout is for good: by its declaration's form (an undeclared gang's too)."""
        spec = self.cache.gangs.specs.get(gang)
        return spec is None or timeout_is_final(spec.source)

    def said(self, gang: str) -> str:
        """What a pod of a timed-out gang is told."""
        said = self._said.get(gang)
        if said is not None:
            return said
        # Timed out before this process started: what it had placed then went with its reservations.
        return f"gang {gang} timed out after waiting {self.cache.gangs.wait_seconds(gang):g}s; " + self._next(
            self.cache.gangs.retry_at(gang) is not None or not self._final(gang)
        )

    def _next(self, retrying: bool) -> str:
        """What comes after the timeout, as its message ends."""
        if retrying:
            return f"retrying after {self.retry_backoff:g}s"
        return "it will not be scheduled again until its pods are recreated"

    def _message(self, gang: str, retrying: bool) -> str:
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
            f"{gangs.placed_count(gang)}/{gangs.min_of(gang)} pods placed ({why}); {self._next(retrying)}"
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
