"""StateStore, the one API of Phalanx's state in Redis, and its writes of whole objects (nodes, gangs, nominations).

Its other parts, each in its own module: the write path, atomic and fenced by the leader's term
(state/fenced_writes.py, through lua/txn.lua and a `Txn` of state/txn.py); the pipelined reads
(state/reads.py); the storage form of every value (state/codec.py); key names (state/keys.py); gang keys
written through typed operations (state/gang_writes.py). This package is the only writer of Phalanx's keys.
What is left here: the writes of whole objects, the state's identity, and its wipe.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import redis

from phalanx.gang.ops import GangOp
from phalanx.model.objects import GangSpec, NodeInfo, PodInfo
from phalanx.state.codec import gang_to_json, node_from_json, node_to_json, reservation_record
from phalanx.state.fenced_writes import FencedOut, FencedWriter
from phalanx.state.keys import FIELD_SEP, REL_TIMERS, Keys, node_field
from phalanx.state.pod_state import PodRecord
from phalanx.state.reads import StateReads, decoded
from phalanx.state.txn import Txn

# Imported from here by the rest of Phalanx (the names are defined in the modules above).
__all__ = ["FencedOut", "PodRecord", "StateStore", "Txn", "decoded"]

# Arguments per command a write sends through lua/txn.lua, whose `unpack` takes a few thousand at most.
_ARGS_PER_CMD = 1000


def _chunked(op: str, suffix: str, args: list[str], step: int = _ARGS_PER_CMD) -> list[list[Any]]:
    """[op, suffix, *args] split into commands of at most `step` arguments (`step` even: HSET pairs stay whole)."""
    return [[op, suffix, *args[i : i + step]] for i in range(0, len(args), step)]


class StateStore(FencedWriter, StateReads):
    @classmethod
    def from_url(cls, url: str, prefix: str = "phalanx") -> "StateStore":
        return cls(redis.Redis.from_url(url, decode_responses=True), Keys(prefix))

    @staticmethod
    def reserve_entry(pod: PodInfo, node: str, requests: dict[str, int] | None = None) -> list[Any]:
        """`requests`: what the pod holds on that node, when placement added to its own requests
        (e.g. the GPU devices chosen for it)."""
        held = pod.requests if requests is None else requests
        return [pod.key, node, held, reservation_record(pod, node, held)]

    # -- nodes -----------------------------------------------------------------------------------
    def put_nodes(self, nodes: list[NodeInfo]) -> None:
        if not nodes:
            return
        existing = self.redis.hmget(self.keys.nodes, [n.name for n in nodes])
        k_nodes, k_cap = self._rel(self.keys.nodes), self._rel(self.keys.cap)
        cmds: list[list[Any]] = []
        for node, old in zip(nodes, existing):
            if old:  # drop capacity fields of resources the node no longer has
                stale = set(node_from_json(old).allocatable) - set(node.allocatable)
                if stale:
                    cmds.append(["HDEL", k_cap, *[node_field(node.name, r) for r in sorted(stale)]])
            cmds.append(["HSET", k_nodes, node.name, node_to_json(node)])
            if node.allocatable:
                cmds.append(
                    [
                        "HSET",
                        k_cap,
                        *[x for r, v in node.allocatable.items() for x in (node_field(node.name, r), str(v))],
                    ]
                )
        self._write(cmds)

    def remove_nodes(
        self, names: list[str], gang_ops: Callable[[list[PodRecord]], list[GangOp]] | None = None
    ) -> list[PodRecord]:
        """Deletes nodes; returns the pods that were reserved or bound on them (now released). `gang_ops`:
        the caller's gang operations for losing those pods, written in the same transaction."""
        if not names:
            return []
        gone = set(names)
        victims = [r for r in self.load_pods().values() if r.node in gone]
        cap_fields = [f for f in decoded(self.redis.hkeys(self.keys.cap)) if f.split(FIELD_SEP, 1)[0] in gone]
        used_fields = [f for f in decoded(self.redis.hkeys(self.keys.used)) if f.split(FIELD_SEP, 1)[0] in gone]
        # One transaction: the releases (which lower usage), then the nodes and their fields.
        txn = Txn()
        for r in victims:
            txn.release_pod(r.key, r.gang)
        if gang_ops is not None:
            txn.gang_ops = gang_ops(victims)
        for key, fields in ((self.keys.nodes, names), (self.keys.cap, cap_fields), (self.keys.used, used_fields)):
            txn.cmds += _chunked("HDEL", self._rel(key), list(fields))
        self.must_apply(txn)
        return victims

    # -- gangs -----------------------------------------------------------------------------------
    def put_gangs(self, gangs: list[GangSpec]) -> None:
        if gangs:
            self._write(
                _chunked("HSET", self._rel(self.keys.gangs), [x for g in gangs for x in (g.key, gang_to_json(g))])
            )

    def remove_gangs(self, keys: list[str]) -> None:
        if keys:
            self._write(_chunked("HDEL", self._rel(self.keys.gangs), list(keys)))

    def forget_gangs(self, keys: list[str]) -> None:
        """Deletes everything kept for these gangs: spec, record, pod sets and timer, in one transaction."""
        if not keys:
            return
        cmds = _chunked("HDEL", self._rel(self.keys.gangs), list(keys)) + _chunked("ZREM", REL_TIMERS, list(keys))
        cmds += [
            ["DEL", self._rel(name)]
            for k in keys
            for name in (
                self.keys.gang(k),
                self.keys.gang_assumed(k),
                self.keys.gang_bound(k),
                self.keys.gang_rounds(k),
            )
        ]
        self._write(cmds)

    # -- preemption nominations (phalanx.preemption.nomination) -------------------------------------
    def put_nomination(self, gang: str, raw: str) -> None:
        self._write([["HSET", self._rel(self.keys.nominations), gang, raw]])

    def drop_nominations(self, gangs: list[str]) -> None:
        if gangs:
            self._write(_chunked("HDEL", self._rel(self.keys.nominations), list(gangs)))

    # -- integrity -------------------------------------------------------------------------------
    def identity(self) -> tuple[str, str]:
        """(this Redis process's run id, the state's epoch). A new run id: Redis restarted (and may have
        lost its last writes); a new epoch: the state was emptied. The epoch is created if missing."""
        if self.fenced:  # the write (only when the epoch is missing) is fenced like any other
            self._write([["HSETNX", self._rel(self.keys.meta), "epoch", uuid.uuid4().hex]])
            epoch = self.redis.hget(self.keys.meta, "epoch")
        else:
            pipe = self.redis.pipeline(transaction=True)
            pipe.hsetnx(self.keys.meta, "epoch", uuid.uuid4().hex)
            pipe.hget(self.keys.meta, "epoch")
            _, epoch = pipe.execute()
        run_id = str(self.redis.info("server").get("run_id", ""))
        return run_id, str(epoch)

    # -- maintenance -----------------------------------------------------------------------------
    def wipe(self) -> int:
        """Deletes every key of this prefix (simulation start); returns how many."""
        count = 0
        batch: list[str] = []
        for k in self.redis.scan_iter(match=self.keys.pattern, count=1000):
            batch.append(k)
            if len(batch) >= 500:
                count += self.redis.delete(*batch)
                batch.clear()
        if batch:
            count += self.redis.delete(*batch)
        return count
