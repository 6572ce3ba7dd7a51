"""PodTopologySpread (kube-scheduler): DoNotSchedule constraints filter, ScheduleAnyway ones score.

Matching pods are counted per node row by the PodIndex that InterPodAffinity keeps, then summed per
topology domain with np.bincount: one pod costs a few vector operations over the nodes per constraint.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from phalanx.framework.masks import everywhere, indifferent
from phalanx.framework.plugin import PodRequest
from phalanx.framework.snapshot import Snapshot
from phalanx.model.objects import PodInfo
from phalanx.model.pod_affinity import HONOR, LabelSelector, PodAffinityTerm, TopologySpreadConstraint
from phalanx.plugins.inter_pod_affinity import PodIndex, PodMatcher, pod_index
from phalanx.plugins.node_affinity import NodeAffinity, NodeSelector
from phalanx.plugins.taint_toleration import TaintToleration

SPREAD_REASON = "node(s) didn't match pod topology spread constraints"
MISSING_LABEL_REASON = "node(s) didn't match pod topology spread constraints (missing required label)"
HOSTNAME = "kubernetes.io/hostname"

# Their filters cache static masks on the snapshot, so asking them again per pod costs a dict lookup.
_NODE_SELECTOR, _NODE_AFFINITY, _TAINTS = NodeSelector(), NodeAffinity(), TaintToleration()


def spread_matcher(c: TopologySpreadConstraint, pod: PodInfo) -> PodMatcher:
    """Pods of the incoming pod's namespace matching the constraint's selector, with matchLabelKeys'
    values taken from the incoming pod (a missing selector matches nothing, whatever the keys)."""
    selector = c.label_selector
    if selector is not None and c.match_label_keys:
        extra = {(k, pod.labels[k]) for k in c.match_label_keys if k in pod.labels}
        selector = LabelSelector(tuple(sorted(set(selector.match_labels) | extra)), selector.match_expressions)
    # The topology key plays no part in matching: left empty so constraints on one selector share counts.
    return PodMatcher(((PodAffinityTerm("", selector), pod.namespace),))


def _included(c: TopologySpreadConstraint, req: PodRequest, snap: Snapshot) -> np.ndarray:
    """Nodes whose pods count (nodeAffinityPolicy Honor: the pod's node selector and affinity; nodeTaintsPolicy
    Honor: taints it tolerates)."""
    mask = np.ones(len(snap), dtype=bool)
    if c.node_affinity_policy == HONOR:
        mask &= _NODE_SELECTOR.filter(req, snap) & _NODE_AFFINITY.filter(req, snap)
    if c.node_taints_policy == HONOR:
        mask &= _TAINTS.filter(req, snap)
    return mask


def _constraints(pod: PodInfo, hard: bool) -> list[TopologySpreadConstraint]:
    spec = pod.pod_affinity
    return [] if spec is None else [c for c in spec.spread if c.hard == hard]


def _has_all_keys(constraints: list[TopologySpreadConstraint], idx: PodIndex) -> np.ndarray:
    has = np.ones(idx.size, dtype=bool)
    for c in constraints:
        has &= idx.domains(c.topology_key)[0] >= 0
    return has


def _domain_counts(
    c: TopologySpreadConstraint, req: PodRequest, snap: Snapshot, idx: PodIndex, has_all: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(matching pods per domain, which domains are eligible) over the nodes that count: those with every
    constraint's key and passing the constraint's inclusion policies."""
    ids, n = idx.domains(c.topology_key)
    counted = has_all & _included(c, req, snap)
    counts = idx.counts(spread_matcher(c, req.pod))
    per_domain = np.bincount(ids[counted], weights=counts[counted], minlength=n)
    eligible = np.zeros(n, dtype=bool)
    eligible[ids[counted]] = True
    return per_domain, eligible


class PodTopologySpread:
    name = "PodTopologySpread"

    # -- filter (DoNotSchedule) -----------------------------------------------------------------------
    def filter(self, req: PodRequest, snap: Snapshot) -> np.ndarray:
        found = self._failures(req, snap)
        if found is None:
            return everywhere(len(snap))
        missing, skewed = found
        return ~(missing | skewed)

    def explain(self, req: PodRequest, snap: Snapshot, rejected: np.ndarray) -> Counter[str]:
        found = self._failures(req, snap)
        if found is None:
            return Counter()
        missing, skewed = found
        reasons: Counter[str] = Counter()
        if (hit := int((rejected & missing).sum())) > 0:
            reasons[MISSING_LABEL_REASON] = hit
        if (hit := int((rejected & ~missing & skewed).sum())) > 0:
            reasons[SPREAD_REASON] = hit
        return reasons

    def _failures(self, req: PodRequest, snap: Snapshot) -> tuple[np.ndarray, np.ndarray] | None:
        """(nodes lacking a constraint's key, nodes where placing the pod would exceed a maxSkew), or None
        when the pod has no DoNotSchedule constraint."""
        hard = _constraints(req.pod, hard=True)
        if not hard:
            return None
        idx = pod_index(snap)
        has_all = _has_all_keys(hard, idx)
        skewed = np.zeros(len(snap), dtype=bool)
        for c in hard:
            ids, _ = idx.domains(c.topology_key)
            per_domain, eligible = _domain_counts(c, req, snap, idx, has_all)
            n_eligible = int(eligible.sum())
            # No eligible domain: nothing to be skewed against (upstream's minimum stays at MaxInt32).
            minimum = float(per_domain[eligible].min()) if n_eligible else math.inf
            if c.min_domains is not None and n_eligible < c.min_domains:
                minimum = 0.0  # fewer domains than asked: the missing ones count as empty
            self_match = 1 if spread_matcher(c, req.pod).matches(req.pod) else 0
            has = ids >= 0
            in_domain = np.zeros(len(snap))
            in_domain[has] = per_domain[ids[has]]
            skewed |= has & (in_domain + self_match - minimum > c.max_skew)
        return ~has_all, skewed

    # -- score (ScheduleAnyway) -----------------------------------------------------------------------
    def score(self, req: PodRequest, snap: Snapshot, candidates: np.ndarray) -> np.ndarray:
        soft = _constraints(req.pod, hard=False)
        if not soft or len(candidates) == 0:
            return indifferent(len(candidates))
        idx = pod_index(snap)
        has_all = _has_all_keys(soft, idx)
        scored = has_all[candidates]  # candidates lacking a key are ignored: they score 0
        kept = candidates[scored]
        if kept.size == 0:
            return np.zeros(len(candidates))
        raw = np.zeros(len(kept))
        for c in soft:
            if c.topology_key == HOSTNAME:
                # Upstream counts a hostname domain on the node itself, whatever the inclusion policies.
                matched = idx.counts(spread_matcher(c, req.pod))[kept].astype(np.float64)
                size = len(kept)
            else:
                ids, _ = idx.domains(c.topology_key)
                per_domain, _ = _domain_counts(c, req, snap, idx, has_all)
                matched = per_domain[ids[kept]]
                size = len(np.unique(ids[kept]))
            # More domains weigh a constraint more (log), and maxSkew - 1 softens it, as upstream.
            raw += matched * math.log(size + 2) + (c.max_skew - 1)
        raw = np.floor(raw + 0.5)  # Go's math.Round (half away from zero; the values are >= 0)
        out = np.zeros(len(candidates))
        low, high = float(raw.min()), float(raw.max())
        # Fewer matching pods, higher score: upstream's NormalizeScore, integer division included.
        out[scored] = 100.0 if high == 0 else np.floor(100.0 * (high + low - raw) / high)
        return out
