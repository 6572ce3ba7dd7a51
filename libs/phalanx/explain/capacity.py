"""Free capacity per node, and which nodes a gang's pods may use, judged by the scheduler's own plugins.

The snapshot is the scheduler's (phalanx.framework.snapshot): node allocatable as capacity, and every
non-terminal pod bound to a node as used, whichever scheduler bound it. GPUs are counted device by device
as the scheduler does (gpu_share), so "free GPUs" means entirely free devices. Filters come from the same
profile the scheduler runs; the node-only ones (cordon, taints, selector, affinity) say which nodes are
out of the question, the resource ones which are too full now.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from phalanx.framework.framework import Framework
from phalanx.framework.plugin import PodRequest
from phalanx.framework.snapshot import Snapshot
from phalanx.model.objects import NodeInfo, PodInfo, Resources
from phalanx.model.quantity import format_milli
from phalanx.plugins.taint_toleration import tolerates
from phalanx.scheduling.hints import STATIC_FILTERS, node_free, pod_needs

# How each node-only filter's refusal reads in an explanation.
FILTER_REASONS = {
    "NodeUnschedulable": "cordoned (spec.unschedulable)",
    "TaintToleration": "taint not tolerated",
    "NodeSelector": "nodeSelector does not match",
    "NodeAffinity": "required node affinity does not match",
}
TOO_SMALL = "too small even when empty"


@dataclass(slots=True)
class Exclusion:
    """Nodes one filter keeps a pod off (each node counted at the first filter refusing it)."""

    filter: str
    reason: str
    nodes: list[str]
    details: dict[str, str] = field(default_factory=dict)  # node -> what exactly (the taint, the label)


@dataclass(slots=True)
class Eligibility:
    nodes: list[str]  # nodes the pod could use if they were empty enough
    exclusions: list[Exclusion]


class Capacity:
    def __init__(self, nodes: Sequence[NodeInfo], framework: Framework) -> None:
        self.framework = framework
        self.snap = Snapshot()
        self.snap.set_nodes(framework.prepare_nodes(nodes), {})  # GPUs device by device, as the scheduler
        self.held: dict[str, tuple[int, Resources]] = {}  # pod key -> (node row, what it holds there)
        self._assigners = [f for f in framework.filters if hasattr(f, "assign")]

    def hold(self, key: str, pod: PodInfo, node: str) -> None:
        """Counts a bound pod against its node; GPU devices are picked as the scheduler would pick them."""
        i = self.snap.index.get(node)
        if i is None or key in self.held:
            return
        held = dict(pod.requests)
        for plugin in self._assigners:
            try:
                held.update(plugin.assign(PodRequest.of(pod, self.snap), self.snap, i))
            except ValueError:  # an over-committed node has no device left to pick: count the aggregate only
                pass
        self.snap.reserve(i, held)
        self.held[key] = (i, held)

    def node_names(self) -> list[str]:
        return [n.name for n in self.snap.nodes]

    # -- which nodes ---------------------------------------------------------------------------------
    def eligibility(self, pod: PodInfo) -> Eligibility:
        """The nodes that could take the pod if they had room, and why the others cannot."""
        req = PodRequest.of(pod, self.snap)
        alive = np.ones(len(self.snap), dtype=bool)
        exclusions: list[Exclusion] = []
        for plugin in self.framework.filters:
            if plugin.name not in STATIC_FILTERS:
                continue
            mask = plugin.filter(req, self.snap)
            rejected = alive & ~mask
            if rejected.any():
                names = self._names(rejected)
                reason = FILTER_REASONS.get(plugin.name) or next(iter(plugin.explain(req, self.snap, rejected)), "")
                exclusions.append(Exclusion(plugin.name, reason, names, self._details(plugin.name, pod, names)))
            alive &= mask
        small = self._too_small(pod, alive)
        if small:
            exclusions.append(Exclusion("NodeResourcesFit", TOO_SMALL, list(small), small))
            alive &= ~np.isin(np.arange(len(self.snap)), [self.snap.index[n] for n in small])
        return Eligibility(self._names(alive), exclusions)

    def _names(self, mask: np.ndarray) -> list[str]:
        return [self.snap.nodes[i].name for i in np.flatnonzero(mask).tolist()]

    def _details(self, plugin: str, pod: PodInfo, names: list[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for name in names:
            node = self.snap.nodes[self.snap.index[name]]
            if plugin == "TaintToleration":
                untolerated = [
                    t
                    for t in node.taints
                    if t.effect in ("NoSchedule", "NoExecute") and not tolerates(pod.placement.tolerations, t)
                ]
                out[name] = ", ".join(f"{t.key}{'=' + t.value if t.value else ''}:{t.effect}" for t in untolerated)
            elif plugin == "NodeSelector":
                wrong = [f"{k}={v}" for k, v in pod.placement.node_selector if node.labels.get(k) != v]
                out[name] = "wants " + ", ".join(wrong)
        return out

    def _too_small(self, pod: PodInfo, alive: np.ndarray) -> dict[str, str]:
        """Nodes whose whole allocatable is below the pod's requests: no amount of waiting helps there."""
        out: dict[str, str] = {}
        for i in np.flatnonzero(alive).tolist():
            node = self.snap.nodes[i]
            lacking = [
                f"{r} {format_milli(r, node.allocatable.get(r, 0))} < {format_milli(r, v)}"
                for r, v in sorted(pod.requests.items())
                if v > node.allocatable.get(r, 0)
            ]
            if lacking:
                out[node.name] = ", ".join(lacking)
        return out

    # -- how much room -------------------------------------------------------------------------------
    def free(self, node: str, snap: Snapshot | None = None) -> dict[str, int]:
        """The node's free capacity as the filters compare it (whole free GPUs for nvidia.com/gpu)."""
        s = snap or self.snap
        return node_free(s, s.index[node])

    def copy(self) -> Snapshot:
        return copy.deepcopy(self.snap)

    def release(self, snap: Snapshot, keys: Iterable[str]) -> None:
        for key in keys:
            held = self.held.get(key)
            if held is not None:
                snap.reserve(held[0], held[1], sign=-1)

    def place(self, pods: Sequence[PodInfo], snap: Snapshot | None = None) -> int:
        """How many of `pods` the scheduler's filters and scores would place, one after the other."""
        s = copy.deepcopy(snap or self.snap)
        placed = 0
        for pod in pods:
            res = self.framework.place(pod, s)
            if res.node_index is None:
                continue
            s.reserve(res.node_index, res.requests)
            placed += 1
        return placed


def needs_of(pod: PodInfo) -> dict[str, int]:
    """What one node must have free for the pod (the hints' terms: GPUs as whole free devices); the pod
    slot every pod takes is left out, it is seldom what is short."""
    return {r: v for r, v in pod_needs(pod).items() if r != "pods"}
