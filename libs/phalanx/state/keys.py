"""Every Redis key Phalanx uses, built in one place.

All keys share one `{hash tag}` so that a Lua script touching several of them stays on one Redis Cluster
slot, and every script is handed the keys it touches as KEYS (lua/txn.lua through `Txn.script_call`).
Gang keys are written only through typed operations (`phalanx.gang.ops`, written by `state/gang_writes.py`). Layout (P = "{<prefix>}"):

| key                        | type | contents                                                              |
|----------------------------|------|-----------------------------------------------------------------------|
| P:nodes                    | hash | node name -> JSON NodeInfo                                            |
| P:cap                      | hash | "node\\x1fresource" -> allocatable milli-units                         |
| P:used                     | hash | "node\\x1fresource" -> milli-units held by assumed and bound pods      |
| P:pods                     | hash | "ns/name" -> JSON {node, gang, requests, pod}, written once at reserve |
| P:podstate                 | hash | "ns/name" -> assumed | binding | bound (binding: the intent to bind|
|                            |      | is recorded; it is rolled forward, never released)                    |
| P:binding                  | set  | the pods whose podstate is binding: an index lua/txn.lua keeps beside |
|                            |      | podstate, so the binder's periodic roll-forward reads it, not every  |
|                            |      | pod's state                                                          |
| P:gangs                    | hash | gang key -> JSON GangSpec                                             |
| P:gang:<key>               | hash | cycle, valid, first_wait, satisfied_at, timed_out, trace             |
|                            |      | retry_at (a timed-out gang of a retrying form: its backoff's end),   |
|                            |      | timeouts (how many times its wait ran out)                           |
|                            |      | succeeded (bound pods that finished successfully); satisfied_at is   |
|                            |      | cleared when its bound pods fall below its minimum                   |
| P:gang:<key>:assumed       | set  | pods reserved for the gang, not bound yet                            |
| P:gang:<key>:bound         | set  | pods of the gang bound                                               |
| P:gang:<key>:rounds        | hash | pod -> the Strict cycle it was last tried in                         |
| P:timers                   | zset | gang key -> virtual/wall time its wait expires (timed out and        |
|                            |      | retrying: when its backoff ends)                                     |
| P:meta                     | hash | epoch: a random id written when the state is first created; gone =   |
|                            |      | Redis was emptied, so the scheduler rebuilds it from the API server   |
| P:bind:lock                | str  | holder token of the binder mutex (with a lease)                      |
| P:bind:fence               | str  | fencing counter, incremented at every lock acquisition               |
| P:bind:durable             | str  | counter the binder increments just before Redis WAIT, so that WAIT   |
|                            |      | covers its bind intent (state/durability.py); its value means nothing |
| P:leader:term              | str  | the leading scheduler replica's fencing term (its Lease's             |
|                            |      | leaseTransitions when it took over): only raised, never lowered; a   |
|                            |      | scheduler commit carrying a lower term is refused (FencedOut)        |
| P:nominations              | hash | gang -> JSON nomination of a preempting gang: its pods' nodes, its    |
|                            |      | victims and which evictions were accepted (phalanx.preemption)        |
| P:sim:binds                | list | JSON {pod, node, at} appended by the simulated cluster's binder       |
| P:sim:preempted            | list | JSON {pod, by, at}: victims the simulated cluster's binder evicted    |
| P:sim:nominated            | hash | pod -> the node nominated for it (status.nominatedNodeName)          |
| P:sim:annotations          | hash | pod -> JSON annotations written to the pod                            |
| P:sim:conditions           | hash | pod -> PodScheduled=False message                                     |
| P:sim:events               | list | JSON events (reason, object, message, at)                             |
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

FIELD_SEP = "\x1f"


# Key names relative to the base (`Keys.full` makes the key), for the commands a `Txn` carries.
def rel_gang(key: str) -> str:
    return f"gang:{key}"


def rel_gang_assumed(key: str) -> str:
    return f"gang:{key}:assumed"


def rel_gang_bound(key: str) -> str:
    return f"gang:{key}:bound"


def rel_gang_rounds(key: str) -> str:
    return f"gang:{key}:rounds"


REL_TIMERS = "timers"
# The scheduler leader's fencing term (see the table above); lua/txn.lua and lua/repair_usage.lua
# compare every fenced commit's term with it, so the name is fixed relative to the base.
REL_LEADER_TERM = "leader:term"
REL_SIM_BINDS = "sim:binds"


@dataclass(frozen=True)
class Keys:
    prefix: str = "phalanx"

    @cached_property
    def base(self) -> str:
        return "{" + self.prefix + "}"

    def full(self, suffix: str) -> str:
        """The key of a name relative to the base (the `rel_*` names above)."""
        return f"{self.base}:{suffix}"

    @cached_property
    def script_fixed(self) -> tuple[str, ...]:
        """The keys lua/txn.lua is always handed, as KEYS[1..9] (built once: every transaction sends them)."""
        return (
            self.nodes,
            self.cap,
            self.used,
            self.pods,
            self.podstate,
            self.bind_lock,
            self.bind_fence,
            self.leader_term,
            self.binding,
        )

    @property
    def nodes(self) -> str:
        return f"{self.base}:nodes"

    @property
    def cap(self) -> str:
        return f"{self.base}:cap"

    @property
    def used(self) -> str:
        return f"{self.base}:used"

    @property
    def pods(self) -> str:
        return f"{self.base}:pods"

    @property
    def podstate(self) -> str:
        return f"{self.base}:podstate"

    @property
    def binding(self) -> str:
        return f"{self.base}:binding"

    @property
    def gangs(self) -> str:
        return f"{self.base}:gangs"

    def gang(self, key: str) -> str:
        return f"{self.base}:{rel_gang(key)}"

    def gang_assumed(self, key: str) -> str:
        return f"{self.base}:{rel_gang_assumed(key)}"

    def gang_bound(self, key: str) -> str:
        return f"{self.base}:{rel_gang_bound(key)}"

    def gang_rounds(self, key: str) -> str:
        return f"{self.base}:{rel_gang_rounds(key)}"

    @property
    def timers(self) -> str:
        return f"{self.base}:{REL_TIMERS}"

    @property
    def meta(self) -> str:
        return f"{self.base}:meta"

    @property
    def bind_lock(self) -> str:
        return f"{self.base}:bind:lock"

    @property
    def bind_fence(self) -> str:
        return f"{self.base}:bind:fence"

    @property
    def bind_durable(self) -> str:
        return f"{self.base}:bind:durable"

    @property
    def leader_term(self) -> str:
        """The fencing term of the leading scheduler replica (leader election on a Lease): raised by each
        new leader (compare-and-raise), checked by every scheduler commit."""
        return f"{self.base}:{REL_LEADER_TERM}"

    @property
    def sim_binds(self) -> str:
        return f"{self.base}:{REL_SIM_BINDS}"

    @property
    def nominations(self) -> str:
        return f"{self.base}:nominations"

    @property
    def sim_preempted(self) -> str:
        return f"{self.base}:sim:preempted"

    @property
    def sim_nominated(self) -> str:
        return f"{self.base}:sim:nominated"

    @property
    def sim_annotations(self) -> str:
        return f"{self.base}:sim:annotations"

    @property
    def sim_conditions(self) -> str:
        return f"{self.base}:sim:conditions"

    @property
    def sim_events(self) -> str:
        return f"{self.base}:sim:events"

    @property
    def pattern(self) -> str:
        """Matches every key of this prefix (for wiping a simulation's state)."""
        return self.base + ":*"


def node_field(node: str, resource: str) -> str:
    return f"{node}{FIELD_SEP}{resource}"
