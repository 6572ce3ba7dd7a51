"""A pod's inter-pod affinity, anti-affinity and topology spread constraints, as hashable frozen dataclasses
(parsed from a pod spec by phalanx.intake.pod_affinity; read by the InterPodAffinity and PodTopologySpread
plugins)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

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
