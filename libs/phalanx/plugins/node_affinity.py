"""NodeSelector and NodeAffinity (required terms): label matching, cached per distinct placement."""

from __future__ import annotations

from collections import Counter

import numpy as np

from phalanx.framework.masks import everywhere
from phalanx.framework.plugin import PodRequest
from phalanx.framework.snapshot import Snapshot
from phalanx.model.objects import NodeInfo, SelectorRequirement, SelectorTerm


def _requirement_holds(req: SelectorRequirement, value: str | None) -> bool:
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        try:
            left, right = int(value or ""), int(req.values[0])
        except (ValueError, IndexError):
            return False
        return left > right if op == "Gt" else left < right
    return False


def term_matches(term: SelectorTerm, node: NodeInfo) -> bool:
    if not term.match_expressions and not term.match_fields:
        return False  # an empty term matches no node, as upstream
    fields = {"metadata.name": node.name}
    return all(_requirement_holds(r, node.labels.get(r.key)) for r in term.match_expressions) and all(
        _requirement_holds(r, fields.get(r.key)) for r in term.match_fields
    )


class NodeSelector:
    name = "NodeSelector"

    def filter(self, req: PodRequest, snap: Snapshot) -> np.ndarray:
        selector = req.pod.placement.node_selector
        if not selector:
            return everywhere(len(snap))
        return snap.static_mask(
            self.name,
            req.pod.placement,
            lambda: np.array([all(n.labels.get(k) == v for k, v in selector) for n in snap.nodes], dtype=bool),
        )

    def explain(self, req: PodRequest, snap: Snapshot, rejected: np.ndarray) -> Counter[str]:
        return Counter({"node(s) didn't match node selector": int(rejected.sum())})


class NodeAffinity:
    name = "NodeAffinity"

    def filter(self, req: PodRequest, snap: Snapshot) -> np.ndarray:
        terms = req.pod.placement.affinity_terms
        if not terms:
            return everywhere(len(snap))
        return snap.static_mask(
            self.name,
            req.pod.placement,
            lambda: np.array([any(term_matches(t, n) for t in terms) for n in snap.nodes], dtype=bool),
        )

    def explain(self, req: PodRequest, snap: Snapshot, rejected: np.ndarray) -> Counter[str]:
        return Counter({"node(s) didn't match Pod's node affinity": int(rejected.sum())})
