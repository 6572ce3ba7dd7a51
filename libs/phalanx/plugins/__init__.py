"""Built-in filter and score plugins, registered by name."""

from __future__ import annotations

from phalanx.framework.plugin import FilterPlugin, ScorePlugin
from phalanx.framework.registry import Registry
from phalanx.plugins.allocation_scores import LeastAllocated, MinFragment, MostAllocated
from phalanx.plugins.gpu_share import GPUShare
from phalanx.plugins.node_affinity import NodeAffinity, NodeSelector
from phalanx.plugins.node_resources_fit import NodeResourcesFit
from phalanx.plugins.node_unschedulable import NodeUnschedulable
from phalanx.plugins.taint_toleration import TaintToleration


def default_registries() -> tuple[Registry[FilterPlugin], Registry[ScorePlugin]]:
    filters: Registry[FilterPlugin] = Registry("filter")
    for cls in (NodeUnschedulable, NodeSelector, NodeAffinity, TaintToleration, NodeResourcesFit, GPUShare):
        filters.register(cls.name, cls)
    scores: Registry[ScorePlugin] = Registry("score")
    for score_cls in (LeastAllocated, MostAllocated, MinFragment):
        scores.register(score_cls.name, score_cls)
    return filters, scores
