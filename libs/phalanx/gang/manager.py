"""Gang bookkeeping: declarations, accumulation, Strict cycles, GangGroups, timers, match policies, role
minimums.

The manager holds the scheduler's copy of every gang's runtime record and knows no storage. A scheduling
attempt decides through a `GangStatement` (its changes as operations, `phalanx.gang.ops`); the scheduler
commits them to Redis with the attempt's reservations and then calls `commit`, so memory changes only
after Redis accepted the change, and a conflict leaves nothing to restore.

Which pods count toward a gang's minimum is its match policy (Koordinator's `match-policy`, as its
coscheduling plugin reads it in Permit, `isGangValidForPermit`):
- once-satisfied (the default): waiting pods (reserved, not bound yet), and pods found bound; the gang's
  first bind satisfies it (GangStatus.SATISFIED), and its later pods schedule as ordinary pods, for as long
  as its bound pods (running, or finished successfully) make its minimum. When they fall below it (evicted,
  deleted, preempted, failed, their node lost) it is satisfied no longer (SatisfactionLost, in the
  transaction that releases them): its recreated pods are placed all-or-nothing again, counted with the
  pods still bound, with a fresh wait. Pods that succeeded keep counting, so a job finishing is not re-gated.
- only-waiting: waiting pods only; never satisfied for good: each new batch must reach the minimum alone.
- waiting-and-running: waiting and bound pods; never satisfied for good either.
A gang with role minimums (Volcano's minTaskMember, `phalanx.gang.roles`) also needs each role's minimum
among the pods that count.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from enum import Enum
from typing import TypeVar

from phalanx.gang import roles
from phalanx.gang.ops import (
    CycleAdvanced,
    CycleInvalidated,
    GangOp,
    PodsAssumed,
    PodsBound,
    PodsReleased,
    PodsSucceeded,
    SatisfactionLost,
    TimedOut,
    TimeoutLifted,
    TriedInCycle,
    WaitStarted,
)
from phalanx.gang.record import GangRecord
from phalanx.gang.statement import GangStatement
from phalanx.model.objects import GangMode, GangSpec, PodInfo

ONCE_SATISFIED = "once-satisfied"
ONLY_WAITING = "only-waiting"
WAITING_AND_RUNNING = "waiting-and-running"

T = TypeVar("T")


class GangStatus(str, Enum):
    NO_GANG = "no-gang"
    UNDECLARED = "undeclared"  # its PodGroup/ConfigMap does not exist yet
    INVALID = "invalid"
    TIMED_OUT = "timed-out"
    SATISFIED = "satisfied"  # once-satisfied and bound: further pods schedule as ordinary pods
    ACCUMULATING = "accumulating"


def once_satisfied(spec: GangSpec | None) -> bool:
    """Whether the gang's first bind satisfies it for good: Koordinator's default policy, and an undeclared
    gang's (its policy is not known)."""
    return spec is None or spec.match_policy not in (ONLY_WAITING, WAITING_AND_RUNNING)


