"""What a pod asks its node for, computed from its containers as kube-scheduler does."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from phalanx.intake import fields
from phalanx.intake.errors import Subject
from phalanx.model.objects import Resources
from phalanx.model.quantity import add

POD_SLOT = 1000  # every pod takes one of the node's "pods" (milli-units, like every resource)


def pod_requests(spec: Mapping[str, Any], subject: Subject) -> Resources:
    """What the scheduler must reserve for the pod, computed as kube-scheduler does.

    App containers run together, so their requests add up; init containers run one at a time before
    them, so only the largest counts. Sidecars (init containers with restartPolicy Always) keep running,
    so they add to everything started after them. Pod overhead (runtime cost) comes on top.
    """
    app = _sum(
        _container_requests(container, subject, f"spec.containers[{i}]")
        for i, container in enumerate(fields.sequence(fields.get(spec, "containers"), subject, "spec.containers"))
    )
    sidecars: Resources = {}
    init_peak: Resources = {}
    init_containers = fields.sequence(fields.get(spec, "initContainers"), subject, "spec.initContainers")
    for i, container in enumerate(init_containers):
        own = _container_requests(container, subject, f"spec.initContainers[{i}]")
        if fields.get(container, "restartPolicy") == "Always":
            sidecars = _sum([sidecars, own])
            init_peak = _max(init_peak, sidecars)
        else:
            init_peak = _max(init_peak, _sum([sidecars, own]))
    total = _max(_sum([app, sidecars]), init_peak)
    total = _sum([total, fields.resource_list(fields.get(spec, "overhead"), subject, "spec.overhead")])
    total["pods"] = POD_SLOT
    return fields.checked_total(total, subject, "spec.containers[*].resources.requests")


def _container_requests(raw: Any, subject: Subject, field: str) -> Resources:
    container = fields.mapping(raw, subject, field)
    resources = fields.mapping(fields.get(container, "resources"), subject, f"{field}.resources")
    requests = fields.resource_list(fields.get(resources, "requests"), subject, f"{field}.resources.requests")
    limits = fields.resource_list(fields.get(resources, "limits"), subject, f"{field}.resources.limits")
    # Kubernetes defaults a missing request to the limit (GPU pods usually give only limits).
    return {**limits, **requests}


def _sum(parts: Iterable[Resources]) -> Resources:
    out: Resources = {}
    for part in parts:
        add(out, part)
    return out


def _max(a: Resources, b: Resources) -> Resources:
    return {name: max(a.get(name, 0), b.get(name, 0)) for name in {**a, **b}}
