"""The plugin interfaces: kube-scheduler's Filter and Score extension points, over whole node vectors, and
node preparation (how a plugin models a node's capacity before anything is stored or placed)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from phalanx.framework.snapshot import Snapshot
from phalanx.model.objects import NodeInfo, PodInfo


@dataclass
class PodRequest:
    """A pod's requests resolved against the snapshot's resource columns, computed once per pod."""

    pod: PodInfo
    cols: np.ndarray
    amounts: np.ndarray
    unknown: list[str]

    @classmethod
    def of(cls, pod: PodInfo, snap: Snapshot) -> "PodRequest":
        cols, amounts, unknown = snap.request_vector(pod.requests)
        return cls(pod, cols, amounts, unknown)


class FilterPlugin(Protocol):
    name: str

    def filter(self, req: PodRequest, snap: Snapshot) -> np.ndarray:
        """Boolean mask over snapshot nodes: True where the pod may go."""
        ...

    def explain(self, req: PodRequest, snap: Snapshot, rejected: np.ndarray) -> Counter[str]:
        """Reasons for the nodes in `rejected` (a boolean mask), counted as kube-scheduler prints them."""
        ...


class ScorePlugin(Protocol):
    name: str

    def score(self, req: PodRequest, snap: Snapshot, candidates: np.ndarray) -> np.ndarray:
        """Scores in [0, 100] for the candidate node indices."""
        ...


class NodePreparer(Protocol):
    name: str

    def prepare_node(self, node: NodeInfo) -> NodeInfo:
        """The node as the filters and Redis's capacity checks see it (GPUShare: one column per GPU device).
        Idempotent: a node read back from Redis is prepared already."""
        ...
