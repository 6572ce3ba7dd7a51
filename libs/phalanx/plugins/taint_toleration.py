"""TaintToleration: a node's NoSchedule/NoExecute taints must each be tolerated by the pod."""

from __future__ import annotations

from collections import Counter

import numpy as np

from phalanx.framework.plugin import PodRequest
from phalanx.framework.snapshot import Snapshot
from phalanx.model.objects import Taint, Toleration


def _matches(t: Toleration, taint: Taint) -> bool:
    if t.effect and t.effect != taint.effect:
        return False
    if t.operator == "Exists":
        return not t.key or t.key == taint.key
    return t.key == taint.key and t.value == taint.value


def tolerates(tolerations: tuple[Toleration, ...], taint: Taint) -> bool:
    return any(_matches(t, taint) for t in tolerations)


class TaintToleration:
    name = "TaintToleration"

    def filter(self, req: PodRequest, snap: Snapshot) -> np.ndarray:
        tolerations = req.pod.placement.tolerations

        def compute() -> np.ndarray:
            return np.array(
                [
                    all(tolerates(tolerations, t) for t in n.taints if t.effect in ("NoSchedule", "NoExecute"))
                    for n in snap.nodes
                ],
                dtype=bool,
            )

        return snap.static_mask(self.name, req.pod.placement, compute)

    def explain(self, req: PodRequest, snap: Snapshot, rejected: np.ndarray) -> Counter[str]:
        return Counter({"node(s) had untolerated taint": int(rejected.sum())})
