"""The in-tree plugins by name, and the framework built from them: what the composition roots (the
scheduler service, explain, tests) hand to phalanx.framework, which knows no plugin itself."""

from __future__ import annotations

from pathlib import Path

from phalanx.framework.framework import Framework, Registries
from phalanx.framework.plugin import FilterPlugin, ScorePlugin
from phalanx.framework.profile import Profile, check_plugin_names, load_profile
from phalanx.framework.registry import Registry
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


def in_tree_registries() -> Registries:
    """(filters, scores): fresh registries, so a caller may register plugins of its own on them."""
    filters: Registry[FilterPlugin] = Registry("filter")
    for cls in (
        NodeUnschedulable,
        NodeSelector,
        NodeAffinity,
        TaintToleration,
        NodeResourcesFit,
        GPUShare,
        StarvationReservation,
        InterPodAffinity,
        PodTopologySpread,
    ):
        filters.register(cls.name, cls)
    scores: Registry[ScorePlugin] = Registry("score")
    for score_cls in (
        LeastAllocated,
        MostAllocated,
        MinFragment,
        GPUFragmentation,
        LeaderFirst,
        JobAffinity,
        JobAntiAffinity,
        InterPodAffinity,
        PodTopologySpread,
    ):
        scores.register(score_cls.name, score_cls)
    return filters, scores


def in_tree_framework(profile: Profile | None = None) -> Framework:
    """The framework running `profile` (the default one when None) with the in-tree plugins. A plugin name
    the registries do not know raises ValueError naming the known ones."""
    return Framework(profile or Profile(), in_tree_registries())


def load_in_tree_framework(path: str | Path | None) -> Framework:
    """The framework of a profile file (None: the default profile); a profile that cannot be used raises
    ProfileError naming the file and the field, unknown plugin names included."""
    registries = in_tree_registries()
    profile = load_profile(path)
    check_plugin_names(profile, path or "", registries[0].names(), registries[1].names())
    return Framework(profile, registries)
