"""NodeUnschedulable: cordoned nodes (spec.unschedulable) take no pods unless the pod tolerates the taint."""

from __future__ import annotations

from collections import Counter

import numpy as np

from phalanx.framework.plugin import PodRequest
from phalanx.framework.snapshot import Snapshot
from phalanx.model.objects import Taint
from phalanx.plugins.taint_toleration import tolerates

_UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


class NodeUnschedulable:
    name = "NodeUnschedulable"

    def filter(self, req: PodRequest, snap: Snapshot) -> np.ndarray:
        placement = req.pod.placement

        def compute() -> np.ndarray:
            if tolerates(placement.tolerations, _UNSCHEDULABLE_TAINT):
                return np.ones(len(snap), dtype=bool)
            return np.array([not n.unschedulable for n in snap.nodes], dtype=bool)

        return snap.static_mask(self.name, placement, compute)

    def explain(self, req: PodRequest, snap: Snapshot, rejected: np.ndarray) -> Counter[str]:
        return Counter({"node(s) were unschedulable": int(rejected.sum())})
