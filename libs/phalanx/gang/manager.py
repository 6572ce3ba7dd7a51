"""Gang bookkeeping: declarations, accumulation, Strict cycles, GangGroups, timers, once-satisfied.

The manager holds the scheduler's copy of every gang's runtime record; each change it decides is also
written into the caller's `Txn`, so memory and Redis change together or not at all.
"""

from __future__ import annotations

from enum import Enum

from phalanx.model.objects import GangMode, GangSpec
from phalanx.state.keys import REL_TIMERS, rel_gang, rel_gang_assumed, rel_gang_rounds
from phalanx.state.store import GangRecord, Txn


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

    # -- Strict cycles ---------------------------------------------------------------------------
    def strict(self, key: str) -> bool:
        spec = self.specs.get(key)
        return spec is None or spec.mode == GangMode.STRICT

    def try_enter_cycle(self, key: str, pod: str, txn: Txn) -> bool:
        """Strict PreFilter: no pod is tried while the cycle is invalid (each is turned away once, then the
        cycle ends); in a valid cycle a pod is tried.

        A pod turned away by an invalid cycle still counts as tried in it: the cycle ends once every pod
        has been through it, and a pod that never counted would keep it invalid, and the gang rejected,
        for good (its pods reaching the scheduler apart, one failing first, was enough)."""
        rec = self.record(key)
        if rec.rounds.get(pod, 0) >= rec.cycle:
            # Tried in this cycle already. While the cycle is valid it comes back only because it lost its
            # place (a bind refused, a reservation Redis lost): it may try again; refusing it would strand
            # the gang, as a valid cycle does not end by itself.
            return rec.valid
        rec.rounds[pod] = rec.cycle
        txn.cmd("HSET", rel_gang_rounds(key), pod, rec.cycle)
        if not rec.valid:
            self.maybe_advance_cycle(key, txn)
            return False
        return True

    def mark_tried(self, key: str, pod: str, txn: Txn) -> None:
        rec = self.record(key)
        if rec.rounds.get(pod, 0) < rec.cycle:
            rec.rounds[pod] = rec.cycle
            txn.cmd("HSET", rel_gang_rounds(key), pod, rec.cycle)

    def invalidate_cycle(self, key: str, now: float, txn: Txn) -> None:
        rec = self.record(key)
        rec.valid = False
        rec.failed_at = now
        txn.cmd("HSET", rel_gang(key), "valid", 0, "failed_at", now)
        self.maybe_advance_cycle(key, txn)

    def maybe_advance_cycle(self, key: str, txn: Txn) -> None:
        """The cycle ends when total-number pods (or every pod seen so far) have been tried in it."""
        rec = self.record(key)
        spec = self.specs.get(key)
        tried = sum(1 for r in rec.rounds.values() if r >= rec.cycle)
        total = spec.total_number if spec is not None else 0
        if tried >= total or tried >= len(rec.rounds):
            rec.cycle += 1
            rec.valid = True
            txn.cmd("HSET", rel_gang(key), "cycle", rec.cycle, "valid", 1)

    # -- accumulation ----------------------------------------------------------------------------
    def assumed(self, key: str, pods: list[str], now: float, txn: Txn, trace: str) -> None:
        rec = self.record(key)
        rec.assumed.update(pods)
        txn.cmd("SADD", rel_gang_assumed(key), *pods)
        self.start_wait(key, now, txn, trace)

    def start_wait(self, key: str, now: float, txn: Txn, trace: str) -> None:
        """A pod of the gang reached the wait stage: start the gang's timer if it is not running."""
        rec = self.record(key)
        if rec.first_wait is None:
            # The wait is counted from the first pod reaching the wait stage, and survives Strict rollbacks.
            rec.first_wait = now
            rec.trace = rec.trace or trace
            deadline = now + self.wait_seconds(key)
            txn.cmd("HSET", rel_gang(key), "first_wait", now, "trace", rec.trace)
            txn.cmd("ZADD", REL_TIMERS, deadline, key)
            self.timers_changed = True

    def released(self, key: str, pods: list[str]) -> None:
        rec = self.record(key)
        rec.assumed.difference_update(pods)

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

    def bound(self, key: str, pods: list[str], now: float) -> None:
        rec = self.record(key)
        rec.assumed.difference_update(pods)
        rec.bound.update(pods)
        if rec.satisfied_at is None:
            rec.satisfied_at = now
            self.timers_changed = True  # the binder cleared its timer

    def timed_out(self, key: str, txn: Txn) -> None:
        rec = self.record(key)
        rec.timed_out = True
        rec.assumed.clear()
        txn.cmd("HSET", rel_gang(key), "timed_out", 1)
        txn.cmd("ZREM", REL_TIMERS, key)
        txn.cmd("DEL", rel_gang_assumed(key))
        self.timers_changed = True

    def describe(self, key: str) -> str:
        spec = self.specs.get(key)
        need = spec.min_available if spec is not None else "?"
        return f"gang {key}: {self.placed_count(key)}/{need} pods placed"
