"""GPUFragmentation: place a pod where it leaves the most GPU capacity usable by the pods that arrive.

Spreading (LeastAllocated) strands GPUs: one-GPU pods spread over every node leave no node with eight
free GPUs, and shares spread over every device leave no whole device free. The FGD paper measures the
loss as fragmentation: the free GPU capacity of a node that a pod of the arriving mix could not use
there. This plugin scores a node by how little placing the pod lowers the capacity the mix can use,
which is the same quantity seen from the other side:

    usable(node) = sum over pod shapes t of  p_t * (GPU milli on the node that t could use, 0 if t cannot fit)

where p_t is shape t's share of the recent pods, "could use" counts whole free devices for whole-GPU
shapes and devices with at least the share free for shares, and "fit" includes cpu, memory and the
shape's node constraints (GPU model). The node that loses the least usable capacity wins; among equals,
the one already busiest (so empty nodes stay empty for the large pods to come).

What differs from FGD: the mix is learned online from the pods the scheduler is asked to place (a
production scheduler has no trace to read it from), memory counts as well as cpu, and the packing
tie-break. Computed over unique GPU thresholds and shapes at once with numpy; a pod that asks for no
GPU on a cluster without GPUs costs one check.
"""

from __future__ import annotations

import random
import weakref
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from phalanx.framework.masks import indifferent
from phalanx.framework.plugin import PodRequest
from phalanx.framework.snapshot import Snapshot
from phalanx.model.gpu import GPU, GPU_SHARE, WHOLE
from phalanx.model.objects import Placement, PodInfo
from phalanx.plugins.gpu_share import device_columns
from phalanx.plugins.node_affinity import NodeAffinity, NodeSelector
from phalanx.plugins.taint_toleration import TaintToleration

# Shapes remembered: the mix follows the recent pods, not the whole history.
MIX_MEMORY = 2000
# How the two views of usable capacity mix (see _usable). Of 0.4 to 0.8 (openb lists, 10 seeds each), 0.6 is
# the one ahead of FGD on all five at 100% and 130% demand: 0.5 was level with it on gpushare40 at 130%
# (94.15), 0.6 gives 94.21; 0.4 and 0.7 do worse there at 100%.
ALPHA = 0.6
# Rebuild the shape arrays after this many new pods (a new shape rebuilds at once).
REBUILD_EVERY = 64

Shape = tuple[int, int, int, int, Placement]  # cpu, memory, whole GPUs, share milli, node constraints


def shape_of(pod: PodInfo) -> Shape:
    r = pod.requests
    return (r.get("cpu", 0), r.get("memory", 0), r.get(GPU, 0) // WHOLE, r.get(GPU_SHARE, 0), pod.placement)


@dataclass
class _Mix:
    """The recent pods' shapes, and arrays over them for the vectorised score."""

    counts: Counter[Shape] = field(default_factory=Counter)
    recent: deque[Shape] = field(default_factory=deque)
    since_build: int = 0
    # (snapshot, its generation) the node masks were computed for
    built_for: tuple[Callable[[], Snapshot | None], int] = (lambda: None, -1)
    weight: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))  # share of the recent pods
    threshold_index: np.ndarray = field(default_factory=lambda: np.zeros(0, np.intp))  # shape -> its threshold
    thresholds: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))  # share milli, or 1000
    inv_threshold: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    inv_cpu: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))  # 1 / what one pod asks
    inv_mem: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    inv_whole: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    weight_milli: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))  # weight x GPU milli of a pod
    by_threshold: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))  # threshold x shape
    access: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))  # shape x node: 1 if allowed
    access_class: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # node -> its column's class

    def built_for_snapshot(self, snap: Snapshot) -> bool:
        return self.built_for[0]() is snap and self.built_for[1] == snap.generation

    def see(self, shape: Shape) -> bool:
        """Counts a pod's shape; True when the arrays must be rebuilt."""
        new = shape not in self.counts
        self.counts[shape] += 1
        self.recent.append(shape)
        if len(self.recent) > MIX_MEMORY:
            old = self.recent.popleft()
            self.counts[old] -= 1
            if self.counts[old] <= 0:
                del self.counts[old]
        self.since_build += 1
        return new or self.since_build >= REBUILD_EVERY


