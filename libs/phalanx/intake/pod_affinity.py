"""A pod's inter-pod affinity, anti-affinity and topology spread constraints, read from its spec into the
model (phalanx.model.pod_affinity).

The checks repeat the API server's validation, since scenario files never pass through one: a `maxSkew: 0`
or an operator typo must be refused by name instead of silently spreading or matching nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from phalanx.intake import bounds, fields
from phalanx.intake.errors import Subject, quoted
from phalanx.intake.placement import check_operator, requirement_fields
from phalanx.model import limits
from phalanx.model.pod_affinity import (
    DO_NOT_SCHEDULE,
    HONOR,
    IGNORE,
    LABEL_OPERATORS,
    NAMESPACE_NAME_LABEL,
    SCHEDULE_ANYWAY,
    LabelRequirement,
    LabelSelector,
    PodAffinitySpec,
    PodAffinityTerm,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
)

# -- parsing ---------------------------------------------------------------------------------------------

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def parse_pod_affinity(spec: Mapping[str, Any], subject: Subject) -> PodAffinitySpec | None:
    """The pod's podAffinity, podAntiAffinity and topologySpreadConstraints; None when it declares none."""
    affinity = fields.mapping(fields.get(spec, "affinity"), subject, "spec.affinity")
    pos = fields.mapping(fields.get(affinity, "podAffinity"), subject, "spec.affinity.podAffinity")
    anti = fields.mapping(fields.get(affinity, "podAntiAffinity"), subject, "spec.affinity.podAntiAffinity")
    parsed = PodAffinitySpec(
        required_affinity=_terms(pos, subject, "spec.affinity.podAffinity"),
        preferred_affinity=_weighted_terms(pos, subject, "spec.affinity.podAffinity"),
        required_anti_affinity=_terms(anti, subject, "spec.affinity.podAntiAffinity"),
        preferred_anti_affinity=_weighted_terms(anti, subject, "spec.affinity.podAntiAffinity"),
        spread=_spread_constraints(spec, subject),
    )
    return None if parsed.empty else parsed


def _terms(parent: Mapping[str, Any], subject: Subject, field: str) -> tuple[PodAffinityTerm, ...]:
    path = f"{field}.{_REQUIRED}"
    items = fields.sequence(fields.get(parent, _REQUIRED), subject, path, limits.MAX_ENTRIES)
    return tuple(_term(item, subject, f"{path}[{i}]") for i, item in enumerate(items))


def _weighted_terms(parent: Mapping[str, Any], subject: Subject, field: str) -> tuple[WeightedPodAffinityTerm, ...]:
    path = f"{field}.{_PREFERRED}"
    out = []
    for i, raw in enumerate(fields.sequence(fields.get(parent, _PREFERRED), subject, path, limits.MAX_ENTRIES)):
        item = fields.mapping(raw, subject, f"{path}[{i}]")
        weight = _integer(fields.get(item, "weight"), subject, f"{path}[{i}].weight", low=1, high=100)
        term = fields.get(item, "podAffinityTerm")
        if term is None:
            raise subject.error(f"{path}[{i}].podAffinityTerm", "is required")
        out.append(WeightedPodAffinityTerm(weight, _term(term, subject, f"{path}[{i}].podAffinityTerm")))
    return tuple(out)


def _term(raw: Any, subject: Subject, field: str) -> PodAffinityTerm:
    item = fields.mapping(raw, subject, field)
    key = fields.text(fields.get(item, "topologyKey"), subject, f"{field}.topologyKey")
    if not key:
        raise subject.error(f"{field}.topologyKey", "is required (a node label key, e.g. kubernetes.io/hostname)")
    bounds.length(key, subject, f"{field}.topologyKey")
    raw_namespaces = fields.sequence(fields.get(item, "namespaces"), subject, f"{field}.namespaces", limits.MAX_ENTRIES)
    namespaces = tuple(fields.text(ns, subject, f"{field}.namespaces[{i}]") for i, ns in enumerate(raw_namespaces))
    ns_selector = _optional_selector(item, "namespaceSelector", subject, field)
    if ns_selector is not None:
        _known_namespace_labels(ns_selector, subject, f"{field}.namespaceSelector")
    # matchLabelKeys / mismatchLabelKeys are merged into labelSelector by the API server (1.31+): not read here.
    return PodAffinityTerm(
        topology_key=key,
        label_selector=_optional_selector(item, "labelSelector", subject, field),
        namespaces=namespaces,
        namespace_selector=ns_selector,
    )


def _known_namespace_labels(selector: LabelSelector, subject: Subject, field: str) -> None:
    """Phalanx does not read Namespace objects, so a namespaceSelector may only name namespaces by name."""
    keys = {k for k, _ in selector.match_labels} | {r.key for r in selector.match_expressions}
    unknown = sorted(keys - {NAMESPACE_NAME_LABEL})
    if unknown:
        raise subject.error(
            field,
            f"label {quoted(unknown[0])} is not supported: only {{}} (every namespace) or selectors on "
            f"{NAMESPACE_NAME_LABEL} (namespace names)",
        )


