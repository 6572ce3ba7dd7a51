"""Phalanx's state in Redis: nodes, reservations, gang accumulation and timers.

Every change that must be atomic goes through one Lua script (lua/txn.lua) that checks, then applies, a
`Txn` (state/txn.py); a failed check writes nothing. This package is the only writer of Phalanx's keys:
gang keys through typed operations (state/gang_writes.py), every key name from state/keys.py. Reads are pipelined so that loading the whole state costs a handful
of round trips.

Fencing (scheduler replicas under leader election, libs/phalanx/cluster/leader.py): a store given a
`term` sends it with every write, and Redis refuses any write whose term is older than the newest leader's
(FencedOut), so a deposed leader cannot commit anything, whatever it still believes. Without a term
(the simulator, the binder, a scheduler without election) nothing is checked.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from dataclasses import fields as dataclass_fields
from importlib import resources
from typing import Any, cast, overload

import redis

from phalanx.gang.ops import GangOp
from phalanx.gang.record import GangRecord
from phalanx.gang.roles import role_in
from phalanx.metrics.catalog import CONFLICT_REASONS, TXN_CONFLICTS
from phalanx.model.binding import Assignment
from phalanx.model.objects import (
    GangMode,
    GangSpec,
    NodeInfo,
    Placement,
    PodInfo,
    SelectorRequirement,
    SelectorTerm,
    Taint,
    Toleration,
)
from phalanx.model.pod_affinity import affinity_from_plain, affinity_to_plain
from phalanx.state.keys import FIELD_SEP, REL_TIMERS, Keys, node_field
from phalanx.state.pod_state import PodState
from phalanx.state.txn import Txn

log = logging.getLogger(__name__)

_TXN_LUA = resources.files("phalanx.state").joinpath("lua/txn.lua").read_text()
_REPAIR_USAGE_LUA = resources.files("phalanx.state").joinpath("lua/repair_usage.lua").read_text()
# A new leader's claim of its fencing term: KEYS[1] P:leader:term, ARGV[1] the term. Compare-and-raise:
# written only if higher than the term there. Returns {1, term} when raised, else {0, the term there}.
_CLAIM_TERM_LUA = """
local current = tonumber(redis.call('GET', KEYS[1]) or '-1')
local term = tonumber(ARGV[1])
if term > current then
  redis.call('SET', KEYS[1], ARGV[1])
  return {1, term}
end
return {0, current}
"""


@dataclass
class PodRecord:
    key: str
    node: str
    gang: str
    requests: dict[str, int]
    pod: PodInfo
    state: PodState

    def assignment(self) -> Assignment:
        """The binder's assignment for this reservation: bind this pod (this incarnation of it) here."""
        return Assignment(self.key, self.pod.uid, self.node, self.gang)


# phalanx_redis_txn_conflicts_total, by the kind of check that refused (the third field of lua/txn.lua's reply).
_CONFLICTS = {reason: TXN_CONFLICTS.labels(reason) for reason in CONFLICT_REASONS}


class TxnConflict(Exception):
    pass


class FencedOut(Exception):
    """A write of a scheduler replica that is no longer the leader: its fencing term is older than the one
    in Redis (a newer leader claimed its own), or it stepped down. Nothing of the write was applied; the
    replica must stop scheduling (it steps down and exits)."""


def _requirement_to_json(r: SelectorRequirement) -> dict[str, Any]:
    return {"key": r.key, "operator": r.operator, "values": tuple(r.values)}


def _fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclass_fields(cls))


# pod_to_json below writes these fields by hand (asdict costs ~0.2 ms a pod, once per reservation); if
# any of these classes gains a field, it falls back to asdict so nothing is ever left out.
_HAND_WRITTEN = (
    _fields(PodInfo)
    == (
        "namespace",
        "name",
        "uid",
        "priority",
        "created_at",
        "requests",
        "placement",
        "gang",
        "gang_created_at",
        "node_name",
        "annotations",
        "labels",
        "duration",
        "invalid",
        "pod_affinity",
        "preemption_policy",
        "scheduling_group",
    )
    and _fields(Placement) == ("node_selector", "affinity_terms", "tolerations")
    and _fields(SelectorTerm) == ("match_expressions", "match_fields")
    and _fields(SelectorRequirement) == ("key", "operator", "values")
    and _fields(Toleration) == ("key", "operator", "value", "effect")
)


