"""The scheduler's in-memory view of the cluster: nodes as rows, resources as columns (numpy).

Filtering and scoring work on whole columns at once, so one pod costs a few vector operations over all
nodes instead of a Python loop per node. Redis stays the source of truth; this snapshot is refreshed from
it at start and after a commit conflict.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np

from phalanx.framework.holds import CapacityHold
from phalanx.framework.masks import everywhere
from phalanx.model.gpu import DEVICE_PREFIX, GPU, gpu_milli
from phalanx.model.objects import NodeInfo, Placement, PodInfo, Resources
from phalanx.model.policies import job_ordering

# What a DRF share is counted over: cpu, memory and GPUs (whole and shared, in milli-units).
SHARE_RESOURCES = ("cpu", "memory", "gpu")


class Snapshot:
    def __init__(self) -> None:
        self.nodes: list[NodeInfo] = []
        self.index: dict[str, int] = {}
        self.resources: list[str] = []
        self.column: dict[str, int] = {}
        self.cap = np.zeros((0, 0), dtype=np.int64)
        self.used = np.zeros((0, 0), dtype=np.int64)
        self.generation = 0  # bumps when nodes change, invalidating cached static masks
        self._static_masks: dict[tuple[str, Placement], np.ndarray] = {}
        # Which pods hold capacity where (those reserved with their pod): what plugins that look at other
        # pods (inter-pod affinity, topology spread, a job's own pods) read. Keyed by node name, so a
        # rebuild of the rows keeps it.
        self.pods_by_node: dict[str, dict[str, PodInfo]] = {}
        self._gang_nodes: dict[str, Counter[str]] = {}
        # What each tenant's tracked pods hold (SHARE_RESOURCES order), for DRF. A tenant whose pods all
        # left stays, at zero, so that the queue hears its share fell.
        self._tenant_held: dict[str, list[int]] = {}
        # Told of every pod tracked (node, pod, 1) or untracked (node, pod, -1), and ("", None, 0) when all
        # are cleared: how indexes over the pods (inter-pod affinity's) stay current without rescans.
        self.pod_listeners: list[Callable[[str, PodInfo | None, int], None]] = []
        self._share_capacity: tuple[int, dict[str, int]] | None = None  # (generation, share_capacity())
        # Nodes kept for starving gangs this round, oldest gang first (set by the scheduler; read by the
        # reservation filter). Empty: none.
        self.reservation: tuple[CapacityHold, ...] = ()
        # Nodes nominated for preempting gangs while their victims terminate (set by the scheduler from the
        # nominations it keeps in Redis; read by the same filter). Empty: none.
        self.nominated: tuple[CapacityHold, ...] = ()

    # -- building --------------------------------------------------------------------------------
    def _ensure_columns(self, names: object) -> None:
        new = [n for n in names if n not in self.column]  # type: ignore[attr-defined]
        if not new:
            return
        for name in new:
            self.column[name] = len(self.resources)
            self.resources.append(name)
        pad = ((0, 0), (0, len(new)))
        self.cap = np.pad(self.cap, pad)
        self.used = np.pad(self.used, pad)

    def set_nodes(self, nodes: list[NodeInfo], used: dict[tuple[str, str], int]) -> None:
        """Rebuilds from scratch; nodes are kept sorted by name so ties break the same way every run."""
        self.nodes = sorted(nodes, key=lambda n: n.name)
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        self.resources, self.column = [], {}
        self.cap = np.zeros((len(self.nodes), 0), dtype=np.int64)
        self.used = np.zeros((len(self.nodes), 0), dtype=np.int64)
        names: set[str] = {r for n in self.nodes for r in n.allocatable} | {r for (_, r) in used}
        self._ensure_columns(sorted(names))
        for i, node in enumerate(self.nodes):
            for r, v in node.allocatable.items():
                self.cap[i, self.column[r]] = v
        self.load_used(used)
        self._changed()

    def load_used(self, used: dict[tuple[str, str], int]) -> None:
        self._ensure_columns(sorted({r for (_, r) in used}))
        self.used[:] = 0
        for (node, r), v in used.items():
            i = self.index.get(node)
            if i is not None:
                self.used[i, self.column[r]] = v

    def upsert_nodes(self, nodes: list[NodeInfo]) -> None:
        by_name = {n.name: n for n in self.nodes}
        used = self.used_map()
        for n in nodes:
            by_name[n.name] = n
        self.set_nodes(list(by_name.values()), used)

    def remove_nodes(self, names: list[str]) -> None:
        gone = set(names)
        for name in gone:
            for pod in list(self.pods_by_node.get(name, {}).values()):
                self.untrack_pod(name, pod)
        used = {k: v for k, v in self.used_map().items() if k[0] not in gone}
        self.set_nodes([n for n in self.nodes if n.name not in gone], used)

    def used_map(self) -> dict[tuple[str, str], int]:
        out: dict[tuple[str, str], int] = {}
        rows, cols = np.nonzero(self.used)
        for i, j in zip(rows.tolist(), cols.tolist()):
            out[(self.nodes[i].name, self.resources[j])] = int(self.used[i, j])
        return out

    def _changed(self) -> None:
        self.generation += 1
        self._static_masks.clear()

    # -- queries ---------------------------------------------------------------------------------
    def request_vector(self, requests: Resources) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """(column indices, amounts, unknown resources) of a pod's non-zero requests."""
        cols: list[int] = []
        amounts: list[int] = []
        unknown: list[str] = []
        # Sorted: a protobuf map's order differs between processes, and the order in which scores sum
        # their resources decides ties, so it must not depend on it.
        for r, v in sorted(requests.items()):
            if v <= 0:
                continue
            j = self.column.get(r)
            if j is None:
                unknown.append(r)
            else:
                cols.append(j)
                amounts.append(v)
        return np.array(cols, dtype=np.intp), np.array(amounts, dtype=np.int64), unknown

    def static_mask(self, plugin: str, placement: Placement, compute: Callable[[], np.ndarray]) -> np.ndarray:
        key = (plugin, placement)
        mask = self._static_masks.get(key)
        if mask is None:
            mask = compute()
            if mask.all():  # rejects nothing: the shared mask the framework skips
                mask = everywhere(len(mask))
            self._static_masks[key] = mask
        return mask

    def reserve(self, node_index: int, requests: Resources, sign: int = 1, pod: PodInfo | None = None) -> None:
        """Adds (sign 1) or takes back (sign -1) what a pod holds on a node; with `pod`, the pod itself is
        tracked there too (see pods_by_node)."""
        self._ensure_columns(sorted(r for r in requests if r not in self.column))
        for r, v in requests.items():
            self.used[node_index, self.column[r]] += sign * v
        if pod is not None:
            node = self.nodes[node_index].name
            if sign > 0:
                self.track_pod(node, pod)
            else:
                self.untrack_pod(node, pod)

    # -- pods on nodes ---------------------------------------------------------------------------
    def clear_pods(self) -> None:
        self.pods_by_node.clear()
        self._gang_nodes.clear()
        for held in self._tenant_held.values():
            held[:] = [0, 0, 0]
        for listener in self.pod_listeners:
            listener("", None, 0)

    def _hold(self, pod: PodInfo, sign: int) -> None:
        held = self._tenant_held.setdefault(job_ordering(pod)[0], [0, 0, 0])
        r = pod.requests
        held[0] += sign * r.get("cpu", 0)
        held[1] += sign * r.get("memory", 0)
        held[2] += sign * gpu_milli(r)

    def track_pod(self, node: str, pod: PodInfo) -> None:
        """Records `pod` as held on `node` (no capacity changes: see reserve)."""
        on_node = self.pods_by_node.setdefault(node, {})
        if pod.key in on_node:
            return
        on_node[pod.key] = pod
        self._hold(pod, 1)
        for listener in self.pod_listeners:
            listener(node, pod, 1)
        if pod.gang:
            self._gang_nodes.setdefault(pod.gang, Counter())[node] += 1

    def untrack_pod(self, node: str, pod: PodInfo) -> None:
        on_node = self.pods_by_node.get(node)
        if not on_node:
            return
        tracked = on_node.pop(pod.key, None)
        if tracked is None:
            return
        self._hold(tracked, -1)  # what was counted when it came, whatever copy of it leaves
        for listener in self.pod_listeners:
            listener(node, tracked, -1)
        if not on_node:
            del self.pods_by_node[node]
        counts = self._gang_nodes.get(pod.gang) if pod.gang else None
        if counts is not None:
            counts[node] -= 1
            if counts[node] <= 0:
                del counts[node]
            if not counts:
                del self._gang_nodes[pod.gang]

    def pods_on(self, node_index: int) -> dict[str, PodInfo]:
        """The tracked pods on the node at row `node_index`, by key."""
        return self.pods_by_node.get(self.nodes[node_index].name, {})

    def gang_pod_counts(self, gang: str) -> np.ndarray:
        """How many tracked pods of `gang` each node row holds."""
        counts = np.zeros(len(self.nodes), dtype=np.int64)
        for node, n in self._gang_nodes.get(gang, {}).items():
            i = self.index.get(node)
            if i is not None:
                counts[i] = n
        return counts

    def share_capacity(self) -> dict[str, int]:
        """The cluster's cpu, memory and GPU milli-units (devices, or the GPU column of unprepared nodes).
        Asked before every pop, and capacity changes only with the nodes: summed once per generation."""
        cached = self._share_capacity
        if cached is not None and cached[0] == self.generation:
            return dict(cached[1])
        total = self.cap.sum(axis=0)
        devices = [j for r, j in self.column.items() if r.startswith(DEVICE_PREFIX)]
        gpu = int(total[devices].sum()) if devices else int(total[self.column[GPU]]) if GPU in self.column else 0
        pick = {r: int(total[self.column[r]]) if r in self.column else 0 for r in ("cpu", "memory")}
        capacity = {**pick, "gpu": gpu}
        self._share_capacity = (self.generation, capacity)
        return dict(capacity)

    def tenant_shares(self, capacity: dict[str, int] | None = None) -> dict[str, float]:
        """Each tenant's dominant share: the largest fraction of the cluster's cpu, memory or GPUs its pods
        hold (DRF). Resources the cluster lacks do not count."""
        cap = capacity or self.share_capacity()
        totals = [cap[r] for r in SHARE_RESOURCES]
        return {
            tenant: min(1.0, max((h / t for h, t in zip(held, totals) if t > 0), default=0.0))
            for tenant, held in self._tenant_held.items()
        }

    def free_total(self) -> dict[str, int]:
        free = (self.cap - self.used).clip(min=0).sum(axis=0)
        return {r: int(free[j]) for r, j in self.column.items()}

    def __len__(self) -> int:
        return len(self.nodes)
