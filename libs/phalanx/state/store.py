"""Phalanx's state in Redis: nodes, reservations, gang accumulation and timers.

Every change that must be atomic goes through one Lua script (lua/txn.lua) that checks, then applies, a
`Txn`; a failed check writes nothing. Reads are pipelined so that loading the whole state costs a handful
of round trips.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass, field
from dataclasses import fields as dataclass_fields
from importlib import resources
from typing import Any, cast, overload

import redis

from phalanx.model.objects import GangMode, GangSpec, NodeInfo, PodInfo, Placement, SelectorRequirement, SelectorTerm, Taint, Toleration
from phalanx.state.keys import (FIELD_SEP, REL_TIMERS, Keys, node_field, rel_gang, rel_gang_assumed,
                                rel_gang_bound)

_TXN_LUA = resources.files("phalanx.state").joinpath("lua/txn.lua").read_text()
_REPAIR_USAGE_LUA = resources.files("phalanx.state").joinpath("lua/repair_usage.lua").read_text()


@dataclass
class Txn:
    """A transaction for lua/txn.lua; `cmds` address keys by their suffix under the key base."""

    fence: int | None = None
    lock: list[Any] | None = None  # [token, lease_ms]: hold the bind mutex for the script's length
    expect: list[list[str]] = field(default_factory=list)
    release: list[str] = field(default_factory=list)
    reserve: list[list[Any]] = field(default_factory=list)
    facts: list[list[Any]] = field(default_factory=list)  # bound pods: recorded without a capacity check
    set_state: list[list[str]] = field(default_factory=list)
    cmds: list[list[Any]] = field(default_factory=list)

    def cmd(self, op: str, suffix: str, *args: Any) -> "Txn":
        self.cmds.append([op, suffix, *[str(a) for a in args]])
        return self

    def payload(self) -> str:
        body: dict[str, Any] = {}
        for name in ("expect", "release", "reserve", "facts", "set_state", "cmds"):
            value = getattr(self, name)
            if value:
                body[name] = value
        if self.fence is not None:
            body["fence"] = self.fence
        if self.lock is not None:
            body["lock"] = self.lock
        return json.dumps(body, separators=(",", ":"))

    def empty(self) -> bool:
        return not (self.expect or self.release or self.reserve or self.facts or self.set_state or self.cmds)


@dataclass
class PodRecord:
    key: str
    node: str
    gang: str
    requests: dict[str, int]
    pod: PodInfo
    state: str  # assumed | binding | bound


@dataclass
class GangRecord:
    key: str
    cycle: int = 1
    valid: bool = True
    first_wait: float | None = None
    satisfied_at: float | None = None
    timed_out: bool = False
    failed_at: float | None = None
    trace: str = ""
    assumed: set[str] = field(default_factory=set)
    bound: set[str] = field(default_factory=set)
    rounds: dict[str, int] = field(default_factory=dict)


# A pod whose binding has started: the binder recorded the intent and may have written it to the API
# server. It is rolled forward (bound), never released while it exists.
BINDING_STATE = "binding"


def record_bound(txn: Txn, keys_by_gang: dict[str, list[str]], now: float) -> None:
    """The writes that record pods as bound: their state, their gangs' pod sets, the gang satisfied (its
    first bind) and its wait timer cleared. The binder's commit and the scheduler's confirmation of a
    binding it learnt from the API server both use this, so the two cannot disagree."""
    for keys in keys_by_gang.values():
        txn.set_state.extend([k, "bound"] for k in keys)
    for gang, keys in keys_by_gang.items():
        if not gang:
            continue
        txn.cmd("SREM", rel_gang_assumed(gang), *keys)
        txn.cmd("SADD", rel_gang_bound(gang), *keys)
        txn.cmd("HSETNX", rel_gang(gang), "satisfied_at", now)
        txn.cmd("ZREM", REL_TIMERS, gang)


class TxnConflict(Exception):
    pass


def _requirement_to_json(r: SelectorRequirement) -> dict[str, Any]:
    return {"key": r.key, "operator": r.operator, "values": tuple(r.values)}


def _fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclass_fields(cls))


# pod_to_json below writes these fields by hand (asdict costs ~0.2 ms a pod, once per reservation); if
# any of these classes gains a field, it falls back to asdict so nothing is ever left out.
_HAND_WRITTEN = (
    _fields(PodInfo) == ("namespace", "name", "uid", "priority", "created_at", "requests", "placement", "gang",
                         "gang_created_at", "node_name", "annotations", "labels", "duration", "invalid")
    and _fields(Placement) == ("node_selector", "affinity_terms", "tolerations")
    and _fields(SelectorTerm) == ("match_expressions", "match_fields")
    and _fields(SelectorRequirement) == ("key", "operator", "values")
    and _fields(Toleration) == ("key", "operator", "value", "effect")
)


def pod_to_json(pod: PodInfo) -> dict[str, Any]:
    """Exactly `dataclasses.asdict(pod)` (same keys, order and values), written out for speed."""
    if not _HAND_WRITTEN:
        return asdict(pod)
    p = pod.placement
    return {
        "namespace": pod.namespace, "name": pod.name, "uid": pod.uid, "priority": pod.priority,
        "created_at": pod.created_at, "requests": dict(pod.requests),
        "placement": {
            "node_selector": tuple(tuple(kv) for kv in p.node_selector),
            "affinity_terms": tuple(
                {"match_expressions": tuple(_requirement_to_json(r) for r in t.match_expressions),
                 "match_fields": tuple(_requirement_to_json(r) for r in t.match_fields)}
                for t in p.affinity_terms),
            "tolerations": tuple({"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect}
                                 for t in p.tolerations),
        },
        "gang": pod.gang, "gang_created_at": pod.gang_created_at, "node_name": pod.node_name,
        "annotations": dict(pod.annotations), "labels": dict(pod.labels), "duration": pod.duration,
        "invalid": pod.invalid,
    }


def pod_from_json(data: dict[str, Any]) -> PodInfo:
    p = data["placement"]
    placement = Placement(
        node_selector=tuple(tuple(x) for x in p["node_selector"]),  # type: ignore[misc]
        affinity_terms=tuple(
            SelectorTerm(
                tuple(SelectorRequirement(r["key"], r["operator"], tuple(r["values"])) for r in t["match_expressions"]),
                tuple(SelectorRequirement(r["key"], r["operator"], tuple(r["values"])) for r in t["match_fields"]),
            )
            for t in p["affinity_terms"]
        ),
        tolerations=tuple(Toleration(**t) for t in p["tolerations"]),
    )
    return PodInfo(**{**data, "placement": placement})


def gang_to_json(g: GangSpec) -> str:
    data = asdict(g)
    data["mode"] = g.mode.value
    return json.dumps(data, separators=(",", ":"))


def gang_from_json(raw: str | bytes) -> GangSpec:
    data = json.loads(raw)
    data["mode"] = GangMode(data["mode"])
    data["groups"] = tuple(data["groups"])
    return GangSpec(**data)


def node_to_json(n: NodeInfo) -> str:
    return json.dumps(asdict(n), separators=(",", ":"))


def node_from_json(raw: str | bytes) -> NodeInfo:
    data = json.loads(raw)
    data["taints"] = tuple(Taint(**t) for t in data["taints"])
    return NodeInfo(**data)


@overload
def decoded(reply: list[bytes | str]) -> list[str]: ...
@overload
def decoded(reply: dict[bytes | str, bytes | str]) -> dict[str, str]: ...
def decoded(reply: list[bytes | str] | dict[bytes | str, bytes | str]) -> list[str] | dict[str, str]:
    """A reply of a client made with decode_responses=True, as every Phalanx client is: its strings are
    str, which redis-py's annotations (bytes | str) cannot tell. Typing only; returns `reply` itself."""
    return cast("list[str] | dict[str, str]", reply)


