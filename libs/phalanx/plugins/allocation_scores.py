"""Score plugins over the requested resources: LeastAllocated spreads, MostAllocated bin-packs,
and MinFragment (seed 001) prefers nodes whose cpu and memory use stay balanced."""

from __future__ import annotations

import weakref

import numpy as np

from phalanx.framework.masks import indifferent
from phalanx.framework.plugin import PodRequest
from phalanx.framework.snapshot import Snapshot


def _utilisation_after(
    req: PodRequest, snap: Snapshot, candidates: np.ndarray, cols: np.ndarray, amounts: np.ndarray
) -> list[np.ndarray]:
    """Per requested column, each candidate's utilisation after placing the pod, clipped to [0, 1] (a
    node without the resource counts as full). Column by column, with a plain slice when every node is a
    candidate: gathering a (candidates x columns) block with np.ix_ cost more than the arithmetic."""
    everyone = len(candidates) == len(snap) and np.array_equal(candidates, _arange(len(snap)))
    out = []
    with np.errstate(divide="ignore", invalid="ignore"):
        for j, amount in zip(cols.tolist(), amounts.tolist()):
            cap, every_node_has_it = _float_capacity(snap, j)
            if not everyone:
                cap = cap[candidates]
            used = (snap.used[:, j] if everyone else snap.used[candidates, j]) + amount
            ratio = used / cap if every_node_has_it else np.where(cap > 0, used / cap, 1.0)
            out.append(np.clip(ratio, 0.0, 1.0))
    return out


_FLOAT_CAPACITY: "weakref.WeakKeyDictionary[Snapshot, tuple[int, dict[int, tuple[np.ndarray, bool]]]]" = (
    weakref.WeakKeyDictionary()
)


def _float_capacity(snap: Snapshot, j: int) -> tuple[np.ndarray, bool]:
    """Column j of the capacity as floats, and whether every node has some of it (then np.where picks
    used / cap everywhere and can be skipped). Capacity changes only with the nodes, which bump the
    snapshot's generation, so this is computed once per node change rather than once per pod."""
    entry = _FLOAT_CAPACITY.get(snap)
    if entry is None or entry[0] != snap.generation:
        entry = (snap.generation, {})
        _FLOAT_CAPACITY[snap] = entry
    column = entry[1].get(j)
    if column is None:
        cap = snap.cap[:, j].astype(np.float64)
        column = entry[1][j] = (cap, bool((cap > 0).all()))
    return column


def _row_mean(columns: list[np.ndarray]) -> np.ndarray:
    """What np.mean(axis=1) of the stacked columns gives, bit for bit: for fewer than 8 values per row numpy
    sums them left to right, as here (a reduction along the short axis of an (n, k) block is slow)."""
    if len(columns) >= 8:
        return np.column_stack(columns).mean(axis=1)
    total = columns[0]
    for c in columns[1:]:
        total = total + c
    return total / len(columns)


_ARANGE: list[np.ndarray] = [np.arange(0)]


def _arange(n: int) -> np.ndarray:
    if len(_ARANGE[0]) != n:
        _ARANGE[0] = np.arange(n)
    return _ARANGE[0]


def _scored_columns(req: PodRequest, snap: Snapshot) -> tuple[np.ndarray, np.ndarray]:
    """The requested resources, without the pod-slot count that every pod asks for (as upstream)."""
    pods = snap.column.get("pods", -1)
    keep = req.cols != pods
    return req.cols[keep], req.amounts[keep]


class LeastAllocated:
    name = "LeastAllocated"

    def score(self, req: PodRequest, snap: Snapshot, candidates: np.ndarray) -> np.ndarray:
        cols, amounts = _scored_columns(req, snap)
        if cols.size == 0:
            return indifferent(len(candidates))
        return _row_mean([1.0 - u for u in _utilisation_after(req, snap, candidates, cols, amounts)]) * 100.0


class MostAllocated:
    name = "MostAllocated"

    def score(self, req: PodRequest, snap: Snapshot, candidates: np.ndarray) -> np.ndarray:
        cols, amounts = _scored_columns(req, snap)
        if cols.size == 0:
            return indifferent(len(candidates))
        return _row_mean(_utilisation_after(req, snap, candidates, cols, amounts)) * 100.0


class MinFragment:
    """Score = (1 - |cpu ratio - memory ratio|) * 100 after placing the pod (seed 001's MinFragment)."""

    name = "MinFragment"

    def score(self, req: PodRequest, snap: Snapshot, candidates: np.ndarray) -> np.ndarray:
        cpu, mem = snap.column.get("cpu"), snap.column.get("memory")
        if cpu is None or mem is None:
            return np.zeros(len(candidates))
        cols = np.array([cpu, mem], dtype=np.intp)
        amounts = np.array([req.pod.requests.get("cpu", 0), req.pod.requests.get("memory", 0)], dtype=np.int64)
        ratio = _utilisation_after(req, snap, candidates, cols, amounts)
        return (1.0 - np.abs(ratio[0] - ratio[1])) * 100.0