def _optional_selector(item: Mapping[str, Any], name: str, subject: Subject, field: str) -> LabelSelector | None:
    raw = fields.get(item, name)
    return None if raw is None else parse_label_selector(raw, subject, f"{field}.{name}")


def parse_label_selector(raw: Any, subject: Subject, field: str) -> LabelSelector:
    item = fields.mapping(raw, subject, field)
    labels = fields.string_map(fields.get(item, "matchLabels"), subject, f"{field}.matchLabels")
    expressions = fields.sequence(
        fields.get(item, "matchExpressions"), subject, f"{field}.matchExpressions", limits.MAX_ENTRIES
    )
    return LabelSelector(
        # Sorted so equal selectors hash equal, and share their cached counts.
        match_labels=tuple(sorted(labels.items())),
        match_expressions=tuple(
            _requirement(e, subject, f"{field}.matchExpressions[{i}]") for i, e in enumerate(expressions)
        ),
    )


def _requirement(raw: Any, subject: Subject, field: str) -> LabelRequirement:
    key, operator, values = requirement_fields(raw, subject, field)
    check_operator(operator, values, LABEL_OPERATORS, subject, field)
    return LabelRequirement(key, operator, values)


def _spread_constraints(spec: Mapping[str, Any], subject: Subject) -> tuple[TopologySpreadConstraint, ...]:
    path = "spec.topologySpreadConstraints"
    out: list[TopologySpreadConstraint] = []
    seen: set[tuple[str, str]] = set()
    for i, raw in enumerate(
        fields.sequence(fields.get(spec, "topologySpreadConstraints"), subject, path, limits.MAX_ENTRIES)
    ):
        c = _spread_constraint(raw, subject, f"{path}[{i}]")
        pair = (c.topology_key, c.when_unsatisfiable)
        if pair in seen:
            # The API server refuses two constraints on the same key with the same whenUnsatisfiable.
            raise subject.error(
                f"{path}[{i}]",
                f"duplicate constraint on topologyKey {quoted(pair[0])} with whenUnsatisfiable {pair[1]}",
            )
        seen.add(pair)
        out.append(c)
    return tuple(out)


def _spread_constraint(raw: Any, subject: Subject, field: str) -> TopologySpreadConstraint:
    item = fields.mapping(raw, subject, field)
    max_skew = _integer(fields.get(item, "maxSkew"), subject, f"{field}.maxSkew", low=1)
    bounds.at_most(max_skew, subject, f"{field}.maxSkew", limits.INT32_MAX)
    key = fields.text(fields.get(item, "topologyKey"), subject, f"{field}.topologyKey")
    if not key:
        raise subject.error(f"{field}.topologyKey", "is required (a node label key, e.g. topology.kubernetes.io/zone)")
    bounds.length(key, subject, f"{field}.topologyKey")
    when = fields.text(fields.get(item, "whenUnsatisfiable"), subject, f"{field}.whenUnsatisfiable")
    if when not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
        raise subject.error(
            f"{field}.whenUnsatisfiable", f"{quoted(when)} is not one of {DO_NOT_SCHEDULE}, {SCHEDULE_ANYWAY}"
        )
    raw_min = fields.get(item, "minDomains")
    min_domains = None if raw_min is None else _integer(raw_min, subject, f"{field}.minDomains", low=1)
    if min_domains is not None:
        bounds.at_most(min_domains, subject, f"{field}.minDomains", limits.INT32_MAX)
    if min_domains is not None and when != DO_NOT_SCHEDULE:
        raise subject.error(f"{field}.minDomains", f"may only be set when whenUnsatisfiable is {DO_NOT_SCHEDULE}")
    keys = fields.sequence(fields.get(item, "matchLabelKeys"), subject, f"{field}.matchLabelKeys", limits.MAX_ENTRIES)
    return TopologySpreadConstraint(
        max_skew=max_skew,
        topology_key=key,
        when_unsatisfiable=when,
        label_selector=_optional_selector(item, "labelSelector", subject, field),
        min_domains=min_domains,
        match_label_keys=tuple(fields.text(k, subject, f"{field}.matchLabelKeys[{i}]") for i, k in enumerate(keys)),
        node_affinity_policy=_policy(item, "nodeAffinityPolicy", HONOR, subject, field),
        node_taints_policy=_policy(item, "nodeTaintsPolicy", IGNORE, subject, field),
    )


def _policy(item: Mapping[str, Any], name: str, default: str, subject: Subject, field: str) -> str:
    value = fields.text(fields.get(item, name), subject, f"{field}.{name}") or default
    if value not in (HONOR, IGNORE):
        raise subject.error(f"{field}.{name}", f"{quoted(value)} is not one of {HONOR}, {IGNORE}")
    return value


def _integer(value: Any, subject: Subject, field: str, *, low: int, high: int | None = None) -> int:
    if value is None:
        raise subject.error(field, "is required")
    # bool is an int in Python, but `maxSkew: true` is no number of pods.
    ok = isinstance(value, int) and not isinstance(value, bool) and low <= value and (high is None or value <= high)
    if not ok:
        bound = f">= {low}" if high is None else f"from {low} to {high}"
        raise subject.error(field, f"must be an integer {bound}, got {quoted(value)}")
    assert isinstance(value, int)
    return value
