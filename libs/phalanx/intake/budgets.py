"""PodDisruptionBudgets (policy/v1, dicts in camelCase) to the model's DisruptionBudget.

The spec decides which pods are protected and how many may go; the status's disruptionsAllowed is used
only when the disruption controller has written it for the current spec (observedGeneration), else the
allowance is computed from the spec (see phalanx.model.budgets)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from phalanx.intake import fields
from phalanx.intake.errors import quoted
from phalanx.intake.pod_affinity import parse_label_selector
from phalanx.model.budgets import DisruptionBudget, check_budget_value
from phalanx.model.pod_affinity import LabelSelector


def parse_budget(obj: Mapping[str, Any]) -> DisruptionBudget:
    meta, subject = fields.metadata(obj, "PodDisruptionBudget", namespaced=True)
    spec = fields.mapping(fields.get(obj, "spec"), subject, "spec")
    raw_selector = fields.get(spec, "selector")
    # policy/v1: a missing selector selects no pod, an empty one every pod of the namespace.
    selector = None if raw_selector is None else parse_label_selector(raw_selector, subject, "spec.selector")
    values: dict[str, str] = {}
    for name in ("minAvailable", "maxUnavailable"):
        raw = fields.get(spec, name)
        if raw is None:
            continue
        try:
            values[name] = check_budget_value(raw)
        except ValueError as exc:
            raise subject.error(f"spec.{name}", str(exc)) from None
    if len(values) > 1:
        raise subject.error("spec", "minAvailable and maxUnavailable are both set; a budget has one of them")
    status = fields.get(obj, "status")
    allowed: int | None = None
    if isinstance(status, Mapping):
        observed = fields.get(status, "observedGeneration")
        generation = fields.get(meta, "generation")
        current = isinstance(observed, int) and (not isinstance(generation, int) or observed >= generation)
        raw_allowed = fields.get(status, "disruptionsAllowed")
        if current and raw_allowed is not None:
            if isinstance(raw_allowed, bool) or not isinstance(raw_allowed, int):
                raise subject.error("status.disruptionsAllowed", f"{quoted(raw_allowed)} is not an integer")
            allowed = raw_allowed
    return DisruptionBudget(
        namespace=subject.namespace,
        name=subject.name,
        selector=selector if selector is not None else _NOTHING,
        min_available=values.get("minAvailable", ""),
        max_unavailable=values.get("maxUnavailable", ""),
        disruptions_allowed=allowed,
    )


# Selects no pod: a label no pod can carry (a NUL is not allowed in label keys).
_NOTHING = LabelSelector(match_labels=(("\x00phalanx/no-selector", ""),))
