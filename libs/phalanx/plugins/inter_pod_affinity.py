"""InterPodAffinity (kube-scheduler): required and preferred pod affinity and anti-affinity, the incoming
pod's terms and, symmetrically, the terms of the pods already placed.

Everything is counted per node row and summed per topology domain with numpy, from an index kept per
snapshot (PodIndex, shared with PodTopologySpread): one pod's filter is a few vector operations over the
nodes per term, never a Python loop over every pod for every node.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from phalanx.framework.masks import everywhere, indifferent
from phalanx.framework.plugin import PodRequest
from phalanx.framework.snapshot import Snapshot
from phalanx.model.objects import PodInfo
from phalanx.model.pod_affinity import PodAffinityTerm

AFFINITY_REASON = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_REASON = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY_REASON = "node(s) didn't satisfy existing pods anti-affinity rules"
# kube-scheduler's hardPodAffinityWeight default: what an existing pod's required affinity term adds to the
# score of the nodes in its domain when the incoming pod matches it.
HARD_POD_AFFINITY_WEIGHT = 1
_MAX_CACHED_MATCHERS = 1024  # distinct selectors counted per snapshot; past it the cache starts again


@dataclass(frozen=True, slots=True)
class PodMatcher:
    """Which pods one counter counts: those every (term, owner namespace) matches (one term for anti-affinity
    and spread; all of a pod's required affinity terms together, as upstream counts them)."""

    terms: tuple[tuple[PodAffinityTerm, str], ...]

    def matches(self, pod: PodInfo) -> bool:
        return all(t.matches(pod.namespace, pod.labels, owner) for t, owner in self.terms)


def domain_totals(per_node: np.ndarray, ids: np.ndarray, n_domains: int) -> np.ndarray:
    """Per node, the sum of `per_node` over the nodes of its topology domain; 0 where the node has no domain."""
    has = ids >= 0
    totals = np.bincount(ids[has], weights=per_node[has], minlength=n_domains)
    out = np.zeros(len(ids))
    out[has] = totals[ids[has]]
    return out


class PodIndex:
    """What the pods tracked in a snapshot add up to: per-node counts of pods matching each selector asked
    about, and the terms of placed pods that bear on incoming ones (symmetric anti-affinity, scores).

    Rebuilt when the snapshot's generation changes (node rows moved); between generations kept current by
    the snapshot's `pod_listeners`, each change applied as it happens (no rescans of the pods).
    """

    def __init__(self) -> None:
        self.generation = -1
        self._rows: dict[str, int] = {}
        self.pods: dict[tuple[str, str], tuple[int, PodInfo]] = {}  # (node, pod key) -> (node row or -1, pod)
        self._counts: dict[PodMatcher, np.ndarray] = {}
        self._domains: dict[str, tuple[np.ndarray, int]] = {}
        self._nodes_labels: list[Mapping[str, str]] = []
        # Placed pods' terms, by (term, owner namespace): owners per node (required anti-affinity), and
        # signed score weights per node (required affinity, preferred affinity and anti-affinity).
        self.anti: dict[tuple[PodAffinityTerm, str], np.ndarray] = {}
        self.attract: dict[tuple[PodAffinityTerm, str], np.ndarray] = {}

    # -- keeping current ------------------------------------------------------------------------------
    def sync(self, snap: Snapshot) -> None:
        if self.generation != snap.generation:
            self._rebuild(snap)

    def _rebuild(self, snap: Snapshot) -> None:
        self.generation = snap.generation
        self._rows = dict(snap.index)
        self._nodes_labels = [n.labels for n in snap.nodes]
        self.pods, self._counts, self._domains, self.anti, self.attract = {}, {}, {}, {}, {}
        for node, pods in snap.pods_by_node.items():
            for key, pod in pods.items():
                self._add(key, node, pod)

    def on_pod(self, node: str, pod: PodInfo | None, sign: int) -> None:
        """The snapshot's listener: `sign` 1 tracked, -1 untracked; pod None: every pod forgotten."""
        if pod is None:
            self.generation = -1  # rebuilt from pods_by_node at the next sync
        elif sign > 0 and (node, pod.key) not in self.pods:
            self._add(pod.key, node, pod)
        elif sign < 0 and (node, pod.key) in self.pods:
            self._remove(node, pod.key)

    def _add(self, key: str, node: str, pod: PodInfo) -> None:
        row = self._rows.get(node, -1)
        self.pods[(node, key)] = (row, pod)
        if row >= 0:
            self._apply(row, pod, 1)

    def _remove(self, node: str, key: str) -> None:
        row, pod = self.pods.pop((node, key))
        if row >= 0:
            self._apply(row, pod, -1)

    def _apply(self, row: int, pod: PodInfo, sign: int) -> None:
        for matcher, counts in self._counts.items():
            if matcher.matches(pod):
                counts[row] += sign
        spec = pod.pod_affinity
        if spec is None or not spec.has_affinity:
            return
        ns = pod.namespace
        for t in spec.required_anti_affinity:
            self._bump(self.anti, (t, ns), row, sign)
        for t in spec.required_affinity:
            self._bump(self.attract, (t, ns), row, sign * HARD_POD_AFFINITY_WEIGHT)
        for w in spec.preferred_affinity:
            self._bump(self.attract, (w.term, ns), row, sign * w.weight)
        for w in spec.preferred_anti_affinity:
            self._bump(self.attract, (w.term, ns), row, -sign * w.weight)

    def _bump(
        self,
        table: dict[tuple[PodAffinityTerm, str], np.ndarray],
        key: tuple[PodAffinityTerm, str],
        row: int,
        value: int,
    ) -> None:
        arr = table.get(key)
        if arr is None:
            arr = table[key] = np.zeros(len(self._rows), dtype=np.int64)
        arr[row] += value
        if value < 0 and not arr.any():
            del table[key]  # an empty table is what lets pods without a spec skip all work

    # -- queries --------------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return len(self._rows)

    def counts(self, matcher: PodMatcher) -> np.ndarray:
        """Per node row, how many tracked pods `matcher` matches (computed once, then kept current)."""
        counts = self._counts.get(matcher)
        if counts is None:
            if len(self._counts) >= _MAX_CACHED_MATCHERS:
                self._counts.clear()
            counts = np.zeros(len(self._rows), dtype=np.int64)
            for row, pod in self.pods.values():
                if row >= 0 and matcher.matches(pod):
                    counts[row] += 1
            self._counts[matcher] = counts
        return counts

    def domains(self, topology_key: str) -> tuple[np.ndarray, int]:
        """(domain id per node row, -1 where the node lacks the label; number of domains) for a key."""
        found = self._domains.get(topology_key)
        if found is None:
            ids_of: dict[str, int] = {}
            ids = np.array(
                [
                    -1 if (v := labels.get(topology_key)) is None else ids_of.setdefault(v, len(ids_of))
                    for labels in self._nodes_labels
                ],
                dtype=np.intp,
            )
            found = self._domains[topology_key] = (ids, len(ids_of))
        return found

    def domain_totals(self, per_node: np.ndarray, topology_key: str) -> np.ndarray:
        ids, n = self.domains(topology_key)
        return domain_totals(per_node, ids, n)


_INDEXES: "weakref.WeakKeyDictionary[Snapshot, PodIndex]" = weakref.WeakKeyDictionary()


def pod_index(snap: Snapshot) -> PodIndex:
    """The snapshot's PodIndex, current: made on first use and listening to the snapshot from then on."""
    idx = _INDEXES.get(snap)
    if idx is None:
        idx = _INDEXES[snap] = PodIndex()
        snap.pod_listeners.append(idx.on_pod)
    idx.sync(snap)
    return idx


def _own_matcher(terms: tuple[PodAffinityTerm, ...], pod: PodInfo) -> PodMatcher:
    return PodMatcher(tuple((t, pod.namespace) for t in terms))


def _normalised(raw: np.ndarray) -> np.ndarray:
    """kube-scheduler's min-max normalisation to 0..100 (truncated, as its int64 cast); all equal: 0."""
    if raw.size == 0:
        return raw.astype(np.float64)
    low, high = float(raw.min()), float(raw.max())
    if high <= low:
        return np.zeros(len(raw))
    return np.floor(100.0 * (raw - low) / (high - low))


class InterPodAffinity:
    name = "InterPodAffinity"

    # -- filter ---------------------------------------------------------------------------------------
    def filter(self, req: PodRequest, snap: Snapshot) -> np.ndarray:
        failures = self._failures(req.pod, snap)
        if not failures:
            return everywhere(len(snap))
        ok = np.ones(len(snap), dtype=bool)
        for _, failed in failures:
            ok &= ~failed
        return ok

    def explain(self, req: PodRequest, snap: Snapshot, rejected: np.ndarray) -> Counter[str]:
        reasons: Counter[str] = Counter()
        left = rejected.copy()
        for reason, failed in self._failures(req.pod, snap):  # a node counts once, at upstream's first check
            hit = left & failed
            if hit.any():
                reasons[reason] += int(hit.sum())
                left &= ~hit
        return reasons

    def _failures(self, pod: PodInfo, snap: Snapshot) -> list[tuple[str, np.ndarray]]:
        """(reason, mask of nodes failing it), in kube-scheduler's order of checks."""
        spec = pod.pod_affinity
        idx = pod_index(snap)
        out: list[tuple[str, np.ndarray]] = []
        if spec is not None and spec.required_affinity:
            out.append((AFFINITY_REASON, ~self._affinity_ok(pod, spec.required_affinity, idx)))
        if spec is not None and spec.required_anti_affinity:
            out.append((ANTI_AFFINITY_REASON, self._anti_affinity_fails(pod, spec.required_anti_affinity, idx)))
        if idx.anti:
            out.append((EXISTING_ANTI_AFFINITY_REASON, self._existing_anti_affinity_fails(pod, idx)))
        return out

    def _affinity_ok(self, pod: PodInfo, terms: tuple[PodAffinityTerm, ...], idx: PodIndex) -> np.ndarray:
        # Upstream counts a placed pod only if it matches every required term, then per term's domain.
        matcher = _own_matcher(terms, pod)
        counts = idx.counts(matcher)
        n = len(counts)
        labelled, present, any_label = np.ones(n, dtype=bool), np.ones(n, dtype=bool), np.zeros(n, dtype=bool)
        for t in terms:
            has = idx.domains(t.topology_key)[0] >= 0
            labelled &= has
            any_label |= has
            present &= idx.domain_totals(counts, t.topology_key) > 0
        # The first pod of a group with affinity to itself: no pod anywhere matches, but it matches its own
        # terms, so it may go to any node that has the topology labels (else it would pend forever).
        if not counts[any_label].any() and matcher.matches(pod):
            return labelled
        return labelled & present

    def _anti_affinity_fails(self, pod: PodInfo, terms: tuple[PodAffinityTerm, ...], idx: PodIndex) -> np.ndarray:
        failed = np.zeros(idx.size, dtype=bool)
        for t in terms:  # a node without the topology label is in no domain: it passes
            failed |= idx.domain_totals(idx.counts(_own_matcher((t,), pod)), t.topology_key) > 0
        return failed

    def _existing_anti_affinity_fails(self, pod: PodInfo, idx: PodIndex) -> np.ndarray:
        failed: np.ndarray | None = None
        for (term, owner_ns), owners in idx.anti.items():
            if term.matches(pod.namespace, pod.labels, owner_ns):
                hit = idx.domain_totals(owners, term.topology_key) > 0
                failed = hit if failed is None else failed | hit
        return np.zeros(idx.size, dtype=bool) if failed is None else failed

    # -- score ----------------------------------------------------------------------------------------
    def score(self, req: PodRequest, snap: Snapshot, candidates: np.ndarray) -> np.ndarray:
        pod = req.pod
        spec = pod.pod_affinity
        idx = pod_index(snap)
        preferred = bool(spec and (spec.preferred_affinity or spec.preferred_anti_affinity))
        if not preferred and not idx.attract:
            return indifferent(len(candidates))
        raw = np.zeros(len(snap))
        if spec is not None:
            for w in spec.preferred_affinity:
                raw += w.weight * idx.domain_totals(idx.counts(_own_matcher((w.term,), pod)), w.term.topology_key)
            for w in spec.preferred_anti_affinity:
                raw -= w.weight * idx.domain_totals(idx.counts(_own_matcher((w.term,), pod)), w.term.topology_key)
        # Symmetry: placed pods' terms that the incoming pod matches weigh on their own domains.
        for (term, owner_ns), weights in idx.attract.items():
            if term.matches(pod.namespace, pod.labels, owner_ns):
                raw += idx.domain_totals(weights, term.topology_key)
        return _normalised(raw[candidates])
