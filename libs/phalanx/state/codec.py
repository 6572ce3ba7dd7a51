"""The Redis storage form of the model: every value Phalanx keeps in Redis, to and from its types.

The one place that knows these encodings (pods, reservation records, gangs, gang records, nodes, and a
pod's inter-pod affinity inside its pod), as compact JSON (`fast_json`). What they mean must not change: a
restarted scheduler reads what an older one wrote, and lua/txn.lua and lua/repair_usage.lua read the
reservation records' "node", "gang" and "requests".
"""

from __future__ import annotations

import functools
from dataclasses import asdict
from dataclasses import fields as dataclass_fields
from typing import Any

from phalanx import fast_json
from phalanx.gang.record import GangRecord
from phalanx.gang.roles import role_in
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
from phalanx.model.pod_affinity import (
    LabelRequirement,
    LabelSelector,
    PodAffinitySpec,
    PodAffinityTerm,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
)
from phalanx.state.pod_state import PodMark, PodRecord, PodState


# -- pods --------------------------------------------------------------------------------------------------
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
    written by affinity_to_plain so that it can be read back into its classes."""
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
    placement = _placement_of_json(fast_json.dumps_bytes(data["placement"]))
    # Records written before pods carried affinity have no such field: None, as for a pod declaring none.
    affinity = affinity_from_plain(data.get("pod_affinity"))
    return PodInfo(**{**data, "placement": placement, "pod_affinity": affinity})


# A job's pods share one placement (the two default tolerations at least): a restarted scheduler reading
# 30,000 reservation records builds each distinct one once. Placement is frozen, so pods may share it; the
# key is the placement's own JSON as pod_to_json wrote it. Bounded as the other placement memos are.
@functools.lru_cache(maxsize=4096)
def _placement_of_json(key: bytes) -> Placement:
    p = fast_json.loads(key)
    return Placement(
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


# -- reservation records (the `pods` hash) -----------------------------------------------------------------
def reservation_record(pod: PodInfo, node: str, held: dict[str, int]) -> str:
    """What the `pods` hash keeps for a pod reserved (or found bound) on `node`, holding `held`."""
    return fast_json.dumps({"node": node, "gang": pod.gang, "requests": held, "pod": pod_to_json(pod)})


def pod_record(key: str, raw: str, state: str | None) -> PodRecord:
    """A reservation as `reservation_record` wrote it, in the state `podstate` holds (none yet: assumed)."""
    rec = fast_json.loads(raw)
    return PodRecord(
        key, rec["node"], rec["gang"], rec["requests"], pod_from_json(rec["pod"]), PodState(state or PodState.ASSUMED)
    )


def pod_mark(raw: str, state: str | None) -> PodMark:
    """The node, pod uid and state of a reservation record (pod_record without the pod: about 7 us against 41)."""
    return pod_mark_and_requests(raw, state)[0]


def pod_mark_and_requests(raw: str, state: str | None) -> tuple[PodMark, dict[str, int]]:
    """pod_mark, and what the record holds on its node (what the node's usage counts of it)."""
    rec = fast_json.loads(raw)
    return PodMark(rec["node"], rec["pod"].get("uid", ""), PodState(state or PodState.ASSUMED)), rec["requests"]


def gang_in_record(raw: str | bytes) -> str:
    """The gang a reservation record names ("" for none)."""
    return str(fast_json.loads(raw).get("gang", ""))


def role_in_record(raw: str) -> str:
    """The role (volcano.sh/task-spec) of the pod a reservation record holds, "" if none."""
    pod = fast_json.loads(raw)["pod"]
    return role_in(pod.get("annotations") or {}, pod.get("labels") or {})


# -- gangs -------------------------------------------------------------------------------------------------
# gang_to_json and node_to_json write their fields by hand too (asdict was 6% of the scheduler's rebuild of
# 30,000 bound pods: every gang and node is written to Redis); a new field falls back to asdict.
_GANG_HAND_WRITTEN = _fields(GangSpec) == (
    "namespace",
    "name",
    "min_available",
    "total_number",
    "mode",
    "groups",
    "wait_seconds",
    "min_resources",
    "created_at",
    "source",
    "invalid",
    "match_policy",
    "queue",
    "min_task_member",
)
_NODE_HAND_WRITTEN = _fields(NodeInfo) == ("name", "allocatable", "labels", "taints", "unschedulable") and _fields(
    Taint
) == ("key", "value", "effect")


def gang_to_json(g: GangSpec) -> str:
    if not _GANG_HAND_WRITTEN:
        return fast_json.dumps({**asdict(g), "mode": g.mode.value})
    return fast_json.dumps(
        {
            "namespace": g.namespace,
            "name": g.name,
            "min_available": g.min_available,
            "total_number": g.total_number,
            "mode": g.mode.value,
            "groups": g.groups,
            "wait_seconds": g.wait_seconds,
            "min_resources": g.min_resources,
            "created_at": g.created_at,
            "source": g.source,
            "invalid": g.invalid,
            "match_policy": g.match_policy,
            "queue": g.queue,
            "min_task_member": g.min_task_member,
        }
    )


def gang_from_json(raw: str | bytes) -> GangSpec:
    data = fast_json.loads(raw)
    data["mode"] = GangMode(data["mode"])
    data["groups"] = tuple(data["groups"])
    return GangSpec(**data)


def _opt_float(value: str | None) -> float | None:
    return None if value in (None, "") else float(value)


def gang_record(key: str, h: dict[str, str], assumed: set[str], bound: set[str], rounds: dict[str, str]) -> GangRecord:
    """A gang's record from its hash, its pod sets and its rounds hash, as state/gang_writes.py writes them
    (roles are not stored: the reader rebuilds them from the pod records)."""
    return GangRecord(
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


# -- nodes -------------------------------------------------------------------------------------------------
def node_to_json(n: NodeInfo) -> str:
    if not _NODE_HAND_WRITTEN:
        return fast_json.dumps(asdict(n))
    return fast_json.dumps(
        {
            "name": n.name,
            "allocatable": n.allocatable,
            "labels": n.labels,
            "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in n.taints],
            "unschedulable": n.unschedulable,
        }
    )


def node_from_json(raw: str | bytes) -> NodeInfo:
    data = fast_json.loads(raw)
    data["taints"] = tuple(Taint(**t) for t in data["taints"])
    return NodeInfo(**data)


# -- a pod's inter-pod affinity and spread (inside its pod) ------------------------------------------------
# Written out field by field: dataclasses.asdict would give tuples of tuples back as lists, and reading
# needs the classes anyway.


def _selector_to_plain(s: LabelSelector | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {
        "match_labels": [list(kv) for kv in s.match_labels],
        "match_expressions": [[r.key, r.operator, list(r.values)] for r in s.match_expressions],
    }


def _selector_from_plain(d: dict[str, Any] | None) -> LabelSelector | None:
    if d is None:
        return None
    return LabelSelector(
        tuple((k, v) for k, v in d["match_labels"]),
        tuple(LabelRequirement(k, op, tuple(vs)) for k, op, vs in d["match_expressions"]),
    )


def _term_to_plain(t: PodAffinityTerm) -> dict[str, Any]:
    return {
        "topology_key": t.topology_key,
        "label_selector": _selector_to_plain(t.label_selector),
        "namespaces": list(t.namespaces),
        "namespace_selector": _selector_to_plain(t.namespace_selector),
    }


def _term_from_plain(d: dict[str, Any]) -> PodAffinityTerm:
    return PodAffinityTerm(
        d["topology_key"],
        _selector_from_plain(d["label_selector"]),
        tuple(d["namespaces"]),
        _selector_from_plain(d["namespace_selector"]),
    )


def _spread_to_plain(c: TopologySpreadConstraint) -> dict[str, Any]:
    return {
        "max_skew": c.max_skew,
        "topology_key": c.topology_key,
        "when_unsatisfiable": c.when_unsatisfiable,
        "label_selector": _selector_to_plain(c.label_selector),
        "min_domains": c.min_domains,
        "match_label_keys": list(c.match_label_keys),
        "node_affinity_policy": c.node_affinity_policy,
        "node_taints_policy": c.node_taints_policy,
    }


def _spread_from_plain(d: dict[str, Any]) -> TopologySpreadConstraint:
    return TopologySpreadConstraint(
        d["max_skew"],
        d["topology_key"],
        d["when_unsatisfiable"],
        _selector_from_plain(d["label_selector"]),
        d["min_domains"],
        tuple(d["match_label_keys"]),
        d["node_affinity_policy"],
        d["node_taints_policy"],
    )


def affinity_to_plain(spec: PodAffinitySpec | None) -> dict[str, Any] | None:
    if spec is None:
        return None
    return {
        "required_affinity": [_term_to_plain(t) for t in spec.required_affinity],
        "preferred_affinity": [[w.weight, _term_to_plain(w.term)] for w in spec.preferred_affinity],
        "required_anti_affinity": [_term_to_plain(t) for t in spec.required_anti_affinity],
        "preferred_anti_affinity": [[w.weight, _term_to_plain(w.term)] for w in spec.preferred_anti_affinity],
        "spread": [_spread_to_plain(c) for c in spec.spread],
    }


def affinity_from_plain(d: dict[str, Any] | None) -> PodAffinitySpec | None:
    if d is None:
        return None
    return PodAffinitySpec(
        tuple(_term_from_plain(t) for t in d["required_affinity"]),
        tuple(WeightedPodAffinityTerm(w, _term_from_plain(t)) for w, t in d["preferred_affinity"]),
        tuple(_term_from_plain(t) for t in d["required_anti_affinity"]),
        tuple(WeightedPodAffinityTerm(w, _term_from_plain(t)) for w, t in d["preferred_anti_affinity"]),
        tuple(_spread_from_plain(c) for c in d["spread"]),
    )
