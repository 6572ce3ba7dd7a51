"""The protobuf form of the model: every model type to and from its phalanx.v1 message, in one place."""

from __future__ import annotations

import functools

from phalanx.model.binding import (
    Assignment,
    BindResult,
    BindStatus,
    EvictResult,
    EvictStatus,
    GangReport,
    PodReport,
    Victim,
)
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
from phalanx.v1 import binder_pb2
from phalanx.v1 import objects_pb2 as pb

_INT32 = (-(2**31), 2**31 - 1)


def _int32(value: int, obj: PodInfo | GangSpec, field: str) -> int:
    """The intake keeps these in range; should a value slip through, name it rather than let protobuf
    fail with a bare "Value out of range"."""
    if not _INT32[0] <= value <= _INT32[1]:
        raise ValueError(f"{type(obj).__name__} {obj.namespace}/{obj.name}: {field} {value} does not fit int32")
    return value


# -- a pod's inter-pod affinity and topology spread (phalanx.model.pod_affinity) -------------------------
def _selector_to_pb(s: LabelSelector, out: pb.LabelSelector) -> None:
    out.SetInParent()  # an empty selector (matches everything) is set, unlike a missing one
    out.match_labels.update(dict(s.match_labels))
    out.match_expressions.extend(
        pb.SelectorRequirement(key=r.key, operator=r.operator, values=r.values) for r in s.match_expressions
    )


def _selector_from_pb(m: pb.LabelSelector) -> LabelSelector:
    return LabelSelector(
        tuple(sorted(m.match_labels.items())),  # sorted, as intake sorts them: equal selectors hash equal
        tuple(LabelRequirement(r.key, r.operator, tuple(r.values)) for r in m.match_expressions),
    )


def _term_to_pb(t: PodAffinityTerm, out: pb.PodAffinityTerm) -> None:
    out.topology_key = t.topology_key
    out.namespaces.extend(t.namespaces)
    if t.label_selector is not None:
        _selector_to_pb(t.label_selector, out.label_selector)
    if t.namespace_selector is not None:
        _selector_to_pb(t.namespace_selector, out.namespace_selector)


def _term_from_pb(m: pb.PodAffinityTerm) -> PodAffinityTerm:
    return PodAffinityTerm(
        m.topology_key,
        _selector_from_pb(m.label_selector) if m.HasField("label_selector") else None,
        tuple(m.namespaces),
        _selector_from_pb(m.namespace_selector) if m.HasField("namespace_selector") else None,
    )


def affinity_to_pb(spec: PodAffinitySpec, out: pb.PodAffinity) -> None:
    out.SetInParent()
    for t in spec.required_affinity:
        _term_to_pb(t, out.required_affinity.add())
    for t in spec.required_anti_affinity:
        _term_to_pb(t, out.required_anti_affinity.add())
    for weighted, into in (
        (spec.preferred_affinity, out.preferred_affinity),
        (spec.preferred_anti_affinity, out.preferred_anti_affinity),
    ):
        for w in weighted:
            item = into.add(weight=w.weight)
            _term_to_pb(w.term, item.term)
    for c in spec.spread:
        m = out.spread.add(
            max_skew=c.max_skew,
            topology_key=c.topology_key,
            when_unsatisfiable=c.when_unsatisfiable,
            min_domains=c.min_domains or 0,
            match_label_keys=c.match_label_keys,
            node_affinity_policy=c.node_affinity_policy,
            node_taints_policy=c.node_taints_policy,
        )
        if c.label_selector is not None:
            _selector_to_pb(c.label_selector, m.label_selector)


def affinity_from_pb(m: pb.PodAffinity) -> PodAffinitySpec:
    return PodAffinitySpec(
        tuple(_term_from_pb(t) for t in m.required_affinity),
        tuple(WeightedPodAffinityTerm(w.weight, _term_from_pb(w.term)) for w in m.preferred_affinity),
        tuple(_term_from_pb(t) for t in m.required_anti_affinity),
        tuple(WeightedPodAffinityTerm(w.weight, _term_from_pb(w.term)) for w in m.preferred_anti_affinity),
        tuple(
            TopologySpreadConstraint(
                c.max_skew,
                c.topology_key,
                c.when_unsatisfiable,
                _selector_from_pb(c.label_selector) if c.HasField("label_selector") else None,
                c.min_domains or None,
                tuple(c.match_label_keys),
                c.node_affinity_policy,
                c.node_taints_policy,
            )
            for c in m.spread
        ),
    )


# -- objects.proto <-> phalanx.model.objects --------------------------------------------------------------


def _requirements_to_pb(reqs: tuple[SelectorRequirement, ...]) -> list[pb.SelectorRequirement]:
    return [pb.SelectorRequirement(key=r.key, operator=r.operator, values=list(r.values)) for r in reqs]


