"""Nodes (dicts in camelCase or `.to_dict()` snake_case) to NodeInfo."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from phalanx.intake import bounds, fields
from phalanx.intake.errors import Subject, quoted
from phalanx.intake.placement import TAINT_EFFECTS
from phalanx.model import limits
from phalanx.model.gpu import GPU
from phalanx.model.objects import NodeInfo, Taint

HOSTNAME_LABEL = "kubernetes.io/hostname"
DEFAULT_MAX_PODS = 110_000  # kubelet's default --max-pods (110), in milli-units


def parse_node(obj: Mapping[str, Any]) -> NodeInfo:
    meta, subject = fields.metadata(obj, "Node", namespaced=False)
    fields.subdomain_name(subject)
    spec = fields.mapping(fields.get(obj, "spec"), subject, "spec")
    labels = fields.string_map(fields.get(meta, "labels"), subject, "metadata.labels")
    # The kubelet always sets it; hand-written nodes often omit it, yet selectors and spread rely on it.
    labels.setdefault(HOSTNAME_LABEL, subject.name)
    bounds.count(labels, subject, "metadata.labels")  # with the hostname added
    return NodeInfo(
        name=subject.name,
        allocatable=_allocatable(obj, subject),
        labels=labels,
        taints=_taints(spec, subject),
        unschedulable=_unschedulable(spec, subject),
    )


def _allocatable(obj: Mapping[str, Any], subject: Subject) -> dict[str, int]:
    status = fields.mapping(fields.get(obj, "status"), subject, "status")
    # Allocatable is capacity minus system reservations; only nodes written by hand lack it.
    where = "status.allocatable" if fields.get(status, "allocatable") else "status.capacity"
    allocatable = fields.resource_list(fields.get(status, where.partition(".")[2]), subject, where)
    if allocatable.get(GPU, 0) > limits.MAX_NODE_GPUS * 1000:
        raise subject.error(
            f"{where}.{GPU}",
            f"{allocatable[GPU] / 1000:g} GPUs is more than a node can have (at most {limits.MAX_NODE_GPUS})",
        )
    allocatable.setdefault("pods", DEFAULT_MAX_PODS)
    bounds.count(allocatable, subject, where)  # with "pods" added
    return allocatable


def _taints(spec: Mapping[str, Any], subject: Subject) -> tuple[Taint, ...]:
    items = fields.sequence(fields.get(spec, "taints"), subject, "spec.taints", limits.MAX_ENTRIES)
    return tuple(_taint(item, subject, f"spec.taints[{i}]") for i, item in enumerate(items))


def _taint(raw: Any, subject: Subject, field: str) -> Taint:
    item = fields.mapping(raw, subject, field)
    key = bounds.length(fields.text(fields.get(item, "key"), subject, f"{field}.key"), subject, f"{field}.key")
    effect = fields.text(fields.get(item, "effect"), subject, f"{field}.effect")
    if not key:
        raise subject.error(f"{field}.key", "is required")
    if effect not in TAINT_EFFECTS:
        raise subject.error(f"{field}.effect", f"{quoted(effect)} is not one of {', '.join(TAINT_EFFECTS)}")
    value = fields.value_text(fields.get(item, "value"), subject, f"{field}.value")
    return Taint(key=key, value=bounds.length(value, subject, f"{field}.value"), effect=effect)


def _unschedulable(spec: Mapping[str, Any], subject: Subject) -> bool:
    value = fields.get(spec, "unschedulable")
    if value is None:
        return False
    if not isinstance(value, bool):
        raise subject.error("spec.unschedulable", f"{quoted(value)} is not true or false")
    return value