def pod_to_json(pod: PodInfo) -> dict[str, Any]:
    """`dataclasses.asdict(pod)` (same keys, order and values), written out for speed; except `pod_affinity`,
    written by phalanx.model.pod_affinity so that it can be read back into its classes."""
    if not _HAND_WRITTEN:
        return {**asdict(pod), "pod_affinity": affinity_to_plain(pod.pod_affinity)}
    p = pod.placement
    return {
        "namespace": pod.namespace,
        "name": pod.name,
        "uid": pod.uid,
        "priority": pod.priority,
        "created_at": pod.created_at,
        "requests": dict(pod.requests),
        "placement": {
            "node_selector": tuple(tuple(kv) for kv in p.node_selector),
            "affinity_terms": tuple(
                {
                    "match_expressions": tuple(_requirement_to_json(r) for r in t.match_expressions),
                    "match_fields": tuple(_requirement_to_json(r) for r in t.match_fields),
                }
                for t in p.affinity_terms
            ),
            "tolerations": tuple(
                {"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect} for t in p.tolerations
            ),
        },
        "gang": pod.gang,
        "gang_created_at": pod.gang_created_at,
        "node_name": pod.node_name,
        "annotations": dict(pod.annotations),
        "labels": dict(pod.labels),
        "duration": pod.duration,
        "invalid": pod.invalid,
        "pod_affinity": affinity_to_plain(pod.pod_affinity),
        "preemption_policy": pod.preemption_policy,
        "scheduling_group": pod.scheduling_group,
    }


def pod_from_json(data: dict[str, Any]) -> PodInfo:
    p = data["placement"]
    placement = Placement(
        node_selector=tuple(tuple(x) for x in p["node_selector"]),
        affinity_terms=tuple(
            SelectorTerm(
                tuple(SelectorRequirement(r["key"], r["operator"], tuple(r["values"])) for r in t["match_expressions"]),
                tuple(SelectorRequirement(r["key"], r["operator"], tuple(r["values"])) for r in t["match_fields"]),
            )
            for t in p["affinity_terms"]
        ),
        tolerations=tuple(Toleration(**t) for t in p["tolerations"]),
    )
    # Records written before pods carried affinity have no such field: None, as for a pod declaring none.
    affinity = affinity_from_plain(data.get("pod_affinity"))
    return PodInfo(**{**data, "placement": placement, "pod_affinity": affinity})


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


# Arguments per command a write sends through lua/txn.lua, whose `unpack` takes a few thousand at most.
_ARGS_PER_CMD = 1000


def _chunked(op: str, suffix: str, args: list[str], step: int = _ARGS_PER_CMD) -> list[list[Any]]:
    """[op, suffix, *args] split into commands of at most `step` arguments (`step` even: HSET pairs stay whole)."""
    return [[op, suffix, *args[i : i + step]] for i in range(0, len(args), step)]


def _opt_float(value: str | None) -> float | None:
    return None if value in (None, "") else float(value)


def role_in_record(raw: str) -> str:
    """The role (volcano.sh/task-spec) of the pod a reservation record (`reserve_entry`) holds, "" if none."""
    pod = json.loads(raw)["pod"]
    return role_in(pod.get("annotations") or {}, pod.get("labels") or {})


def _pod_record(key: str, raw: str, state: str | None) -> PodRecord:
    """A reservation as `reserve_entry` wrote it, in the state `podstate` holds (none yet: assumed)."""
    rec = json.loads(raw)
    return PodRecord(
        key, rec["node"], rec["gang"], rec["requests"], pod_from_json(rec["pod"]), PodState(state or PodState.ASSUMED)
    )


class StateStore:
    def __init__(self, client: redis.Redis, keys: Keys | None = None, term: int | None = None) -> None:
        """`term`: the fencing term every write carries (a scheduler elected leader); None: no fencing."""
        self.redis = client
        self.keys = keys or Keys()
        self.term = term
        # Called with the FencedOut error before it is raised, from whichever thread wrote (the scheduling
        # loop, the cluster feed): the replica steps down at once, whatever catches the error afterwards.
        self.on_fenced: Callable[[FencedOut], None] | None = None
        self._deposed = ""  # why this store refuses every write locally (see depose)
        self._txn = client.register_script(_TXN_LUA)
        self._repair_usage = client.register_script(_REPAIR_USAGE_LUA)
        self._claim_term = client.register_script(_CLAIM_TERM_LUA)

    @classmethod
    def from_url(cls, url: str, prefix: str = "phalanx") -> "StateStore":
        return cls(redis.Redis.from_url(url, decode_responses=True), Keys(prefix))

    # -- leadership fencing ----------------------------------------------------------------------
    def claim_term(self, term: int) -> tuple[bool, int]:
        """A new leader's claim: raises the term in Redis to `term` if that is higher than the one there.
        Returns (raised, the term in Redis now). Not raised: Redis has seen this term or a newer one."""
        raised, current = self._claim_term(keys=[self.keys.leader_term], args=[term])
        return bool(int(raised)), int(current)

    def leader_term(self) -> int | None:
        """The term in Redis (None: no leader has claimed one, or Redis lost it)."""
        raw = self.redis.get(self.keys.leader_term)
        return None if raw is None else int(raw)

    def depose(self, why: str) -> None:
        """This replica stepped down: every later write raises FencedOut without reaching Redis (Redis
        refuses them anyway once the next leader has claimed its term; this closes the gap until then)."""
        self._deposed = why or "stepped down"

    def _fenced(self, reason: str) -> FencedOut:
        exc = FencedOut(reason)
        if self.on_fenced is not None:
            try:
                self.on_fenced(exc)
            except Exception:  # the caller still gets the error
                log.exception("on_fenced failed")
        return exc

    @property
    def fenced(self) -> bool:
        """Whether writes are checked against the leader's term (or refused locally)."""
        return self.term is not None or bool(self._deposed)

    # -- transactions ----------------------------------------------------------------------------
    def apply(self, txn: Txn) -> tuple[bool, str]:
        ok, reason, _ = self.apply_fenced(txn)
        return ok, reason

    def apply_fenced(self, txn: Txn) -> tuple[bool, str, int]:
        """Like apply; also returns the fencing token a `txn.lock` took (0 without one). Raises FencedOut
        when this store's term is older than the leader's in Redis (nothing is written then)."""
        if txn.empty() and txn.fence is None and txn.lock is None:
            return True, "", 0
        if self._deposed:
            raise self._fenced(f"fenced out: this replica is not the leader ({self._deposed})")
        self._learn_release_gangs(txn)
        keys, args = txn.script_call(self.keys, self.term)
        result = self._txn(keys=keys, args=args)
        code = int(result[0])
        if code == 1:
            return True, "", int(result[1])
        if code == 2:
            raise self._fenced(str(result[1]))
        reason = str(result[1])
        _CONFLICTS[str(result[2])].inc()  # the script says which check refused (lua/txn.lua)
        return False, reason, 0

    def _learn_release_gangs(self, txn: Txn) -> None:
        """Fills in the gang of released pods the caller did not name (one read): the script must be
        handed the gang's keys. A record that changes meanwhile makes the script refuse, not misfile."""
        unknown = [k for k in txn.release if k not in txn.release_gangs]
        if not unknown:
            return
        for key, raw in zip(unknown, self.redis.hmget(self.keys.pods, unknown)):
            txn.release_gangs[key] = json.loads(raw).get("gang", "") if raw else ""

    def _write(self, cmds: list[list[Any]]) -> None:
        """Plain writes (`cmds` as in Txn.cmds: [op, key suffix under the base, args...]), atomically. With
        a term they go through lua/txn.lua and its fencing check; without, as one MULTI/EXEC pipeline."""
        if not cmds:
            return
        if self.fenced:
            self.must_apply(Txn(cmds=cmds))
            return
        pipe = self.redis.pipeline(transaction=True)
        for op, suffix, *args in cmds:
            pipe.execute_command(op, f"{self.keys.base}:{suffix}", *args)
        pipe.execute()

    def _rel(self, key: str) -> str:
        """A key of self.keys relative to the base (what Txn.cmds address)."""
        return key[len(self.keys.base) + 1 :]

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
            out[key] = _pod_record(key, raw, states.get(key))
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
                out[key] = _pod_record(key, raw, state)
        return out

    def pods_in_state(self, state: PodState) -> dict[str, PodRecord]:
        keys = sorted(k for k, v in decoded(self.redis.hgetall(self.keys.podstate)).items() if v == state)
        return self.get_pods(keys)

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

    def load_nominations(self) -> dict[str, str]:
        return decoded(self.redis.hgetall(self.keys.nominations))

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
            h, assumed, bound, rounds = raw[4 * i : 4 * i + 4]
            out[key] = GangRecord(
                key=key,
                cycle=int(h.get("cycle", 1)),
                valid=h.get("valid", "1") == "1",
                first_wait=_opt_float(h.get("first_wait")),
                satisfied_at=_opt_float(h.get("satisfied_at")),
                timed_out=h.get("timed_out") == "1",
                trace=h.get("trace", ""),
                assumed=set(assumed),
                bound=set(bound),
                rounds={p: int(r) for p, r in rounds.items()},
                succeeded=int(h.get("succeeded", 0)),
                retry_at=_opt_float(h.get("retry_at")),
                timeouts=int(h.get("timeouts", 0)),
            )
        self._load_roles(out)
        return out

    def _load_roles(self, records: dict[str, GangRecord]) -> None:
        """The roles of the reserved and bound pods of gangs with role minimums (Volcano minTaskMember), read
        from their pod records (each keeps the pod's annotations and labels): what the gang manager counts
        them by, rebuilt rather than stored twice. Two round trips, and none for a state without such gangs."""
        if not records:
            return
        specs = self.redis.hmget(self.keys.gangs, list(records))
        members: dict[str, list[str]] = {}
        for (key, rec), raw in zip(records.items(), specs):
            if raw and gang_from_json(raw).min_task_member and (rec.assumed or rec.bound):
                members[key] = sorted(rec.assumed | rec.bound)
        if not members:
            return
        pipe = self.redis.pipeline(transaction=False)
        for pods in members.values():
            pipe.hmget(self.keys.pods, pods)
        for (key, pods), raws in zip(members.items(), pipe.execute()):
            for pod, raw in zip(pods, raws):
                if raw and (role := role_in_record(raw)):
                    records[key].roles[pod] = role

    def gang_keys_with_state(self) -> list[str]:
        """Gangs that have any runtime state (declared or not)."""
        found: set[str] = set(decoded(self.redis.hkeys(self.keys.gangs)))
        marker = self.keys.base + ":gang:"
        for k in self.redis.scan_iter(match=marker + "*", count=1000):
            rest = k[len(marker) :]
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

    def repair_usage(self) -> int:
        """Recomputes every node's usage from the pod records, atomically, and fixes the fields that
        drifted; returns how many were wrong."""
        if self._deposed:
            raise self._fenced(f"fenced out: this replica is not the leader ({self._deposed})")
        term = "" if self.term is None else str(self.term)
        fixed = int(self._repair_usage(keys=[self.keys.pods, self.keys.used, self.keys.leader_term], args=[term]))
        if fixed < 0:
            raise self._fenced(
                f"fenced out: leadership term {term} is older than the current leader's {self.leader_term()}"
            )
        return fixed

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
