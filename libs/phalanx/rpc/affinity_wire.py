"""A pod's inter-pod affinity and topology spread (phalanx.model.pod_affinity) to and from protobuf."""

from __future__ import annotations

from phalanx.model.pod_affinity import (
    LabelRequirement,
    LabelSelector,
    PodAffinitySpec,
    PodAffinityTerm,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
)
from phalanx.v1 import objects_pb2 as pb


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
