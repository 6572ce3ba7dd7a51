"""Runs a profile's filters and scores for one pod against the snapshot, and prepares nodes for it.

The framework is handed its plugins (registries of factories by name): it knows no plugin itself. The
in-tree set is assembled by phalanx.plugins.registry, which the composition roots call."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from phalanx.framework.masks import everywhere, indifferent
from phalanx.framework.plugin import FilterPlugin, NodePreparer, PodRequest, ScorePlugin
from phalanx.framework.profile import Profile
from phalanx.framework.registry import Registry
from phalanx.framework.snapshot import Snapshot
from phalanx.model.objects import NodeInfo, PodInfo, Resources
from phalanx.model.policies import basic_policy_of

Registries = tuple[Registry[FilterPlugin], Registry[ScorePlugin]]
# Basic policy -> {score plugin: weight}; None (or a policy not listed): the profile's own scores. Handed in
# with the plugins (phalanx.plugins.registry.BASIC_POLICY_SCORES), as the framework names no plugin.
PolicyScores = Mapping[str, Mapping[str, float] | None]


@dataclass
class PlacementResult:
    node_index: int | None
    message: str = ""  # why no node fits, kube-scheduler style
    requests: Resources = field(default_factory=dict)  # what the pod holds on the node (its own + assigned)

    @property
    def ok(self) -> bool:
        return self.node_index is not None


class Framework:
    def __init__(self, profile: Profile, registries: Registries, policies: PolicyScores | None = None) -> None:
        self.profile = profile
        filters, scores = registries
        self.filters = [filters.create(name) for name in self.profile.filters]
        self._score_registry = scores
        self._policies: PolicyScores = policies or {}
        # Every policy's plugins are built on first use; a name the registry lacks fails here, not mid-run.
        for weights in self._policies.values():
            for name in weights or ():
                if name not in scores.names():
                    scores.create(name)  # raises ValueError naming the known ones
        self._plugins: dict[str, ScorePlugin] = {}  # one instance per plugin, whichever policies use it
        self._policy_scores: dict[str, list[tuple[ScorePlugin, float]]] = {}
        self.scores = self._scores_of(self.profile.basic_policy)
        self.preparers = [_preparer(filters.create(name)) for name in self.profile.node_preparers]
        self._assigners = [f for f in self.filters if hasattr(f, "assign")]

    def _scores_of(self, policy: str) -> list[tuple[ScorePlugin, float]]:
        """The weighted score plugins of a basic policy (see phalanx.model.policies and PolicyScores); the
        "Default" policy is the profile's own scores. Built on first use, sharing plugin instances between policies."""
        chosen = self._policy_scores.get(policy)
        if chosen is None:
            weights = self._policies.get(policy)
            if weights is None:
                weights = self.profile.scores
            chosen = []
            for name, weight in weights.items():
                if weight <= 0:
                    continue
                plugin = self._plugins.get(name)
                if plugin is None:
                    plugin = self._plugins[name] = self._score_registry.create(name)
                chosen.append((plugin, weight))
            self._policy_scores[policy] = chosen
        return chosen

    def prepare_node(self, node: NodeInfo) -> NodeInfo:
        """The node as it is stored and placed on, each preparing plugin applied in turn."""
        for plugin in self.preparers:
            node = plugin.prepare_node(node)
        return node

    def prepare_nodes(self, nodes: Iterable[NodeInfo]) -> list[NodeInfo]:
        return [self.prepare_node(n) for n in nodes]

    def place(self, pod: PodInfo, snap: Snapshot) -> PlacementResult:
        if len(snap) == 0:
            return PlacementResult(None, "0/0 nodes are available: the cluster has no nodes")
        req = PodRequest.of(pod, snap)
        all_pass = everywhere(len(snap))
        feasible: np.ndarray | None = None  # None: no filter has rejected a node yet
        for plugin in self.filters:
            mask = plugin.filter(req, snap)
            if mask is all_pass:
                continue
            feasible = mask if feasible is None else feasible & mask
            if not feasible.any():
                return PlacementResult(None, self.explain(req, snap))
        candidates = np.flatnonzero(feasible) if feasible is not None else np.arange(len(snap))
        candidates = self._sample(candidates, len(snap))
        scores = self._scores_of(basic_policy_of(pod, self.profile.basic_policy)) if pod.annotations else self.scores
        if not scores or len(candidates) == 1:
            return self._chosen(req, snap, int(candidates[0]))
        total = np.zeros(len(candidates))
        no_opinion = indifferent(len(candidates))
        for scorer, weight in scores:
            s = scorer.score(req, snap, candidates)
            if s is not no_opinion:
                total += weight * s
        # argmax returns the first maximum: ties go to the lowest node name, so runs are reproducible.
        return self._chosen(req, snap, int(candidates[int(np.argmax(total))]))

    def held_on(self, pod: PodInfo, snap: Snapshot, node_index: int) -> Resources:
        """What `pod` holds on that node when it is bound there already: its requests plus what assigning
        plugins add (the GPU devices it occupies, so that nothing else is given them)."""
        return self._chosen(PodRequest.of(pod, snap), snap, node_index).requests

    def _chosen(self, req: PodRequest, snap: Snapshot, node_index: int) -> PlacementResult:
        """Lets assigning plugins (GPU devices) add what the pod takes on the chosen node."""
        held = req.pod.requests
        for plugin in self._assigners:
            extra = plugin.assign(req, snap, node_index)
            if extra:
                held = {**held, **extra}
        return PlacementResult(node_index, requests=held)

    def _sample(self, candidates: np.ndarray, n_nodes: int) -> np.ndarray:
        pct = self.profile.percentage_of_nodes_to_score
        if pct >= 100:
            return candidates
        keep = max(1, n_nodes * pct // 100)
        return candidates[:keep]

    def explain(self, req: PodRequest, snap: Snapshot) -> str:
        """Counts, per reason, the nodes each filter rejected (a node counts once, at its first failing filter)."""
        reasons: Counter[str] = Counter()
        alive = np.ones(len(snap), dtype=bool)
        for plugin in self.filters:
            mask = plugin.filter(req, snap)
            rejected = alive & ~mask
            if rejected.any():
                reasons.update(plugin.explain(req, snap, rejected))
            alive &= mask
        detail = ", ".join(
            f"{count} {reason}" for reason, count in sorted(reasons.items(), key=lambda x: (-x[1], x[0]))
        )
        return f"0/{len(snap)} nodes are available: {detail}"


def _preparer(plugin: FilterPlugin) -> NodePreparer:
    if not callable(getattr(plugin, "prepare_node", None)):
        raise ValueError(f"filter plugin {plugin.name!r} does not prepare nodes")
    return cast(NodePreparer, plugin)