class GangManager:
    def __init__(self, default_wait_seconds: float) -> None:
        self.default_wait_seconds = default_wait_seconds
        self.specs: dict[str, GangSpec] = {}
        self.records: dict[str, GangRecord] = {}
        self.timers_changed = False  # a gang's timer was set or cleared since the flag was last reset
        # Gangs a bind satisfied while below their minimum (a pod bound alone, decided while its gang was
        # satisfied, finished after the gang lost its pods; a gang pod deleted mid-bind): `settle` them.
        self.unsettled: set[str] = set()

    def take_unsettled(self) -> set[str]:
        """The gangs to settle, and the set emptied."""
        keys, self.unsettled = self.unsettled, set()
        return keys

    def take_timers_changed(self) -> bool:
        """Whether a timer was set or cleared since the last call."""
        changed, self.timers_changed = self.timers_changed, False
        return changed

    # -- declarations ----------------------------------------------------------------------------
    def upsert(self, spec: GangSpec) -> None:
        self.specs[spec.key] = spec

    def remove(self, key: str) -> None:
        self.specs.pop(key, None)

    def load(self, specs: dict[str, GangSpec], records: dict[str, GangRecord]) -> None:
        """Everything from storage (the scheduler cache's resync)."""
        self.specs = specs
        self.records = records
        self.timers_changed = False

    def forget(self, key: str) -> None:
        self.specs.pop(key, None)
        self.records.pop(key, None)
        self.unsettled.discard(key)
        self.timers_changed = True

    def record(self, key: str) -> GangRecord:
        rec = self.records.get(key)
        if rec is None:
            rec = self.records[key] = GangRecord(key)
        return rec

    def trace_of(self, key: str) -> str:
        """The gang's W3C traceparent, "" when it has none yet (does not create a record)."""
        rec = self.records.get(key)
        return rec.trace if rec is not None else ""

    def status(self, key: str) -> GangStatus:
        if not key:
            return GangStatus.NO_GANG
        spec = self.specs.get(key)
        rec = self.records.get(key)
        if rec is not None and rec.timed_out:
            return GangStatus.TIMED_OUT
        if rec is not None and rec.satisfied_at is not None and once_satisfied(spec):
            return GangStatus.SATISFIED
        if spec is None:
            return GangStatus.UNDECLARED
        if spec.invalid:
            return GangStatus.INVALID
        return GangStatus.ACCUMULATING

    def wait_seconds(self, key: str) -> float:
        spec = self.specs.get(key)
        if spec is not None and spec.wait_seconds is not None:
            return spec.wait_seconds
        return self.default_wait_seconds

    # -- statements ------------------------------------------------------------------------------
    def begin(self) -> GangStatement:
        return GangStatement(self.record)

    def commit(self, stmt: GangStatement) -> None:
        """Redis accepted the statement's operations: memory takes them too."""
        self.records.update(stmt.working)
        if any(op.moves_timer for op in stmt.ops):
            self.timers_changed = True

    def apply(self, ops: Iterable[GangOp]) -> None:
        """Operations someone else already wrote to Redis (the binder's commit): memory follows."""
        for op in ops:
            rec = self.record(op.gang)
            first_bind = isinstance(op, PodsBound) and rec.satisfied_at is None
            op.apply(rec)
            if op.moves_timer or first_bind:  # the binder cleared the timer of a gang it satisfied
                self.timers_changed = True
            if first_bind and self.below_minimum(op.gang, rec):
                self.unsettled.add(op.gang)

    # -- Strict cycles ---------------------------------------------------------------------------
    def strict(self, key: str) -> bool:
        spec = self.specs.get(key)
        return spec is None or spec.mode == GangMode.STRICT

    def try_enter_cycle(self, key: str, pod: str, stmt: GangStatement) -> bool:
        """Strict PreFilter: no pod is tried while the cycle is invalid (each is turned away once, then the
        cycle ends); in a valid cycle a pod is tried.

        A pod turned away by an invalid cycle still counts as tried in it: the cycle ends once every pod
        has been through it, and a pod that never counted would keep it invalid, and the gang rejected,
        for good (its pods reaching the scheduler apart, one failing first, was enough)."""
        rec = stmt.record(key)
        if rec.rounds.get(pod, 0) >= rec.cycle:
            # Tried in this cycle already. While the cycle is valid it comes back only because it lost its
            # place (a bind refused, a reservation Redis lost): it may try again; refusing it would strand
            # the gang, as a valid cycle does not end by itself.
            return rec.valid
        stmt.add(TriedInCycle(key, pod, rec.cycle))
        if not rec.valid:
            self._maybe_advance_cycle(key, stmt)
            return False
        return True

    def mark_tried(self, key: str, pod: str, stmt: GangStatement) -> None:
        rec = stmt.record(key)
        if rec.rounds.get(pod, 0) < rec.cycle:
            stmt.add(TriedInCycle(key, pod, rec.cycle))

    def invalidate_cycle(self, key: str, stmt: GangStatement) -> None:
        stmt.add(CycleInvalidated(key))
        self._maybe_advance_cycle(key, stmt)

    def _maybe_advance_cycle(self, key: str, stmt: GangStatement) -> None:
        """The cycle ends when every pod that can still be tried has been tried in it: total-number pods (or
        every pod seen so far) less those bound. A bound pod never comes back to be tried, so counting it
        would keep the cycle open, and the gang turned away, for good: a gang below its minimum after losing a
        pod (its others still bound) whose recreated pod failed once was never tried again."""
        rec = stmt.record(key)
        spec = self.specs.get(key)
        seen = [pod for pod in rec.rounds if pod not in rec.bound]
        tried = sum(1 for pod in seen if rec.rounds[pod] >= rec.cycle)
        total = spec.total_number - len(rec.bound) if spec is not None else 0
        if tried >= total or tried >= len(seen):
            stmt.add(CycleAdvanced(key, rec.cycle + 1))

    # -- accumulation ----------------------------------------------------------------------------
    def assumed(self, key: str, pods: list[str], now: float, stmt: GangStatement, trace: str) -> None:
        self.start_wait(key, now, stmt, trace)  # first: it reads what the gang held before these pods
        stmt.add(PodsAssumed(key, tuple(pods)))

    def start_wait(self, key: str, now: float, stmt: GangStatement, trace: str) -> None:
        """A pod of the gang reached the wait stage: start the gang's timer if it is not running."""
        rec = stmt.record(key)
        if rec.first_wait is None or self._new_batch(key, stmt):
            # The wait is counted from the first pod reaching the wait stage, and survives Strict rollbacks.
            stmt.add(WaitStarted(key, now, now + self.wait_seconds(key), rec.trace or trace))

    def _new_batch(self, key: str, stmt: GangStatement) -> bool:
        """A gang that is never satisfied for good (only-waiting, waiting-and-running) and has bound before
        starts a new wait when pods reach the wait stage while it holds none waiting: its bind cleared the
        timer of the batch before, and a new batch must not hold its reservations for ever. (Past the first
        batch, a Strict rollback thus gives the next attempt a fresh wait: no hold lasts longer than one.)"""
        rec = stmt.record(key)
        return not once_satisfied(self.specs.get(key)) and rec.satisfied_at is not None and not rec.assumed

    def released(self, key: str, pods: list[str], stmt: GangStatement) -> None:
        stmt.add(PodsReleased(key, tuple(pods)))

    # -- the satisfied marker follows the pods ---------------------------------------------------
    def pods_gone(self, key: str, pods: Sequence[str], succeeded: int, stmt: GangStatement) -> None:
        """Pods of the gang released for good (finished, deleted, evicted, preempted, their node lost);
        `succeeded` of them finished successfully. A satisfied gang left below its minimum is satisfied no
        longer (`settle`)."""
        stmt.add(PodsReleased(key, tuple(pods)))
        if succeeded:
            stmt.add(PodsSucceeded(key, succeeded))
        self.settle(key, stmt)

    def settle(self, key: str, stmt: GangStatement) -> bool:
        """A gang marked satisfied whose pods are below its minimum loses the mark; whether it did."""
        rec = stmt.record(key)
        if rec.satisfied_at is None or not self.below_minimum(key, rec):
            return False
        # Pods still waiting (a batch being bound, a later batch of a policy never satisfied for good) keep
        # their wait; otherwise the next attempt starts afresh, its wait from its first pod placed.
        stmt.add(SatisfactionLost(key, rec.cycle + 1, fresh=not rec.assumed))
        return True

    def below_minimum(self, key: str, rec: GangRecord) -> bool:
        """Whether the pods holding or having held the gang's place fall short of its minimum: bound (and
        not finished), finished successfully, or reserved (placed, being bound). Role minimums are not asked:
        a role whose pods finish first (a launcher, a master) must not re-gate a job that is ending. False for
        a gang not declared (or invalid): there is no minimum to compare with."""
        spec = self.specs.get(key)
        if spec is None or spec.invalid:
            return False
        return len(rec.bound) + len(rec.assumed) + rec.succeeded < spec.min_available

    def satisfied_below_minimum(self) -> list[str]:
        """Gangs marked satisfied whose pods fall short of their minimum (what a restart checks)."""
        return sorted(
            k for k, rec in self.records.items() if rec.satisfied_at is not None and self.below_minimum(k, rec)
        )

    def timed_out(self, key: str, stmt: GangStatement, retry_at: float | None = None) -> None:
        """The gang's wait ran out; `retry_at`: it is tried again from then (None: never)."""
        stmt.add(TimedOut(key, retry_at))

    def lift_timeout(self, key: str, stmt: GangStatement) -> None:
        """A retrying gang's backoff ended: it starts over, with a fresh wait and Strict cycle."""
        stmt.add(TimeoutLifted(key, stmt.record(key).cycle + 1))

    def retry_at(self, key: str) -> float | None:
        """When a timed-out gang is tried again; None when it is not timed out or never will be."""
        rec = self.records.get(key)
        return rec.retry_at if rec is not None and rec.timed_out else None

    def placed_count(self, key: str) -> int:
        """The gang's pods that count toward its minimum by its match policy: the waiting ones, and the bound
        ones unless it is only-waiting (pods found bound on a restart count as bound ones), and for a
        once-satisfied gang the ones that finished successfully."""
        rec = self.records.get(key)
        if rec is None:
            return 0
        if self._only_waiting(key):
            return len(rec.assumed)
        # Pods that finished successfully count for a once-satisfied gang: a gang re-gated after losing pods
        # is whole again with its recreated ones, though some of its pods are done.
        done = rec.succeeded if once_satisfied(self.specs.get(key)) else 0
        return len(rec.assumed) + len(rec.bound) + done

    def _only_waiting(self, key: str) -> bool:
        spec = self.specs.get(key)
        return spec is not None and spec.match_policy == ONLY_WAITING

    def _counted(self, key: str) -> Iterable[str]:
        rec = self.records.get(key)
        if rec is None:
            return ()
        return rec.assumed if self._only_waiting(key) else (*rec.assumed, *rec.bound)

    def role_counts(self, key: str) -> Counter[str]:
        """Role -> how many of the gang's pods that count toward its minimum have it."""
        rec = self.records.get(key)
        return roles.role_counts(self._counted(key), rec.roles) if rec is not None else Counter()

    def reached_minimum(self, key: str, placing: Sequence[PodInfo] = ()) -> bool:
        """Whether the gang has its minimum: min_available pods that count by its match policy, and each
        role's minimum among them. `placing`: pods of an attempt not recorded yet, counted as waiting (the
        scheduler asks whether a Strict failure still costs the gang anything)."""
        spec = self.specs.get(key)
        if spec is None or spec.invalid:
            return False
        if self.status(key) == GangStatus.SATISFIED:
            return True
        if self.placed_count(key) + len(placing) < spec.min_available:
            return False
        minimums = roles.role_minimums(spec)
        if not minimums:
            return True
        have = self.role_counts(key) + Counter(role for p in placing if (role := roles.pod_role(p)))
        return not roles.missing(minimums, have)

    def required_first(self, key: str, unit: list[T], pod_of: Callable[[T], PodInfo]) -> list[T]:
        """`unit` (a gang's pods about to be tried) with the pods its role minimums still lack first
        (`phalanx.gang.roles.required_first`); the pods' roles are noted in the gang's record, for counting
        once they are placed. Noted at once, outside any statement: a role is a fact about a pod, and only
        the roles of the gang's reserved and bound pods are ever read."""
        spec = self.specs.get(key)
        if spec is None or not spec.min_task_member:
            return unit
        rec = self.record(key)
        for item in unit:
            pod = pod_of(item)
            if role := roles.pod_role(pod):
                rec.roles[pod.key] = role
        return roles.required_first(spec, unit, lambda item: roles.pod_role(pod_of(item)), self.role_counts(key))

    def group_of(self, key: str) -> tuple[str, ...]:
        spec = self.specs.get(key)
        return spec.group_keys if spec is not None else (key,)

    def group_ready(self, key: str) -> bool:
        """GangGroups bind only when every gang of the group has reached its minimum."""
        return all(self.reached_minimum(k) for k in self.group_of(key))

    def min_of(self, key: str) -> int | str:
        """The gang's min-available, "?" while it is not declared (for messages)."""
        spec = self.specs.get(key)
        return spec.min_available if spec is not None else "?"

    def describe(self, key: str) -> str:
        text = f"gang {key}: {self.placed_count(key)}/{self.min_of(key)} pods placed"
        spec = self.specs.get(key)
        minimums = roles.role_minimums(spec) if spec is not None else {}
        if minimums and self.status(key) != GangStatus.SATISFIED:
            have = self.role_counts(key)
            text += " (" + ", ".join(f"{role} {have[role]}/{count}" for role, count in minimums.items()) + ")"
        return text
