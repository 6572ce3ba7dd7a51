"""One optimistic transaction over Phalanx's state, as lua/txn.lua applies it: checks, then writes.

A `Txn` is built by the scheduler and the binder from typed parts (reservations, releases, pod states, gang
operations); the raw Redis commands it carries are made here and in `gang_writes`, never by its callers.
`script_call` turns it into the script's real KEYS (every key it may touch, each named by
`phalanx.state.keys`) and its ARGV, so a Redis Cluster client can route it: all keys share one hash tag.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from phalanx import fast_json
from phalanx.gang.ops import GangOp, PodsBound
from phalanx.state import gang_writes
from phalanx.state.keys import REL_SIM_BINDS, Keys, rel_gang_assumed, rel_gang_bound
from phalanx.state.pod_state import PodState


@dataclass
class Txn:
    fence: int | None = None
    lock: list[Any] | None = None  # [token, lease_ms]: hold the bind mutex for the script's length
    expect: list[list[str]] = field(default_factory=list)  # [pod, state | "absent", node | ""]
    release: list[str] = field(default_factory=list)
    # The gang of each released pod, when the caller knows it (StateStore looks up the others): the
    # script takes the pod out of that gang's sets, and refuses if the record names another gang.
    release_gangs: dict[str, str] = field(default_factory=dict)
    reserve: list[list[Any]] = field(default_factory=list)
    facts: list[list[Any]] = field(default_factory=list)  # bound pods: recorded without a capacity check
    set_state: list[list[str]] = field(default_factory=list)
    gang_ops: list[GangOp] = field(default_factory=list)
    sim_binds: list[str] = field(default_factory=list)  # JSON bind records of the simulated cluster
    cmds: list[list[Any]] = field(default_factory=list)  # [op, key relative to the base, args...]: state/ only

    def cmd(self, op: str, suffix: str, *args: Any) -> "Txn":
        """A raw command on a key under the base (for `phalanx.state` itself and its tests)."""
        self.cmds.append([op, suffix, *[str(a) for a in args]])
        return self

    def release_pod(self, pod: str, gang: str) -> None:
        self.release.append(pod)
        self.release_gangs[pod] = gang

    def empty(self) -> bool:
        return not (
            self.expect
            or self.release
            or self.reserve
            or self.facts
            or self.set_state
            or self.cmds
            or self.gang_ops
            or self.sim_binds
        )

    def all_cmds(self) -> list[list[Any]]:
        out = list(self.cmds)
        for op in self.gang_ops:
            out += gang_writes.commands(op)
        out += [["RPUSH", REL_SIM_BINDS, record] for record in self.sim_binds]
        return out

    def script_call(self, keys: Keys, term: int | None) -> tuple[list[str], list[bytes]]:
        """(KEYS, ARGV) for lua/txn.lua. `release_gangs` must name the gang of every released pod ("" for none)."""
        declared = list(keys.script_fixed)
        index: dict[str, int] = {}

        def key_index(name: str) -> int:
            i = index.get(name)
            if i is None:
                declared.append(name)
                i = index[name] = len(declared)
            return i

        body: dict[str, Any] = {}
        for name in ("expect", "reserve", "facts", "set_state"):
            value = getattr(self, name)
            if value:
                body[name] = value
        if self.release:
            body["release"] = [
                [pod, gang, key_index(keys.full(rel_gang_assumed(gang))), key_index(keys.full(rel_gang_bound(gang)))]
                if (gang := self.release_gangs[pod])
                else [pod, "", 0, 0]
                for pod in self.release
            ]
        cmds = [[op, key_index(keys.full(suffix)), *args] for op, suffix, *args in self.all_cmds()]
        if cmds:
            body["cmds"] = cmds
        if term is not None:
            body["term"] = term
        if self.fence is not None:
            body["fence"] = self.fence
        if self.lock is not None:
            body["lock"] = self.lock
        return declared, [fast_json.dumps_bytes(body)]


def record_bound(txn: Txn, keys_by_gang: dict[str, list[str]], now: float) -> None:
    """The writes that record pods as bound: their state, their gangs' pod sets, the gang satisfied (its
    first bind) and its wait timer cleared. The binder's commit and the scheduler's confirmation of a
    binding it learnt from the API server both use this, so the two cannot disagree."""
    for keys in keys_by_gang.values():
        txn.set_state.extend([k, PodState.BOUND] for k in keys)
    txn.gang_ops.extend(bound_ops(keys_by_gang, now))


def bound_ops(keys_by_gang: dict[str, list[str]], now: float) -> Iterable[PodsBound]:
    """The gang operations of `record_bound` (what memory applies once the binder's commit succeeded)."""
    return [PodsBound(gang, tuple(keys), now) for gang, keys in keys_by_gang.items() if gang and keys]
