"""GPU sharing: pods that take a share of one GPU, and whole-GPU pods, placed on individual devices.

A node's `nvidia.com/gpu: G` becomes G device columns (`phalanx.dev/gpu-device-<i>`, 1000 milli each)
plus an aggregate `phalanx.dev/gpu-share` capacity of G whole GPUs. A pod asks either for whole GPUs
(`nvidia.com/gpu: k`: k devices that are entirely free) or for a share of one GPU
(`phalanx.dev/gpu-share: 300m`: one device with 30% free). Counting GPUs per device, not per node, is
what keeps two 60% pods off one GPU and a whole-GPU pod off a device a share already uses: exactly the
fragmentation the FGD paper measures. The chosen devices become part of what the pod holds, so the
Redis transaction checks them like any other resource.
"""

from __future__ import annotations

import weakref
from collections import Counter

import numpy as np

from phalanx.framework.masks import everywhere
from phalanx.framework.plugin import PodRequest
from phalanx.framework.snapshot import Snapshot
from phalanx.model.gpu import DEVICE_PREFIX, GPU, GPU_SHARE, WHOLE, device
from phalanx.model.objects import NodeInfo, Resources


def with_gpu_devices(node: NodeInfo) -> NodeInfo:
    """The node with one column per GPU device and the aggregate share capacity (idempotent)."""
    gpus = node.allocatable.get(GPU, 0) // WHOLE
    if gpus <= 0 or device(0) in node.allocatable:
        return node
    alloc = dict(node.allocatable)
    alloc[GPU_SHARE] = gpus * WHOLE
    for i in range(gpus):
        alloc[device(i)] = WHOLE
    return NodeInfo(node.name, alloc, node.labels, node.taints, node.unschedulable)


_DEVICE_COLUMNS: "weakref.WeakKeyDictionary[Snapshot, tuple[int, np.ndarray]]" = weakref.WeakKeyDictionary()


def device_columns(snap: Snapshot) -> np.ndarray:
    """The snapshot's GPU device columns in device order; found once per generation (the columns change
    only with the nodes), not on every pod."""
    entry = _DEVICE_COLUMNS.get(snap)
    if entry is None or entry[0] != snap.generation:
        names = sorted(
            (c for c in snap.column if c.startswith(DEVICE_PREFIX)), key=lambda c: int(c[len(DEVICE_PREFIX) :])
        )
        entry = (snap.generation, np.array([snap.column[c] for c in names], dtype=np.intp))
        _DEVICE_COLUMNS[snap] = entry
    return entry[1]


def _wants(req: PodRequest) -> tuple[int, int]:
    """(whole GPUs, share of one GPU in milli) the pod asks for."""
    return req.pod.requests.get(GPU, 0) // WHOLE, req.pod.requests.get(GPU_SHARE, 0)


class GPUShare:
    name = "GPUShare"

    def prepare_node(self, node: NodeInfo) -> NodeInfo:
        return with_gpu_devices(node)  # GPUs are placed device by device

    def filter(self, req: PodRequest, snap: Snapshot) -> np.ndarray:
        whole, share = _wants(req)
        if not whole and not share:
            return everywhere(len(snap))
        cols = device_columns(snap)
        if cols.size == 0:
            return np.zeros(len(snap), dtype=bool)
        free = snap.cap[:, cols] - snap.used[:, cols]
        ok = np.ones(len(snap), dtype=bool)
        if whole:
            ok &= (free >= WHOLE).sum(axis=1) >= whole
        if share:
            ok &= (free >= share).any(axis=1)
        return ok

    def explain(self, req: PodRequest, snap: Snapshot, rejected: np.ndarray) -> Counter[str]:
        whole, share = _wants(req)
        if whole:
            reason = f"node(s) had fewer than {whole} entirely free GPU(s)"
        else:
            reason = f"node(s) had no GPU with {share / WHOLE:g} of it free"
        return Counter({reason: int(rejected.sum())})

    def assign(self, req: PodRequest, snap: Snapshot, node_index: int) -> Resources:
        """Picks the devices: whole GPUs take the first free devices; a share takes the fullest device
        it fits on (best fit), leaving whole devices free for whole-GPU pods. A pod found bound where too
        few devices are free (the filter never lets the scheduler's own pods there) takes those that are."""
        whole, share = _wants(req)
        if not whole and not share:
            return {}
        cols = device_columns(snap)
        free = snap.cap[node_index, cols] - snap.used[node_index, cols]
        names = [snap.resources[c] for c in cols]
        out: Resources = {}
        if whole:
            for j in np.flatnonzero(free >= WHOLE)[:whole].tolist():
                out[names[j]] = WHOLE
                free[j] = 0
        if share:
            fits = np.flatnonzero(free >= share)
            if fits.size:  # none only for a pod found bound on a full node: it keeps no device then
                j = int(fits[np.argmin(free[fits])])
                out[names[j]] = out.get(names[j], 0) + share
        return out