def _requirements_from_pb(reqs: object) -> tuple[SelectorRequirement, ...]:
    return tuple(SelectorRequirement(r.key, r.operator, tuple(r.values)) for r in reqs)  # type: ignore[attr-defined]


# A job's pods share one Placement (intake/spec_parts.py) and pods of one template send equal ones: each
# direction converts a distinct placement once (4-6 us a pod otherwise, on every add to the queue and every
# pod popped from it). Bounded as the intake's memo is; a message kept here is only ever copied from.
@functools.lru_cache(maxsize=4096)
def _placement_pb(p: Placement) -> pb.Placement:
    return placement_to_pb(p)


@functools.lru_cache(maxsize=4096)
def _placement_from_bytes(key: bytes) -> Placement:
    return placement_from_pb(pb.Placement.FromString(key))


def _placement_of(m: pb.Placement) -> Placement:
    return _placement_from_bytes(m.SerializeToString(deterministic=True))


def placement_to_pb(p: Placement) -> pb.Placement:
    return pb.Placement(
        node_selector=dict(p.node_selector),
        affinity_terms=[
            pb.SelectorTerm(
                match_expressions=_requirements_to_pb(t.match_expressions),
                match_fields=_requirements_to_pb(t.match_fields),
            )
            for t in p.affinity_terms
        ],
        tolerations=[
            pb.Toleration(key=t.key, operator=t.operator, value=t.value, effect=t.effect) for t in p.tolerations
        ],
    )


def placement_from_pb(m: pb.Placement) -> Placement:
    return Placement(
        node_selector=tuple(sorted(m.node_selector.items())),
        affinity_terms=tuple(
            SelectorTerm(_requirements_from_pb(t.match_expressions), _requirements_from_pb(t.match_fields))
            for t in m.affinity_terms
        ),
        tolerations=tuple(Toleration(t.key, t.operator, t.value, t.effect) for t in m.tolerations),
    )


def pod_to_pb(p: PodInfo, trace_parent: str = "") -> pb.Pod:
    m = pb.Pod(
        namespace=p.namespace,
        name=p.name,
        uid=p.uid,
        priority=_int32(p.priority, p, "priority"),
        created_at=p.created_at,
        requests=p.requests,
        placement=_placement_pb(p.placement),
        gang=p.gang,
        gang_created_at=p.gang_created_at,
        node_name=p.node_name,
        annotations=p.annotations,
        labels=p.labels,
        duration=-1.0 if p.duration is None else p.duration,
        invalid=p.invalid,
        trace_parent=trace_parent,
        preemption_policy=p.preemption_policy,
    )
    if p.pod_affinity is not None:
        affinity_to_pb(p.pod_affinity, m.pod_affinity)
    return m


def pod_from_pb(m: pb.Pod) -> PodInfo:
    return PodInfo(
        namespace=m.namespace,
        name=m.name,
        uid=m.uid,
        priority=m.priority,
        created_at=m.created_at,
        requests=dict(m.requests),
        placement=_placement_of(m.placement),
        gang=m.gang,
        gang_created_at=m.gang_created_at,
        node_name=m.node_name,
        annotations=dict(m.annotations),
        labels=dict(m.labels),
        duration=None if m.duration < 0 else m.duration,
        invalid=m.invalid,
        pod_affinity=affinity_from_pb(m.pod_affinity) if m.HasField("pod_affinity") else None,
        preemption_policy=m.preemption_policy,
    )


def gang_to_pb(g: GangSpec) -> pb.Gang:
    return pb.Gang(
        namespace=g.namespace,
        name=g.name,
        min_available=_int32(g.min_available, g, "min_available"),
        total_number=_int32(g.total_number, g, "total_number"),
        mode=pb.GANG_MODE_NON_STRICT if g.mode == GangMode.NON_STRICT else pb.GANG_MODE_STRICT,
        groups=list(g.groups),
        wait_seconds=-1.0 if g.wait_seconds is None else g.wait_seconds,
        min_resources=g.min_resources,
        created_at=g.created_at,
        source=g.source,
        invalid=g.invalid,
        match_policy=g.match_policy,
        min_task_member={role: _int32(n, g, f"min_task_member[{role}]") for role, n in g.min_task_member.items()},
    )


def gang_from_pb(m: pb.Gang) -> GangSpec:
    return GangSpec(
        namespace=m.namespace,
        name=m.name,
        min_available=m.min_available,
        total_number=m.total_number,
        mode=GangMode.NON_STRICT if m.mode == pb.GANG_MODE_NON_STRICT else GangMode.STRICT,
        groups=tuple(m.groups),
        wait_seconds=None if m.wait_seconds < 0 else m.wait_seconds,
        min_resources=dict(m.min_resources),
        created_at=m.created_at,
        source=m.source,
        invalid=m.invalid,
        match_policy=m.match_policy or "once-satisfied",  # "": a sender from before the field
        min_task_member=dict(m.min_task_member),
    )


