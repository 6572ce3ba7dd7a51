"""Gang bookkeeping: declarations, accumulation, Strict cycles, GangGroups, timers, once-satisfied.

The manager holds the scheduler's copy of every gang's runtime record and knows no storage. A scheduling
attempt decides through a `GangStatement` (its changes as operations, `phalanx.gang.ops`); the scheduler
commits them to Redis with the attempt's reservations and then calls `commit`, so memory changes only
after Redis accepted the change, and a conflict leaves nothing to restore.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

from phalanx.gang.ops import (
    CycleAdvanced,
    CycleInvalidated,
    GangOp,
    PodsAssumed,
    PodsBound,
    PodsReleased,
    TimedOut,
    TriedInCycle,
    WaitStarted,
)
from phalanx.gang.record import GangRecord
from phalanx.gang.statement import GangStatement
from phalanx.model.objects import GangMode, GangSpec


class GangStatus(str, Enum):
    NO_GANG = "no-gang"
    UNDECLARED = "undeclared"  # its PodGroup/ConfigMap does not exist yet
    INVALID = "invalid"
    TIMED_OUT = "timed-out"
    SATISFIED = "satisfied"  # once-satisfied: further pods schedule as ordinary pods
    ACCUMULATING = "accumulating"


class GangManager:
    def __init__(self, default_wait_seconds: float) -> None:
        self.default_wait_seconds = default_wait_seconds
        self.specs: dict[str, GangSpec] = {}
        self.records: dict[str, GangRecord] = {}
        self.timers_changed = False  # a gang's timer was set or cleared since the flag was last reset

    # -- declarations ----------------------------------------------------------------------------
    def upsert(self, spec: GangSpec) -> None:
        self.specs[spec.key] = spec

    def remove(self, key: str) -> None:
        self.specs.pop(key, None)

    def forget(self, key: str) -> None:
        self.specs.pop(key, None)
        self.records.pop(key, None)
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
        if rec is not None and rec.satisfied_at is not None:
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
        """The cycle ends when total-number pods (or every pod seen so far) have been tried in it."""
        rec = stmt.record(key)
        spec = self.specs.get(key)
        tried = sum(1 for r in rec.rounds.values() if r >= rec.cycle)
        total = spec.total_number if spec is not None else 0
        if tried >= total or tried >= len(rec.rounds):
            stmt.add(CycleAdvanced(key, rec.cycle + 1))

    # -- accumulation ----------------------------------------------------------------------------
    def assumed(self, key: str, pods: list[str], now: float, stmt: GangStatement, trace: str) -> None:
        stmt.add(PodsAssumed(key, tuple(pods)))
        self.start_wait(key, now, stmt, trace)

    def start_wait(self, key: str, now: float, stmt: GangStatement, trace: str) -> None:
        """A pod of the gang reached the wait stage: start the gang's timer if it is not running."""
        rec = stmt.record(key)
        if rec.first_wait is None:
            # The wait is counted from the first pod reaching the wait stage, and survives Strict rollbacks.
            stmt.add(WaitStarted(key, now, now + self.wait_seconds(key), rec.trace or trace))

    def released(self, key: str, pods: list[str], stmt: GangStatement) -> None:
        stmt.add(PodsReleased(key, tuple(pods)))

    def timed_out(self, key: str, stmt: GangStatement) -> None:
        stmt.add(TimedOut(key))

    def placed_count(self, key: str) -> int:
        rec = self.records.get(key)
        return 0 if rec is None else len(rec.assumed) + len(rec.bound)

    def reached_minimum(self, key: str) -> bool:
        spec = self.specs.get(key)
        if spec is None or spec.invalid:
            return False
        return self.status(key) == GangStatus.SATISFIED or self.placed_count(key) >= spec.min_available

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
        return f"gang {key}: {self.placed_count(key)}/{self.min_of(key)} pods placed"
