"""Score plugins over the requested resources: LeastAllocated spreads, MostAllocated bin-packs,
and MinFragment (seed 001) prefers nodes whose cpu and memory use stay balanced."""

from __future__ import annotations

import numpy as np

from phalanx.framework.plugin import PodRequest
from phalanx.framework.snapshot import Snapshot


def _utilisation_after(req: PodRequest, snap: Snapshot, candidates: np.ndarray, cols: np.ndarray,
                       amounts: np.ndarray) -> np.ndarray:
    cap = snap.cap[np.ix_(candidates, cols)].astype(np.float64)
    used = snap.used[np.ix_(candidates, cols)] + amounts
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(cap > 0, used / cap, 1.0)
    return np.clip(ratio, 0.0, 1.0)


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
            return np.zeros(len(candidates))
        return (1.0 - _utilisation_after(req, snap, candidates, cols, amounts)).mean(axis=1) * 100.0


class MostAllocated:
    name = "MostAllocated"

    def score(self, req: PodRequest, snap: Snapshot, candidates: np.ndarray) -> np.ndarray:
        cols, amounts = _scored_columns(req, snap)
        if cols.size == 0:
            return np.zeros(len(candidates))
        return _utilisation_after(req, snap, candidates, cols, amounts).mean(axis=1) * 100.0


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
        return (1.0 - np.abs(ratio[:, 0] - ratio[:, 1])) * 100.0