def node_to_pb(n: NodeInfo) -> pb.Node:
    return pb.Node(
        name=n.name,
        allocatable=n.allocatable,
        labels=n.labels,
        taints=[pb.Taint(key=t.key, value=t.value, effect=t.effect) for t in n.taints],
        unschedulable=n.unschedulable,
    )


def node_from_pb(m: pb.Node) -> NodeInfo:
    return NodeInfo(
        name=m.name,
        allocatable=dict(m.allocatable),
        labels=dict(m.labels),
        taints=tuple(Taint(t.key, t.value, t.effect) for t in m.taints),
        unschedulable=m.unschedulable,
    )


# -- binder.proto <-> phalanx.model.binding --------------------------------------------------------------
_STATUS_TO_PB = {
    BindStatus.BOUND: binder_pb2.BIND_STATUS_BOUND,
    BindStatus.FAILED: binder_pb2.BIND_STATUS_FAILED,
    BindStatus.ROLLED_BACK: binder_pb2.BIND_STATUS_ROLLED_BACK,
    BindStatus.GONE: binder_pb2.BIND_STATUS_GONE,
    BindStatus.PENDING: binder_pb2.BIND_STATUS_PENDING,
}
_STATUS_FROM_PB = {v: k for k, v in _STATUS_TO_PB.items()}


def assignment_to_pb(a: Assignment) -> binder_pb2.Assignment:
    return binder_pb2.Assignment(pod_key=a.pod_key, uid=a.uid, node=a.node, gang=a.gang)


def assignment_from_pb(m: binder_pb2.Assignment) -> Assignment:
    return Assignment(m.pod_key, m.uid, m.node, m.gang)


def bind_result_to_pb(r: BindResult) -> binder_pb2.BindResult:
    return binder_pb2.BindResult(pod_key=r.pod_key, status=_STATUS_TO_PB[r.status], message=r.message)


def bind_result_from_pb(m: binder_pb2.BindResult) -> BindResult:
    status = _STATUS_FROM_PB.get(m.status)
    if status is None:  # a binder newer than this scheduler, or a corrupt answer: not bound, and said so
        return BindResult(m.pod_key, BindStatus.FAILED, f"unknown bind status {m.status}: {m.message}")
    return BindResult(m.pod_key, status, m.message)


def pod_report_to_pb(r: PodReport) -> binder_pb2.PodReport:
    return binder_pb2.PodReport(
        pod_key=r.pod_key,
        annotations=r.annotations,
        unschedulable_message=r.unschedulable_message,
        event_reason=r.event_reason,
        event_message=r.event_message,
        nominated_node=r.nominated_node,
        waiting=r.waiting,
    )


def pod_report_from_pb(m: binder_pb2.PodReport) -> PodReport:
    return PodReport(
        m.pod_key,
        dict(m.annotations),
        m.unschedulable_message,
        m.event_reason,
        m.event_message,
        m.nominated_node,
        m.waiting,
    )


def victim_to_pb(v: Victim) -> binder_pb2.Victim:
    return binder_pb2.Victim(pod_key=v.pod_key, uid=v.uid, node=v.node, preemptor=v.preemptor, message=v.message)


def victim_from_pb(m: binder_pb2.Victim) -> Victim:
    return Victim(m.pod_key, m.uid, m.node, m.preemptor, m.message)


_EVICT_TO_PB = {
    EvictStatus.EVICTED: binder_pb2.EVICT_STATUS_EVICTED,
    EvictStatus.GONE: binder_pb2.EVICT_STATUS_GONE,
    EvictStatus.REFUSED: binder_pb2.EVICT_STATUS_REFUSED,
    EvictStatus.RETRY: binder_pb2.EVICT_STATUS_RETRY,
}
_EVICT_FROM_PB = {v: k for k, v in _EVICT_TO_PB.items()}


def evict_result_to_pb(r: EvictResult) -> binder_pb2.EvictResult:
    return binder_pb2.EvictResult(pod_key=r.pod_key, status=_EVICT_TO_PB[r.status], message=r.message)


def evict_result_from_pb(m: binder_pb2.EvictResult) -> EvictResult:
    # An answer this side does not know (a newer binder) is no answer: asked again later.
    return EvictResult(m.pod_key, _EVICT_FROM_PB.get(m.status, EvictStatus.RETRY), m.message)


_GANG_REPORT_FIELDS = (
    "gang_key",
    "phase",
    "scheduled",
    "message",
    "source",
    "event_reason",
    "unschedulable",
    "schedule_start_time",
    "pod_key",
    "has_counts",
    "running",
    "succeeded",
    "failed",
)


def gang_report_to_pb(r: GangReport) -> binder_pb2.GangReport:
    return binder_pb2.GangReport(**{f: getattr(r, f) for f in _GANG_REPORT_FIELDS})


def gang_report_from_pb(m: binder_pb2.GangReport) -> GangReport:
    return GangReport(**{f: getattr(m, f) for f in _GANG_REPORT_FIELDS})
