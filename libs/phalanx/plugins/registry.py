"""The in-tree plugins by name, and the framework built from them: what the composition roots (the
scheduler service, explain, tests) hand to phalanx.framework, which knows no plugin itself.

The one list of plugin names: FILTER_PLUGINS and SCORE_PLUGINS below. The basic policies' score sets are built
from the classes here; the default profile (phalanx.framework.profile) is checked against the registries by
every Framework; the Helm chart's schema and values, the manifests and the compose profile by
tests/deploy/test_plugin_names.py."""

from __future__ import annotations

from pathlib import Path

from phalanx.framework.framework import Framework, PolicyScores, Registries
from phalanx.framework.plugin import FilterPlugin, ScorePlugin
from phalanx.framework.profile import Profile, check_plugin_names, load_profile
from phalanx.framework.registry import Registry
from phalanx.model.policies import DEFAULT_POLICY
from phalanx.plugins.allocation_scores import LeastAllocated, MinFragment, MostAllocated
from phalanx.plugins.gpu_fragmentation import GPUFragmentation
from phalanx.plugins.gpu_share import GPUShare
from phalanx.plugins.inter_pod_affinity import InterPodAffinity
from phalanx.plugins.job_policies import JobAffinity, JobAntiAffinity, LeaderFirst
from phalanx.plugins.node_affinity import NodeAffinity, NodeSelector
from phalanx.plugins.node_resources_fit import NodeResourcesFit
from phalanx.plugins.node_unschedulable import NodeUnschedulable
from phalanx.plugins.reservation_filter import StarvationReservation
from phalanx.plugins.taint_toleration import TaintToleration
from phalanx.plugins.topology_spread import PodTopologySpread

# In the order they are registered; a profile chooses which run and in what order.
FILTER_PLUGINS: tuple[type[FilterPlugin], ...] = (
    NodeUnschedulable,
    NodeSelector,
    NodeAffinity,
    TaintToleration,
    NodeResourcesFit,
    GPUShare,
    StarvationReservation,
    InterPodAffinity,
    PodTopologySpread,
)
SCORE_PLUGINS: tuple[type[ScorePlugin], ...] = (
    LeastAllocated,
    MostAllocated,
    MinFragment,
    GPUFragmentation,
    LeaderFirst,
    JobAffinity,
    JobAntiAffinity,
    InterPodAffinity,
    PodTopologySpread,
)

# Basic policy (phalanx.model.policies.BASIC_POLICIES) -> {score plugin: weight}; None: the profile's own scores.
# A policy is only a different weighting of score plugins: every policy runs the same filters.
BASIC_POLICY_SCORES: PolicyScores = {
    DEFAULT_POLICY: None,
    "Gang": None,
    # Fill used nodes first; GPUFragmentation still picks among equally full nodes where GPUs are shared.
    "BinPack": {MostAllocated.name: 100.0, GPUFragmentation.name: 1.0},
    # Keep each node's cpu and memory use balanced; packing breaks ties.
    "MinFragment": {MinFragment.name: 100.0, MostAllocated.name: 1.0},
    "LeaderFirst": {LeaderFirst.name: 1.0},
    "JobAffinity": {JobAffinity.name: 1.0},
    "JobAntiAffinity": {JobAntiAffinity.name: 1.0},
}


def plugin_names() -> tuple[list[str], list[str]]:
    """(filter names, score names), sorted: what a profile may name (the chart's schema lists exactly these)."""
    return sorted(cls.name for cls in FILTER_PLUGINS), sorted(cls.name for cls in SCORE_PLUGINS)


def in_tree_registries() -> Registries:
    """(filters, scores): fresh registries, so a caller may register plugins of its own on them."""
    filters: Registry[FilterPlugin] = Registry("filter")
    for cls in FILTER_PLUGINS:
        filters.register(cls.name, cls)
    scores: Registry[ScorePlugin] = Registry("score")
    for score_cls in SCORE_PLUGINS:
        scores.register(score_cls.name, score_cls)
    return filters, scores


def in_tree_framework(profile: Profile | None = None) -> Framework:
    """The framework running `profile` (the default one when None) with the in-tree plugins. A plugin name
    the registries do not know raises ValueError naming the known ones."""
    return Framework(profile or Profile(), in_tree_registries(), BASIC_POLICY_SCORES)


def load_in_tree_framework(path: str | Path | None) -> Framework:
    """The framework of a profile file (None: the default profile); a profile that cannot be used raises
    ProfileError naming the file and the field, unknown plugin names included."""
    registries = in_tree_registries()
    profile = load_profile(path)
    check_plugin_names(profile, path or "", registries[0].names(), registries[1].names())
    return Framework(profile, registries, BASIC_POLICY_SCORES)
