"""Reads of Phalanx's state in Redis, pipelined (every gang's record: a script per chunk of gangs) so that
loading all of it costs a handful of round trips.

Values are decoded by state/codec.py; key names come from state/keys.py. Nothing here writes.
"""

from __future__ import annotations

from importlib import resources
from typing import cast, overload

import redis

from phalanx.gang.record import GangRecord
from phalanx.model.objects import GangSpec, NodeInfo
from phalanx.state.codec import (
    gang_from_json,
    gang_record,
    node_from_json,
    pod_mark,
    pod_mark_and_requests,
    pod_record,
    role_in_record,
)
from phalanx.state.keys import FIELD_SEP, Keys
from phalanx.state.pod_state import PodMark, PodRecord, PodState

# The binder's roll-forward rounds per read of all of podstate (`pods_binding(full=True)`); at its default 2 s
# between rounds, once a minute. On 30,000 pods a whole read cost the binder ~10 ms and Redis ~10 ms, where
# the index costs 0.1 ms (bench/issue25-ab.txt, section 13).
FULL_SCAN_EVERY = 30

# A restarted scheduler reads every gang's record. Four commands a gang in a pipeline cost redis-py ~18 us each
# to pack and parse (0.74 s of CPU for 10,000 gangs); one script call per chunk returns them all, parsed by
# hiredis. Chunked: 250 gangs hold Redis ~4 ms a call, 1,000 held it 27.
_GANG_RECORDS_LUA = resources.files("phalanx.state").joinpath("lua/gang_records.lua").read_text()
GANG_RECORDS_CHUNK = 250


@overload
def decoded(reply: list[bytes | str]) -> list[str]: ...
@overload
def decoded(reply: dict[bytes | str, bytes | str]) -> dict[str, str]: ...
def decoded(reply: list[bytes | str] | dict[bytes | str, bytes | str]) -> list[str] | dict[str, str]:
    """A reply of a client made with decode_responses=True, as every Phalanx client is: its strings are
    str, which redis-py's annotations (bytes | str) cannot tell. Typing only; returns `reply` itself."""
    return cast("list[str] | dict[str, str]", reply)


class StateReads:
    """The read half of StateStore (state/store.py), which sets `redis` and `keys`."""

    redis: redis.Redis
    keys: Keys

    # -- nodes -----------------------------------------------------------------------------------
    def load_nodes(self) -> list[NodeInfo]:
        return [node_from_json(v) for v in self.redis.hgetall(self.keys.nodes).values()]

    def load_used(self) -> dict[tuple[str, str], int]:
        out: dict[tuple[str, str], int] = {}
        for f, v in decoded(self.redis.hgetall(self.keys.used)).items():
            node, res = f.split(FIELD_SEP, 1)
            out[(node, res)] = int(v)
        return out

    # -- pods ------------------------------------------------------------------------------------
    def _records_and_states(self) -> tuple[dict[str, str], dict[str, str]]:
        """All of `pods` and `podstate`, read at one moment."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.hgetall(self.keys.pods)
        pipe.hgetall(self.keys.podstate)
        records, states = pipe.execute()
        return records, states

    def load_pods(self) -> dict[str, PodRecord]:
        records, states = self._records_and_states()
        return {key: pod_record(key, raw, states.get(key)) for key, raw in records.items()}

    def load_pod_marks(self) -> dict[str, PodMark]:
        """Every reservation's node, pod uid and state (what reconciliation compares), without the pods."""
        records, states = self._records_and_states()
        return {key: pod_mark(raw, states.get(key)) for key, raw in records.items()}

    def marks_and_usage_drift(self) -> tuple[dict[str, PodMark], bool]:
        """load_pod_marks, and whether the per-node usage Redis keeps differs from the sum of the records'
        requests (what lua/repair_usage.lua would fix), both read at one moment (MULTI/EXEC). Summed here, on
        the caller's thread: the script decodes every record inside Redis, which answers no other client
        meanwhile (15-37 ms at 1,800 records, every client's writes waiting), to find in nearly every pass
        that nothing drifted."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.hgetall(self.keys.pods)
        pipe.hgetall(self.keys.podstate)
        pipe.hgetall(self.keys.used)
        records, states, used = pipe.execute()
        marks: dict[str, PodMark] = {}
        summed: dict[str, int] = {}
        for key, raw in records.items():
            mark, held = pod_mark_and_requests(raw, states.get(key))
            marks[key] = mark
            for res, amount in held.items():
                field = f"{mark.node}{FIELD_SEP}{res}"
                summed[field] = summed.get(field, 0) + amount
        kept = {f: int(v) for f, v in decoded(used).items() if int(v) != 0}  # the script leaves a 0 it finds
        return marks, kept != {f: n for f, n in summed.items() if n != 0}

    def pod_states(self) -> dict[str, PodState]:
        """Every reservation's state (assumed where podstate has none), without reading the records."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.hkeys(self.keys.pods)
        pipe.hgetall(self.keys.podstate)
        keys, states = pipe.execute()
        return {key: PodState(states.get(key) or PodState.ASSUMED) for key in keys}

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
                out[key] = pod_record(key, raw, state)
        return out

    def pods_in_state(self, state: PodState) -> dict[str, PodRecord]:
        """Every pod in `state`, read from all of podstate (30,000 entries on a cluster of 30,000 pods)."""
        keys = sorted(k for k, v in decoded(self.redis.hgetall(self.keys.podstate)).items() if v == state)
        return self.get_pods(keys)

    def pods_binding(self, full: bool = False) -> dict[str, PodRecord]:
        """The pods in state binding, by the index lua/txn.lua keeps (P:binding): as many entries as bindings
        in flight, where podstate has one for every pod reserved or bound. `full`: read all of podstate
        instead, which also finds an intent that a binder from before the index recorded (a rolling
        upgrade): the binder's roll-forward does so on its first round and every FULL_SCAN_EVERY-th."""
        if full:
            return self.pods_in_state(PodState.BINDING)
        keys = sorted(map(str, cast("set[str]", self.redis.smembers(self.keys.binding))))
        return {k: r for k, r in self.get_pods(keys).items() if r.state == PodState.BINDING}

    # -- gangs -----------------------------------------------------------------------------------
    def load_nominations(self) -> dict[str, str]:
        return decoded(self.redis.hgetall(self.keys.nominations))

    def load_gangs(self) -> dict[str, GangSpec]:
        return {k: gang_from_json(v) for k, v in decoded(self.redis.hgetall(self.keys.gangs)).items()}

    def load_gang_records(self, keys: list[str]) -> dict[str, GangRecord]:
        read, k = self.redis.register_script(_GANG_RECORDS_LUA), self.keys
        out: dict[str, GangRecord] = {}
        for i in range(0, len(keys), GANG_RECORDS_CHUNK):
            chunk = keys[i : i + GANG_RECORDS_CHUNK]
            names = [n for g in chunk for n in (k.gang(g), k.gang_assumed(g), k.gang_bound(g), k.gang_rounds(g))]
            for key, (h, assumed, bound, rounds) in zip(chunk, read(keys=names)):
                out[key] = gang_record(key, _pairs(h), set(assumed), set(bound), _pairs(rounds))
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

    # -- timers ----------------------------------------------------------------------------------
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


def _pairs(flat: list[str]) -> dict[str, str]:
    """A hash as HGETALL inside a script returns it: field, value, field, value..."""
    return dict(zip(flat[::2], flat[1::2]))