class GPUFragmentation:
    name = "GPUFragmentation"

    def __init__(self) -> None:
        self._mix = _Mix()
        self._static = (NodeSelector(), NodeAffinity(), TaintToleration())
        # (the mix's weights it was computed with, the used columns it saw, usable per node)
        self._cache: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    # -- the score ---------------------------------------------------------------------------------
    def score(self, req: PodRequest, snap: Snapshot, candidates: np.ndarray) -> np.ndarray:
        devices = device_columns(snap)
        if devices.size == 0:
            return indifferent(len(candidates))
        shape = shape_of(req.pod)
        if self._mix.see(shape) or not self._mix.built_for_snapshot(snap):
            self._build(snap)
        mix = self._mix
        if not mix.weight.any():  # no GPU shape seen yet
            return indifferent(len(candidates))
        used = snap.used[np.ix_(candidates, devices)]
        cap = snap.cap[np.ix_(candidates, devices)]
        free = cap - used
        cpu_free, mem_free = _free(snap, "cpu", candidates), _free(snap, "memory", candidates)
        before = self._before(snap, devices)[candidates]
        after_free = _after_devices(req, free)
        r = req.pod.requests
        after = self._usable_distinct(after_free, cpu_free - r.get("cpu", 0), mem_free - r.get("memory", 0), candidates)
        loss = before - after  # usable GPU milli the placement takes from the mix (>= what the pod takes)
        # Among nodes that cost the mix the same, the one whose GPUs are already the most used: the mix is
        # learned from the pods seen so far, and keeping whole nodes whole is the safe bet for the rest.
        busy = 1.0 - after_free.sum(axis=1) / np.maximum(cap.sum(axis=1), 1)
        lo, hi = float(loss.min()), float(loss.max())
        if hi - lo < 1e-6:
            return 99.0 + busy
        return (hi - loss) / (hi - lo) * 99.0 + busy

    def _before(self, snap: Snapshot, devices: np.ndarray) -> np.ndarray:
        """usable() of every node as it stands, recomputed only for the rows whose usage changed since the
        last pod (one placement changes one row): half of the score's cost otherwise."""
        cols = np.concatenate([devices, [snap.column[r] for r in ("cpu", "memory") if r in snap.column]])
        used = snap.used[:, cols]
        cached = self._cache
        if cached is None or cached[0] is not self._mix.weight or cached[1].shape != used.shape:
            rows = np.arange(len(snap))
        else:
            rows = np.flatnonzero((cached[1] != used).any(axis=1))
            if rows.size == 0:
                return cached[2]
        values = cached[2].copy() if cached is not None and rows.size < len(snap) else np.zeros(len(snap))
        free = snap.cap[np.ix_(rows, devices)] - snap.used[np.ix_(rows, devices)]
        values[rows] = self._usable_distinct(free, _free(snap, "cpu", rows), _free(snap, "memory", rows), rows)
        self._cache = (self._mix.weight, used.copy(), values)
        return values

    def _usable_distinct(
        self, free: np.ndarray, cpu_free: np.ndarray, mem_free: np.ndarray, rows: np.ndarray
    ) -> np.ndarray:
        """_usable computed once per distinct node state: nodes of one kind in one state (hundreds of empty
        8-GPU nodes early on, the same few partly used shapes later) are worth the same to the mix."""
        key = np.column_stack([free, cpu_free, mem_free, self._mix.access_class[rows]])
        first, inverse = distinct_rows(key)
        if len(first) > 0.8 * len(rows):
            return self._usable(free, cpu_free, mem_free, rows)
        values = self._usable(free[first], cpu_free[first], mem_free[first], rows[first])
        return values[inverse]

    def _usable(self, free: np.ndarray, cpu_free: np.ndarray, mem_free: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Per candidate node: the mix-weighted GPU milli the shapes could still take there (see the module
        docstring), in float32 with the weighted sums as matrix products: this runs for every candidate of
        every GPU pod."""
        mix = self._mix
        f = free.astype(np.float32)
        # pods of GPU threshold h the devices hold (per device for shares), and the milli usable by h.
        per_threshold = np.floor(f[None, :, :] * mix.inv_threshold[:, None, None]).sum(axis=2)
        usable = np.where(f[None, :, :] >= mix.thresholds[:, None, None], f[None, :, :], 0).sum(axis=2)
        by_gpu = np.floor(per_threshold[mix.threshold_index] * mix.inv_whole[:, None])
        by_cpu = np.floor(cpu_free.astype(np.float32)[None, :] * mix.inv_cpu[:, None])
        by_mem = np.floor(mem_free.astype(np.float32)[None, :] * mix.inv_mem[:, None])
        pods = np.minimum(np.minimum(by_gpu, by_cpu), by_mem).clip(min=0) * mix.access[:, rows]
        capacity = mix.weight_milli @ pods
        # FGD's view: every device a shape could use counts once one pod of it fits.
        fgd = ((mix.by_threshold @ (pods > 0).astype(np.float32)) * usable).sum(axis=0)
        return ALPHA * fgd + (1 - ALPHA) * capacity

    def _build(self, snap: Snapshot) -> None:
        mix = self._mix
        mix.since_build = 0
        mix.built_for = (weakref.ref(snap), snap.generation)
        gpu_shapes = [s for s in mix.counts if s[2] > 0 or s[3] > 0]
        total = sum(mix.counts.values())
        f32 = np.float32
        weight = np.array([mix.counts[s] / total for s in gpu_shapes], dtype=f32)
        thresholds = sorted({WHOLE if s[2] > 0 else s[3] for s in gpu_shapes})
        position = {h: i for i, h in enumerate(thresholds)}
        mix.weight = weight
        mix.threshold_index = np.array([position[WHOLE if s[2] > 0 else s[3]] for s in gpu_shapes], dtype=np.intp)
        mix.thresholds = np.array(thresholds, dtype=f32)
        mix.inv_threshold = 1 / mix.thresholds
        # A shape without cpu or memory asks for 1 milli of it: its count is then never the least.
        mix.inv_cpu = np.array([1 / max(s[0], 1) for s in gpu_shapes], dtype=f32)
        mix.inv_mem = np.array([1 / max(s[1], 1) for s in gpu_shapes], dtype=f32)
        mix.inv_whole = np.array([1 / max(s[2], 1) for s in gpu_shapes], dtype=f32)
        mix.weight_milli = weight * np.array([s[2] * WHOLE + s[3] for s in gpu_shapes], dtype=f32)
        mix.by_threshold = np.zeros((len(thresholds), len(gpu_shapes)), dtype=f32)
        mix.by_threshold[mix.threshold_index, np.arange(len(gpu_shapes))] = weight
        rows = []
        for s in gpu_shapes:
            probe = PodRequest(PodInfo("", "", placement=s[4]), np.zeros(0, np.intp), np.zeros(0, np.int64), [])
            mask = np.ones(len(snap), dtype=bool)
            for plugin in self._static:
                mask &= plugin.filter(probe, snap)
            rows.append(mask)
        mix.access = np.array(rows, dtype=f32).reshape(len(gpu_shapes), len(snap))
        # Nodes the mix's shapes may use alike share a class (the same columns of access).
        mix.access_class = np.unique(mix.access.T, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)


# Random odd 64-bit weights: a row's weighted sum (wrapping) is its hash for distinct_rows. Drawn by the
# standard library's generator, already loaded: numpy.random is not imported at all then (17 ms of every
# scheduler's start). Any weights serve: a collision is caught below.
_RNG = random.Random(20261125)
_ROW_HASH = np.array([_RNG.randrange(1, 2**62) | 1 for _ in range(64)], dtype=np.int64)


def distinct_rows(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a row index of each distinct row, each row's distinct row number), as np.unique(axis=0) gives them
    with return_index and return_inverse, found by hashing each row to one integer: np.unique over rows
    sorts them as byte strings, 0.8 ms of a 3 ms GPU pod at 5,000 nodes. A hash collision is caught by
    comparing every row with its representative, and then the exact way is taken."""
    if key.shape[1] <= len(_ROW_HASH):
        with np.errstate(over="ignore"):
            hashed = (key.astype(np.int64, copy=False) * _ROW_HASH[: key.shape[1]]).sum(axis=1)
        _, first, inverse = np.unique(hashed, return_index=True, return_inverse=True)
        if (key[first][inverse] == key).all():
            return first, inverse
    _, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def _free(snap: Snapshot, resource: str, rows: np.ndarray) -> np.ndarray:
    j = snap.column.get(resource)
    if j is None:
        return np.full(len(rows), np.iinfo(np.int64).max // 2)
    return snap.cap[rows, j] - snap.used[rows, j]


def _after_devices(req: PodRequest, free: np.ndarray) -> np.ndarray:
    """The candidates' device free capacity after the pod, with the devices GPUShare.assign would pick:
    the first whole free devices for whole GPUs, the fullest device that fits for a share. (Choosing the
    share's device by the mix's use of what it leaves was tried: no better than best fit on gpushare40.)"""
    whole = req.pod.requests.get(GPU, 0) // WHOLE
    share = req.pod.requests.get(GPU_SHARE, 0)
    after = free.copy()
    if whole:
        is_full = free >= WHOLE
        take = is_full & (np.cumsum(is_full, axis=1) <= whole)
        after[take] = 0
    if share:
        fits = after >= share
        j = np.where(fits, after, np.iinfo(np.int64).max).argmin(axis=1)
        ok = fits[np.arange(len(after)), j]
        after[np.arange(len(after))[ok], j[ok]] -= share
    return after