def _opt_float(value: str | None) -> float | None:
    return None if value in (None, "") else float(value)


class StateStore:
    def __init__(self, client: redis.Redis, keys: Keys | None = None) -> None:
        self.redis = client
        self.keys = keys or Keys()
        self._txn = client.register_script(_TXN_LUA)
        self._repair_usage = client.register_script(_REPAIR_USAGE_LUA)

    @classmethod
    def from_url(cls, url: str, prefix: str = "phalanx") -> "StateStore":
        return cls(redis.Redis.from_url(url, decode_responses=True), Keys(prefix))

    # -- transactions ----------------------------------------------------------------------------
    def apply(self, txn: Txn) -> tuple[bool, str]:
        ok, reason, _ = self.apply_fenced(txn)
        return ok, reason

    def apply_fenced(self, txn: Txn) -> tuple[bool, str, int]:
        """Like apply; also returns the fencing token a `txn.lock` took (0 without one)."""
        if txn.empty() and txn.fence is None and txn.lock is None:
            return True, "", 0
        result = self._txn(keys=[], args=[self.keys.base, txn.payload()])
        if int(result[0]) == 1:
            return True, "", int(result[1])
        return False, str(result[1]), 0

    def must_apply(self, txn: Txn) -> None:
        ok, reason = self.apply(txn)
        if not ok:
            raise TxnConflict(reason)

    @staticmethod
    def reserve_entry(pod: PodInfo, node: str, requests: dict[str, int] | None = None) -> list[Any]:
        """`requests`: what the pod holds on that node, when placement added to its own requests
        (e.g. the GPU devices chosen for it)."""
        held = pod.requests if requests is None else requests
        record = {"node": node, "gang": pod.gang, "requests": held, "pod": pod_to_json(pod)}
        return [pod.key, node, held, json.dumps(record, separators=(",", ":"))]

    # -- nodes -----------------------------------------------------------------------------------
    def put_nodes(self, nodes: list[NodeInfo]) -> None:
        if not nodes:
            return
        existing = self.redis.hmget(self.keys.nodes, [n.name for n in nodes])
        pipe = self.redis.pipeline(transaction=True)
        for node, old in zip(nodes, existing):
            if old:  # drop capacity fields of resources the node no longer has
                stale = set(node_from_json(old).allocatable) - set(node.allocatable)
                if stale:
                    pipe.hdel(self.keys.cap, *[node_field(node.name, r) for r in stale])
            pipe.hset(self.keys.nodes, node.name, node_to_json(node))
            if node.allocatable:
                pipe.hset(self.keys.cap, mapping={node_field(node.name, r): v for r, v in node.allocatable.items()})
        pipe.execute()

    def remove_nodes(self, names: list[str]) -> list[PodRecord]:
        """Deletes nodes; returns the pods that were reserved or bound on them (now released)."""
        if not names:
            return []
        gone = set(names)
        victims = [r for r in self.load_pods().values() if r.node in gone]
        if victims:
            self.must_apply(Txn(release=[r.key for r in victims]))
        pipe = self.redis.pipeline(transaction=True)
        pipe.hdel(self.keys.nodes, *names)
        cap_fields = [f for f in decoded(self.redis.hkeys(self.keys.cap)) if f.split(FIELD_SEP, 1)[0] in gone]
        used_fields = [f for f in decoded(self.redis.hkeys(self.keys.used)) if f.split(FIELD_SEP, 1)[0] in gone]
        if cap_fields:
            pipe.hdel(self.keys.cap, *cap_fields)
        if used_fields:
            pipe.hdel(self.keys.used, *used_fields)
        pipe.execute()
        return victims

    def load_nodes(self) -> list[NodeInfo]:
        return [node_from_json(v) for v in self.redis.hgetall(self.keys.nodes).values()]

    def load_used(self) -> dict[tuple[str, str], int]:
        out: dict[tuple[str, str], int] = {}
        for f, v in decoded(self.redis.hgetall(self.keys.used)).items():
            node, res = f.split(FIELD_SEP, 1)
            out[(node, res)] = int(v)
        return out

    # -- pods ------------------------------------------------------------------------------------
    def load_pods(self) -> dict[str, PodRecord]:
        pipe = self.redis.pipeline(transaction=True)
        pipe.hgetall(self.keys.pods)
        pipe.hgetall(self.keys.podstate)
        records, states = pipe.execute()
        out: dict[str, PodRecord] = {}
        for key, raw in records.items():
            rec = json.loads(raw)
            out[key] = PodRecord(key, rec["node"], rec["gang"], rec["requests"], pod_from_json(rec["pod"]),
                                 states.get(key, "assumed"))
        return out

    def get_pods(self, keys: list[str]) -> dict[str, PodRecord]:
        if not keys:
            return {}
        pipe = self.redis.pipeline(transaction=True)
        pipe.hmget(self.keys.pods, keys)
        pipe.hmget(self.keys.podstate, keys)
        records, states = pipe.execute()
        out: dict[str, PodRecord] = {}
        for key, raw, state in zip(keys, records, states):
            if raw:
                rec = json.loads(raw)
                out[key] = PodRecord(key, rec["node"], rec["gang"], rec["requests"], pod_from_json(rec["pod"]),
                                     state or "assumed")
        return out

    def pods_in_state(self, state: str) -> dict[str, PodRecord]:
        keys = sorted(k for k, v in decoded(self.redis.hgetall(self.keys.podstate)).items() if v == state)
        return self.get_pods(keys)

    # -- gangs -----------------------------------------------------------------------------------
    def put_gangs(self, gangs: list[GangSpec]) -> None:
        if gangs:
            self.redis.hset(self.keys.gangs, mapping={g.key: gang_to_json(g) for g in gangs})

    def remove_gangs(self, keys: list[str]) -> None:
        if keys:
            self.redis.hdel(self.keys.gangs, *keys)

    def forget_gangs(self, keys: list[str]) -> None:
        """Deletes everything kept for these gangs: spec, record, pod sets and timer, in one transaction."""
        if not keys:
            return
        pipe = self.redis.pipeline(transaction=True)
        pipe.hdel(self.keys.gangs, *keys)
        pipe.zrem(self.keys.timers, *keys)
        pipe.delete(*(name for k in keys for name in (self.keys.gang(k), self.keys.gang_assumed(k),
                                                        self.keys.gang_bound(k), self.keys.gang_rounds(k))))
        pipe.execute()

    def load_gangs(self) -> dict[str, GangSpec]:
        return {k: gang_from_json(v) for k, v in decoded(self.redis.hgetall(self.keys.gangs)).items()}

    def load_gang_records(self, keys: list[str]) -> dict[str, GangRecord]:
        pipe = self.redis.pipeline(transaction=False)
        for key in keys:
            pipe.hgetall(self.keys.gang(key))
            pipe.smembers(self.keys.gang_assumed(key))
            pipe.smembers(self.keys.gang_bound(key))
            pipe.hgetall(self.keys.gang_rounds(key))
        raw = pipe.execute()
        out: dict[str, GangRecord] = {}
        for i, key in enumerate(keys):
            h, assumed, bound, rounds = raw[4 * i: 4 * i + 4]
            out[key] = GangRecord(
                key=key,
                cycle=int(h.get("cycle", 1)),
                valid=h.get("valid", "1") == "1",
                first_wait=_opt_float(h.get("first_wait")),
                satisfied_at=_opt_float(h.get("satisfied_at")),
                timed_out=h.get("timed_out") == "1",
                failed_at=_opt_float(h.get("failed_at")),
                trace=h.get("trace", ""),
                assumed=set(assumed),
                bound=set(bound),
                rounds={p: int(r) for p, r in rounds.items()},
            )
        return out

    def gang_keys_with_state(self) -> list[str]:
        """Gangs that have any runtime state (declared or not)."""
        found: set[str] = set(decoded(self.redis.hkeys(self.keys.gangs)))
        marker = self.keys.base + ":gang:"
        for k in self.redis.scan_iter(match=marker + "*", count=1000):
            rest = k[len(marker):]
            for suffix in (":assumed", ":bound", ":rounds"):
                if rest.endswith(suffix):
                    rest = rest[: -len(suffix)]
                    break
            found.add(rest)
        return sorted(found)

    def timers(self, now: float) -> tuple[list[str], float | None]:
        """(gangs whose wait has expired by `now`, the earliest deadline of all) in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrangebyscore(self.keys.timers, "-inf", now)
        pipe.zrange(self.keys.timers, 0, 0, withscores=True)
        due, first = pipe.execute()
        return list(due), (float(first[0][1]) if first else None)

    def next_timer(self) -> float | None:
        first = self.redis.zrange(self.keys.timers, 0, 0, withscores=True)
        return float(first[0][1]) if first else None

    # -- integrity -------------------------------------------------------------------------------
    def identity(self) -> tuple[str, str]:
        """(this Redis process's run id, the state's epoch). A new run id: Redis restarted (and may have
        lost its last writes); a new epoch: the state was emptied. The epoch is created if missing."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.hsetnx(self.keys.meta, "epoch", uuid.uuid4().hex)
        pipe.hget(self.keys.meta, "epoch")
        _, epoch = pipe.execute()
        run_id = str(self.redis.info("server").get("run_id", ""))
        return run_id, str(epoch)

    def repair_usage(self) -> int:
        """Recomputes every node's usage from the pod records, atomically, and fixes the fields that
        drifted; returns how many were wrong."""
        return int(self._repair_usage(keys=[self.keys.pods, self.keys.used]))

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
