"""One read of a trial's pods and nodes from the API server, reduced to what the checks need.

Only objects carrying the trial's label are read, so pods of other trials (other schedulers) never count.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from phalanx.model.keys import KOORD_MIN_AVAILABLE, KOORD_NAME
from phalanx.model.quantity import QuantityError, parse_quantity
from phalanx.model.status import TERMINAL_POD_PHASES

TRIAL_LABEL = "chaos.phalanx.dev/trial"


@dataclass(frozen=True)
class PodView:
    namespace: str
    name: str
    gang: str  # "<namespace>/<gang name>", "" for a pod outside any gang
    min_available: int
    node: str  # spec.nodeName, "" while unbound
    phase: str
    deleting: bool
    requests: dict[str, int]  # milli-units

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminated(self) -> bool:
        return self.phase in TERMINAL_POD_PHASES

    @property
    def holds_node(self) -> bool:
        """Bound and not finished: what counts against its node's capacity."""
        return bool(self.node) and not self.terminated


@dataclass(frozen=True)
class NodeView:
    name: str
    allocatable: dict[str, int]


@dataclass
class Snapshot:
    at: float  # time.monotonic() when the read began
    pods: dict[str, PodView] = field(default_factory=dict)
    nodes: dict[str, NodeView] = field(default_factory=dict)


def _resources(raw: dict[str, Any] | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, value in (raw or {}).items():
        try:
            out[name] = parse_quantity(value)
        except QuantityError:
            pass
    return out


def pod_requests(spec: dict[str, Any]) -> dict[str, int]:
    """Sum of container requests; a limit stands in for a missing request, as the API server defaults it."""
    total: dict[str, int] = {}
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        merged = {**_resources(res.get("limits")), **_resources(res.get("requests"))}
        for name, milli in merged.items():
            total[name] = total.get(name, 0) + milli
    return total


def pod_view(obj: dict[str, Any]) -> PodView:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    annotations = meta.get("annotations") or {}
    namespace = meta.get("namespace") or ""
    gang_name = annotations.get(KOORD_NAME, "")
    try:
        min_available = int(annotations.get(KOORD_MIN_AVAILABLE, "1"))
    except ValueError:
        min_available = 1
    return PodView(
        namespace=namespace,
        name=meta.get("name") or "",
        gang=f"{namespace}/{gang_name}" if gang_name else "",
        min_available=min_available,
        node=spec.get("nodeName") or "",
        phase=status.get("phase") or "",
        deleting=bool(meta.get("deletionTimestamp")),
        requests=pod_requests(spec),
    )


def node_view(obj: dict[str, Any]) -> NodeView:
    status = obj.get("status") or {}
    return NodeView((obj.get("metadata") or {}).get("name") or "", _resources(status.get("allocatable")))


def read_snapshot(core: Any, trial: str, at: float) -> Snapshot:
    """`core`: a kubernetes.client.CoreV1Api. Pods first, then nodes: nodes do not change mid-trial."""
    selector = f"{TRIAL_LABEL}={trial}"
    pods = json.loads(core.list_pod_for_all_namespaces(label_selector=selector, _preload_content=False).data)
    nodes = json.loads(core.list_node(label_selector=selector, _preload_content=False).data)
    snap = Snapshot(at)
    for obj in pods.get("items") or []:
        view = pod_view(obj)
        snap.pods[view.key] = view
    for obj in nodes.get("items") or []:
        node = node_view(obj)
        snap.nodes[node.name] = node
    return snap
