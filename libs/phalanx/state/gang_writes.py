"""How each gang operation (`phalanx.gang.ops`) is written to Redis: the one place that writes gang keys.

The commands go into a `Txn`, so they are applied by lua/txn.lua in the same transaction as the
reservations they belong to; key names come from `phalanx.state.keys`.
"""

from __future__ import annotations

from functools import singledispatch

from phalanx.gang.ops import (
    BoundPodsFound,
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
from phalanx.state.keys import REL_TIMERS, rel_gang, rel_gang_assumed, rel_gang_bound, rel_gang_rounds

Command = list[str]  # [op, key relative to the base, args...]


@singledispatch
def commands(op: GangOp) -> list[Command]:
    raise TypeError(f"no Redis form for gang operation {type(op).__name__}")


@commands.register
def _(op: TriedInCycle) -> list[Command]:
    return [["HSET", rel_gang_rounds(op.gang), op.pod, str(op.cycle)]]


@commands.register
def _(op: CycleInvalidated) -> list[Command]:
    return [["HSET", rel_gang(op.gang), "valid", "0"]]


@commands.register
def _(op: CycleAdvanced) -> list[Command]:
    return [["HSET", rel_gang(op.gang), "cycle", str(op.cycle), "valid", "1"]]


@commands.register
def _(op: PodsAssumed) -> list[Command]:
    return [["SADD", rel_gang_assumed(op.gang), *op.pods]] if op.pods else []


@commands.register
def _(op: PodsReleased) -> list[Command]:
    return []  # the release of the pods' reservations in the same Txn takes them out of the gang's sets


@commands.register
def _(op: WaitStarted) -> list[Command]:
    return [
        ["HSET", rel_gang(op.gang), "first_wait", str(op.at), "trace", op.trace],
        ["ZADD", REL_TIMERS, str(op.deadline), op.gang],
    ]


@commands.register
def _(op: TimedOut) -> list[Command]:
    return [
        ["HSET", rel_gang(op.gang), "timed_out", "1"],
        ["ZREM", REL_TIMERS, op.gang],
        ["DEL", rel_gang_assumed(op.gang)],
    ]


@commands.register
def _(op: PodsBound) -> list[Command]:
    if not op.pods:
        return []
    return [
        ["SREM", rel_gang_assumed(op.gang), *op.pods],
        ["SADD", rel_gang_bound(op.gang), *op.pods],
        ["HSETNX", rel_gang(op.gang), "satisfied_at", str(op.at)],
        ["ZREM", REL_TIMERS, op.gang],
    ]


@commands.register
def _(op: BoundPodsFound) -> list[Command]:
    return [["SADD", rel_gang_bound(op.gang), *op.pods]] if op.pods else []
