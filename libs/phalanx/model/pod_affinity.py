"""A pod's inter-pod affinity, anti-affinity and topology spread constraints, as hashable frozen dataclasses
(parsed from a pod spec by phalanx.intake.pod_affinity; read by the InterPodAffinity and PodTopologySpread
plugins)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LABEL_OPERATORS = ("DoesNotExist", "Exists", "In", "NotIn")
DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR, IGNORE = "Honor", "Ignore"
# Every namespace carries this label with its own name (since Kubernetes 1.21): the one namespace label
# Phalanx knows without reading Namespace objects.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist
    values: tuple[str, ...] = ()

    def holds(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        return value is None  # DoesNotExist


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """metav1.LabelSelector: matchLabels and matchExpressions ANDed; an empty selector matches everything
    (a missing selector, None where one is optional, matches nothing, as upstream)."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[LabelRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            r.holds(labels) for r in self.match_expressions
        )

    @property
    def empty(self) -> bool:
        return not self.match_labels and not self.match_expressions


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """Pods matching `label_selector` in the term's namespaces, counted per topology domain.

    Namespaces: those listed, plus those `namespace_selector` selects ({} selects all); with neither, the
    namespace of the pod that owns the term (resolved where the term is used: see in_namespaces)."""

    topology_key: str
    label_selector: LabelSelector | None = None
    namespaces: tuple[str, ...] = ()
    namespace_selector: LabelSelector | None = None

    def in_namespaces(self, namespace: str, owner_namespace: str) -> bool:
        if not self.namespaces and self.namespace_selector is None:
            return namespace == owner_namespace
        if namespace in self.namespaces:
            return True
        sel = self.namespace_selector
        return sel is not None and sel.matches({NAMESPACE_NAME_LABEL: namespace})

    def matches(self, namespace: str, labels: Mapping[str, str], owner_namespace: str) -> bool:
        """Whether a pod (namespace, labels) is one this term, owned by a pod of `owner_namespace`, counts."""
        sel = self.label_selector
        return sel is not None and self.in_namespaces(namespace, owner_namespace) and sel.matches(labels)


@dataclass(frozen=True, slots=True)
class WeightedPodAffinityTerm:
    weight: int  # 1..100
    term: PodAffinityTerm


@dataclass(frozen=True, slots=True)
class TopologySpreadConstraint:
    max_skew: int
    topology_key: str
    when_unsatisfiable: str  # DoNotSchedule | ScheduleAnyway
    label_selector: LabelSelector | None = None
    min_domains: int | None = None
    match_label_keys: tuple[str, ...] = ()
    node_affinity_policy: str = HONOR
    node_taints_policy: str = IGNORE

    @property
    def hard(self) -> bool:
        return self.when_unsatisfiable == DO_NOT_SCHEDULE


@dataclass(frozen=True, slots=True)
class PodAffinitySpec:
    required_affinity: tuple[PodAffinityTerm, ...] = ()
    preferred_affinity: tuple[WeightedPodAffinityTerm, ...] = ()
    required_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    preferred_anti_affinity: tuple[WeightedPodAffinityTerm, ...] = ()
    spread: tuple[TopologySpreadConstraint, ...] = ()

    @property
    def has_affinity(self) -> bool:
        return bool(
            self.required_affinity
            or self.preferred_affinity
            or self.required_anti_affinity
            or self.preferred_anti_affinity
        )

    @property
    def empty(self) -> bool:
        return not self.has_affinity and not self.spread


# -- plain data (JSON in Redis) --------------------------------------------------------------------------
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
