"""The scheduler's side of queueing hints (see phalanx.queueing.hints): why a pod found no node, and what
a release frees, both in the same terms.

Resources are compared per node as the filters do: NodeResourcesFit compares each requested resource to
the node's free amount; GPUShare wants whole GPUs entirely free, or a share of one GPU. So a node's free
capacity is reported with `nvidia.com/gpu` as its entirely free GPUs (x1000) and `phalanx.dev/gpu-share`
as the free part of all its GPUs together, and a pod needs whole GPUs (x1000) and its share. "The node has
at least what the pod needs" is then never stricter than the filters (exact for whole GPUs and every other
resource, looser for shares), and "it holds k such pods" (free // need, per resource) never undercounts.
Released resources are named the same way (a GPU device column or a share counts as `nvidia.com/gpu`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from phalanx.framework.framework import Framework
from phalanx.framework.plugin import PodRequest
from phalanx.framework.snapshot import Snapshot
from phalanx.model.gpu import DEVICE_PREFIX, GPU, GPU_SHARE, WHOLE
from phalanx.model.objects import PodInfo
from phalanx.queueing.hints import FreedCapacity, Hint

# Filters whose verdict depends only on the node object and the pod (a node change alone can alter it).
STATIC_FILTERS = frozenset({"NodeUnschedulable", "NodeSelector", "NodeAffinity", "TaintToleration"})
# Filters whose verdict depends on free capacity.
RESOURCE_FILTERS = frozenset({"NodeResourcesFit", "GPUShare"})
# A hint names at most this many allowed nodes; beyond, it allows any node (safe, and keeps verdicts small).
MAX_HINT_NODES = 512


def resource_name(resource: str) -> str:
    """The name a released or short resource goes by in hints (all GPU accounting is nvidia.com/gpu)."""
    return GPU if resource == GPU_SHARE or resource.startswith(DEVICE_PREFIX) else resource


def pod_needs(pod: PodInfo) -> dict[str, int]:
    """What one node must have free for the pod, in the terms of `node_free`."""
    out: dict[str, int] = {}
    for r, v in pod.requests.items():
        if v <= 0 or r.startswith(DEVICE_PREFIX):
            continue
        if r == GPU:
            v = v // WHOLE * WHOLE  # GPUShare wants whole devices; the remainder is NodeResourcesFit's, not checked
            if v <= 0:
                continue
        out[r] = v
    return out


def smallest_needs(pods: Iterable[PodInfo]) -> dict[str, int]:
    """Per resource, the least any of `pods` needs (a node short of this fits none of them)."""
    out: dict[str, int] | None = None
    for p in pods:
        needs = pod_needs(p)
        out = needs if out is None else {r: min(v, needs[r]) for r, v in out.items() if r in needs}
    return out or {}


def free_columns(snap: Snapshot, rows: np.ndarray | slice = slice(None)) -> dict[str, np.ndarray]:
    """Free capacity of the nodes `rows` (all by default) as hints compare it, one vector per resource."""
    free = (snap.cap[rows] - snap.used[rows]).clip(min=0)
    out: dict[str, np.ndarray] = {}
    devices: list[int] = []
    for j, r in enumerate(snap.resources):
        if r.startswith(DEVICE_PREFIX):
            devices.append(j)
        elif r != GPU_SHARE:
            out[r] = free[:, j]
    whole = out.get(GPU)
    whole = whole // WHOLE * WHOLE if whole is not None else np.zeros(free.shape[0], dtype=np.int64)
    share = np.zeros(free.shape[0], dtype=np.int64)
    if devices:
        has_devices = snap.cap[rows][:, devices].any(axis=1)
        dev_free = free[:, devices]
        whole = np.where(has_devices, (dev_free >= WHOLE).sum(axis=1) * WHOLE, whole)
        share = dev_free.sum(axis=1)
    out[GPU] = whole
    out[GPU_SHARE] = share
    return out


def node_free(snap: Snapshot, i: int) -> dict[str, int]:
    """Node i's free capacity as hints compare it (see the module's docstring)."""
    return {r: int(v[0]) for r, v in free_columns(snap, np.array([i])).items()}


def node_slots(snap: Snapshot, needs: Mapping[str, int], allowed: Iterable[str] = ()) -> dict[str, int]:
    """Per node (of `allowed`, or all), how many pods of `needs` each it holds; nodes holding none left out."""
    if not needs:
        return {}
    names = list(allowed)
    rows = (
        np.array([snap.index[n] for n in names if n in snap.index], dtype=np.intp)
        if names
        else np.arange(len(snap), dtype=np.intp)
    )
    if rows.size == 0:
        return {}
    free = free_columns(snap, rows)
    count = np.full(rows.size, 1 << 30, dtype=np.int64)
    for r, amount in needs.items():
        if amount > 0:
            count = np.minimum(count, free.get(r, np.zeros(rows.size, dtype=np.int64)) // amount)
    return {snap.nodes[i].name: int(k) for i, k in zip(rows.tolist(), count.tolist()) if k > 0}


def with_slots(hint: Hint | None, snap: Snapshot, pods: int) -> Hint | None:
    """A Strict gang's hint, completed with how many of its `pods` (failed together) each node holds now;
    call it once the gang holds nothing any more."""
    if hint is None or pods <= 1 or not hint.needs or hint.node_change_only:
        return hint
    needs = dict(hint.needs)
    return Hint.of(needs, hint.insufficient, hint.nodes, False, pods, node_slots(snap, needs, hint.nodes))


def note_release(freed: FreedCapacity | None, snap: Snapshot, node: str, requests: Mapping[str, int]) -> None:
    """Records in `freed` that `requests` were just given back on `node` (call it after the snapshot
    has given them back)."""
    if freed is None:
        return
    i = snap.index.get(node)
    if i is None:  # the node is gone: nothing was freed that a pod could use
        return
    freed.add(node, {resource_name(r) for r, v in requests.items() if v > 0}, node_free(snap, i))


def refresh_freed(freed: FreedCapacity, snap: Snapshot) -> None:
    """Sets each node's free amounts in `freed` to the node's current ones (just before it is sent)."""
    if freed:
        freed.refresh(lambda node: node_free(snap, i) if (i := snap.index.get(node)) is not None else None)


def rejection_hint(framework: Framework, failed: PodInfo, snap: Snapshot, unit: Iterable[PodInfo] = ()) -> Hint | None:
    """Why `failed` found no node, as a hint; None when it cannot say (any event may help).

    `unit`: the other pods answered with it (a gang's): the freed node must fit at least the smallest of
    them. Call it on the snapshot the failure was decided on (a gang's earlier pods still reserved)."""
    if len(snap) == 0:
        return Hint(node_change_only=True)
    req = PodRequest.of(failed, snap)
    if req.unknown:  # a resource no node offers: only a node can bring it
        return Hint(node_change_only=True)
    allowed = np.ones(len(snap), dtype=bool)
    resource_plugins = []
    for plugin in framework.filters:
        if plugin.name in RESOURCE_FILTERS:
            resource_plugins.append(plugin)
        elif plugin.name in STATIC_FILTERS:
            allowed &= plugin.filter(req, snap)
        elif not plugin.filter(req, snap).all():
            return None  # a filter this module does not know rejected nodes
    if not allowed.any():
        return Hint(node_change_only=True)
    short: set[str] = set()
    for plugin in resource_plugins:
        rejected = allowed & ~plugin.filter(req, snap)
        if not rejected.any():
            continue
        if plugin.name == "GPUShare":
            short.add(GPU)
        elif req.cols.size:
            free = snap.cap[rejected][:, req.cols] - snap.used[rejected][:, req.cols]
            lacking = (free < req.amounts).any(axis=0)
            short.update(resource_name(snap.resources[c]) for c in req.cols[lacking].tolist())
    if not short:
        return None  # nothing capacity-related explains it: do not guess
    pods = [failed, *unit]
    nodes: list[str] = []
    if not allowed.all() and all(p.placement == failed.placement for p in pods):
        names = [snap.nodes[i].name for i in np.flatnonzero(allowed).tolist()]
        if len(names) <= MAX_HINT_NODES:
            nodes = names
    return Hint.of(smallest_needs(pods), short, nodes)


def shortfall_hint(short: Iterable[str]) -> Hint:
    """A gang whose minResources exceed what the whole cluster has free: any release of those may help."""
    return Hint.of(insufficient={resource_name(r) for r in short})
