"""NodeResourcesFit: every requested resource (cpu, memory, pods, any extended one) fits the free capacity."""

from __future__ import annotations

from collections import Counter

import numpy as np

from phalanx.framework.masks import everywhere
from phalanx.framework.plugin import PodRequest
from phalanx.framework.snapshot import Snapshot


class NodeResourcesFit:
    name = "NodeResourcesFit"

    def filter(self, req: PodRequest, snap: Snapshot) -> np.ndarray:
        if req.unknown:  # a resource no node offers fits nowhere
            return np.zeros(len(snap), dtype=bool)
        if req.cols.size == 0:
            return everywhere(len(snap))
        free = snap.cap[:, req.cols] - snap.used[:, req.cols]
        return np.all(free >= req.amounts, axis=1)

    def explain(self, req: PodRequest, snap: Snapshot, rejected: np.ndarray) -> Counter[str]:
        out: Counter[str] = Counter()
        n = int(rejected.sum())
        for r in req.unknown:
            out[f"Insufficient {r} (no node offers it)"] += n
        if req.unknown or req.cols.size == 0:
            return out
        free = snap.cap[rejected][:, req.cols] - snap.used[rejected][:, req.cols]
        short = free < req.amounts
        for j, col in enumerate(req.cols.tolist()):
            count = int(short[:, j].sum())
            if count:
                out[f"Insufficient {snap.resources[col]}"] += count
        return out
