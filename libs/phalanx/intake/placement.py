"""A pod's node constraints (nodeSelector, required node affinity, tolerations) as a hashable Placement.

The checks are the ones the API server applies, repeated here because scenario files never pass through
an API server, and a typo such as `operator: exists` must not silently match every node.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from phalanx.intake import bounds, fields
from phalanx.intake.errors import Subject, quoted
from phalanx.model import limits
from phalanx.model.objects import Placement, SelectorRequirement, SelectorTerm, Toleration

_SET_OPERATORS = {"In", "NotIn"}
_PRESENCE_OPERATORS = {"Exists", "DoesNotExist"}
_NUMERIC_OPERATORS = {"Gt", "Lt"}
_NODE_OPERATORS = _SET_OPERATORS | _PRESENCE_OPERATORS | _NUMERIC_OPERATORS
# Upstream allows matchFields only on metadata.name, and only with set operators.
_FIELD_KEYS = {"metadata.name"}
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

_REQUIRED_TERMS = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"


def parse_placement(spec: Mapping[str, Any], subject: Subject) -> Placement:
    return Placement(
        node_selector=_node_selector(spec, subject),
        affinity_terms=_affinity_terms(spec, subject),
        tolerations=_tolerations(spec, subject),
    )


def _node_selector(spec: Mapping[str, Any], subject: Subject) -> tuple[tuple[str, str], ...]:
    selector = fields.string_map(fields.get(spec, "nodeSelector"), subject, "spec.nodeSelector")
    # Sorted so two pods with the same selector share one Placement (and one cached node mask).
    return tuple(sorted(selector.items()))


def _affinity_terms(spec: Mapping[str, Any], subject: Subject) -> tuple[SelectorTerm, ...]:
    affinity = fields.mapping(fields.get(spec, "affinity"), subject, "spec.affinity")
    node_affinity = fields.mapping(fields.get(affinity, "nodeAffinity"), subject, "spec.affinity.nodeAffinity")
    required = fields.mapping(
        fields.get(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution"),
        subject,
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
    )
    terms = fields.sequence(fields.get(required, "nodeSelectorTerms"), subject, _REQUIRED_TERMS, limits.MAX_ENTRIES)
    return tuple(_term(term, subject, f"{_REQUIRED_TERMS}[{i}]") for i, term in enumerate(terms))


def _term(raw: Any, subject: Subject, field: str) -> SelectorTerm:
    term = fields.mapping(raw, subject, field)
    expressions = fields.sequence(
        fields.get(term, "matchExpressions"), subject, f"{field}.matchExpressions", limits.MAX_ENTRIES
    )
    field_selectors = fields.sequence(
        fields.get(term, "matchFields"), subject, f"{field}.matchFields", limits.MAX_ENTRIES
    )
    return SelectorTerm(
        match_expressions=tuple(
            _requirement(item, subject, f"{field}.matchExpressions[{i}]", on_fields=False)
            for i, item in enumerate(expressions)
        ),
        match_fields=tuple(
            _requirement(item, subject, f"{field}.matchFields[{i}]", on_fields=True)
            for i, item in enumerate(field_selectors)
        ),
    )


def requirement_fields(raw: Any, subject: Subject, field: str) -> tuple[str, str, tuple[str, ...]]:
    """(key, operator, values) of a selector requirement (node or label selector); the key is required."""
    item = fields.mapping(raw, subject, field)
    key = bounds.length(fields.text(fields.get(item, "key"), subject, f"{field}.key"), subject, f"{field}.key")
    operator = fields.text(fields.get(item, "operator"), subject, f"{field}.operator")
    raw_values = fields.sequence(fields.get(item, "values"), subject, f"{field}.values", limits.MAX_ENTRIES)
    values = tuple(
        bounds.length(fields.value_text(value, subject, f"{field}.values[{i}]"), subject, f"{field}.values[{i}]")
        for i, value in enumerate(raw_values)
    )
    if not key:
        raise subject.error(f"{field}.key", "is required")
    return key, operator, values


def check_operator(
    operator: str, values: tuple[str, ...], allowed: Collection[str], subject: Subject, field: str
) -> None:
    """The operator is one of `allowed`; set operators have values, presence operators none."""
    if operator not in allowed:
        raise subject.error(f"{field}.operator", f"{quoted(operator)} is not one of {', '.join(sorted(allowed))}")
    if operator in _SET_OPERATORS and not values:
        raise subject.error(f"{field}.values", f"must be non-empty for operator {operator}")
    if operator in _PRESENCE_OPERATORS and values:
        raise subject.error(f"{field}.values", f"must be empty for operator {operator}")


def _requirement(raw: Any, subject: Subject, field: str, *, on_fields: bool) -> SelectorRequirement:
    key, operator, values = requirement_fields(raw, subject, field)
    if on_fields and key not in _FIELD_KEYS:
        raise subject.error(f"{field}.key", f"{quoted(key)} is not supported (only metadata.name)")
    check_operator(operator, values, _SET_OPERATORS if on_fields else _NODE_OPERATORS, subject, field)
    if operator in _NUMERIC_OPERATORS and (len(values) != 1 or not _is_integer(values[0])):
        raise subject.error(f"{field}.values", f"operator {operator} needs exactly one integer value")
    return SelectorRequirement(key=key, operator=operator, values=values)


def _is_integer(value: str) -> bool:
    # Kubernetes parses Gt/Lt values as int64; the length check keeps int() off 5,000-digit strings.
    if len(value) > 20:
        return False
    try:
        number = int(value)
    except ValueError:
        return False
    return -(2**63) <= number < 2**63


def _tolerations(spec: Mapping[str, Any], subject: Subject) -> tuple[Toleration, ...]:
    items = fields.sequence(fields.get(spec, "tolerations"), subject, "spec.tolerations", limits.MAX_ENTRIES)
    return tuple(_toleration(item, subject, f"spec.tolerations[{i}]") for i, item in enumerate(items))


def _toleration(raw: Any, subject: Subject, field: str) -> Toleration:
    item = fields.mapping(raw, subject, field)
    key = bounds.length(fields.text(fields.get(item, "key"), subject, f"{field}.key"), subject, f"{field}.key")
    operator = fields.text(fields.get(item, "operator"), subject, f"{field}.operator") or "Equal"
    value = fields.value_text(fields.get(item, "value"), subject, f"{field}.value")
    bounds.length(value, subject, f"{field}.value")
    effect = fields.text(fields.get(item, "effect"), subject, f"{field}.effect")
    if operator not in ("Equal", "Exists"):
        raise subject.error(f"{field}.operator", f"{quoted(operator)} is not one of Equal, Exists")
    if operator == "Exists" and value:
        raise subject.error(f"{field}.value", "must be empty when operator is Exists")
    if not key and operator != "Exists":
        # An empty key tolerates every taint, which upstream only allows as an explicit Exists.
        raise subject.error(f"{field}.operator", "must be Exists when key is empty")
    if effect and effect not in TAINT_EFFECTS:
        raise subject.error(f"{field}.effect", f"{quoted(effect)} is not one of {', '.join(TAINT_EFFECTS)}")
    return Toleration(key=key, operator=operator, value=value, effect=effect)
