"""How each gang operation (`phalanx.gang.ops`) is written to Redis: the one place that writes gang keys.

The commands go into a `Txn`, so they are applied by lua/txn.lua in the same transaction as the
reservations they belong to; key names come from `phalanx.state.keys`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from phalanx.gang.ops import (
    BoundPodsFound,
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
from phalanx.state.keys import REL_TIMERS, rel_gang, rel_gang_assumed, rel_gang_bound, rel_gang_rounds

Command = list[str]  # [op, key relative to the base, args...]


def _tried_in_cycle(op: TriedInCycle) -> list[Command]:
    return [["HSET", rel_gang_rounds(op.gang), op.pod, str(op.cycle)]]


def _cycle_invalidated(op: CycleInvalidated) -> list[Command]:
    return [["HSET", rel_gang(op.gang), "valid", "0"]]


def _cycle_advanced(op: CycleAdvanced) -> list[Command]:
    return [["HSET", rel_gang(op.gang), "cycle", str(op.cycle), "valid", "1"]]


def _pods_assumed(op: PodsAssumed) -> list[Command]:
    return [["SADD", rel_gang_assumed(op.gang), *op.pods]] if op.pods else []


def _pods_released(op: PodsReleased) -> list[Command]:
    return []  # the release of the pods' reservations in the same Txn takes them out of the gang's sets


def _wait_started(op: WaitStarted) -> list[Command]:
    return [
        ["HSET", rel_gang(op.gang), "first_wait", str(op.at), "trace", op.trace],
        ["ZADD", REL_TIMERS, str(op.deadline), op.gang],
    ]


def _timed_out(op: TimedOut) -> list[Command]:
    if op.retry_at is None:  # final: no timer
        timer, record = ["ZREM", REL_TIMERS, op.gang], ["HDEL", rel_gang(op.gang), "retry_at"]
    else:  # the timer now fires when the backoff ends (a restarted scheduler finds it there)
        timer, record = (
            ["ZADD", REL_TIMERS, str(op.retry_at), op.gang],
            ["HSET", rel_gang(op.gang), "retry_at", str(op.retry_at)],
        )
    return [
        ["HSET", rel_gang(op.gang), "timed_out", "1"],
        ["HINCRBY", rel_gang(op.gang), "timeouts", "1"],
        record,
        timer,
        ["DEL", rel_gang_assumed(op.gang)],
    ]


def _timeout_lifted(op: TimeoutLifted) -> list[Command]:
    return [
        ["HSET", rel_gang(op.gang), "timed_out", "0", "cycle", str(op.cycle), "valid", "1"],
        ["HDEL", rel_gang(op.gang), "retry_at", "first_wait"],
        ["ZREM", REL_TIMERS, op.gang],
    ]


def _pods_bound(op: PodsBound) -> list[Command]:
    if not op.pods:
        return []
    return [
        ["SREM", rel_gang_assumed(op.gang), *op.pods],
        ["SADD", rel_gang_bound(op.gang), *op.pods],
        ["HSETNX", rel_gang(op.gang), "satisfied_at", str(op.at)],
        ["ZREM", REL_TIMERS, op.gang],
    ]


def _bound_pods_found(op: BoundPodsFound) -> list[Command]:
    return [["SADD", rel_gang_bound(op.gang), *op.pods]] if op.pods else []


def _pods_succeeded(op: PodsSucceeded) -> list[Command]:
    return [["HINCRBY", rel_gang(op.gang), "succeeded", str(op.count)]] if op.count else []


def _satisfaction_lost(op: SatisfactionLost) -> list[Command]:
    # In the transaction that releases the pods whose loss it follows: no restart sees one without the other.
    out = [["HDEL", rel_gang(op.gang), "satisfied_at"]]
    if op.fresh:
        out += [
            ["HDEL", rel_gang(op.gang), "first_wait"],
            ["HSET", rel_gang(op.gang), "cycle", str(op.cycle), "valid", "1"],
            ["ZREM", REL_TIMERS, op.gang],
        ]
    return out


# One writer per operation type (a dict lookup: this runs for every gang operation of every commit).
_WRITERS: dict[type[GangOp], Callable[[Any], list[Command]]] = {
    TriedInCycle: _tried_in_cycle,
    CycleInvalidated: _cycle_invalidated,
    CycleAdvanced: _cycle_advanced,
    PodsAssumed: _pods_assumed,
    PodsReleased: _pods_released,
    WaitStarted: _wait_started,
    TimedOut: _timed_out,
    TimeoutLifted: _timeout_lifted,
    PodsBound: _pods_bound,
    BoundPodsFound: _bound_pods_found,
    PodsSucceeded: _pods_succeeded,
    SatisfactionLost: _satisfaction_lost,
}


def commands(op: GangOp) -> list[Command]:
    writer = _WRITERS.get(type(op))
    if writer is None:
        raise TypeError(f"no Redis form for gang operation {type(op).__name__}")
    return writer(op)
