"""The framework is handed its plugins: the in-tree factory, node preparation, and registries of one's own."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from builders import model_node

from phalanx.framework.framework import Framework
from phalanx.framework.plugin import FilterPlugin, PodRequest, ScorePlugin
from phalanx.framework.profile import Profile, ProfileError
from phalanx.framework.registry import Registry
from phalanx.framework.snapshot import Snapshot
from phalanx.model.gpu import GPU_SHARE, device
from phalanx.model.objects import NodeInfo, PodInfo
from phalanx.plugins.registry import in_tree_framework, load_in_tree_framework

GPU = "nvidia.com/gpu"


class OnlyNamed:
    """A filter of a test's own: nodes named `keep` only; it also labels every node it prepares."""

    name = "OnlyNamed"
    keep = "n2"

    def filter(self, req: PodRequest, snap: Snapshot) -> np.ndarray:
        return np.array([n.name == self.keep for n in snap.nodes], dtype=bool)

    def explain(self, req: PodRequest, snap: Snapshot, rejected: np.ndarray) -> Counter[str]:
        return Counter({"node(s) not named n2": int(rejected.sum())})

    def prepare_node(self, node: NodeInfo) -> NodeInfo:
        return NodeInfo(node.name, node.allocatable, {**node.labels, "prepared": "yes"})


class NoPreparation(OnlyNamed):
    name = "NoPreparation"
    prepare_node = None  # type: ignore[assignment]


def own_registries() -> tuple[Registry[FilterPlugin], Registry[ScorePlugin]]:
    filters: Registry[FilterPlugin] = Registry("filter")
    filters.register(OnlyNamed.name, OnlyNamed)
    filters.register(NoPreparation.name, NoPreparation)
    return filters, Registry("score")


def gpu_node(name: str = "n1", gpus: int = 2) -> NodeInfo:
    return model_node(name, gpus=gpus, cpu=8)


def test_a_framework_runs_only_the_plugins_it_is_handed() -> None:
    fw = Framework(Profile(filters=("OnlyNamed",), scores={}, node_preparers=("OnlyNamed",)), own_registries())
    snap = Snapshot()
    snap.set_nodes(fw.prepare_nodes([NodeInfo("n1", {"cpu": 1000}), NodeInfo("n2", {"cpu": 1000})]), {})
    assert [n.labels for n in snap.nodes] == [{"prepared": "yes"}, {"prepared": "yes"}]
    res = fw.place(PodInfo("default", "p", requests={"cpu": 100}), snap)
    assert res.ok and snap.nodes[res.node_index or 0].name == "n2"
    with pytest.raises(ValueError, match="unknown filter plugin 'NodeResourcesFit'"):
        Framework(Profile(filters=("NodeResourcesFit",), scores={}, node_preparers=()), own_registries())


def test_a_node_preparer_must_prepare_nodes() -> None:
    with pytest.raises(ValueError, match="filter plugin 'NoPreparation' does not prepare nodes"):
        Framework(Profile(filters=(), scores={}, node_preparers=("NoPreparation",)), own_registries())


def test_the_in_tree_framework_prepares_gpus_device_by_device() -> None:
    fw = in_tree_framework()
    prepared = fw.prepare_node(gpu_node())
    assert prepared.allocatable[GPU_SHARE] == 2000
    assert prepared.allocatable[device(0)] == prepared.allocatable[device(1)] == 1000
    assert fw.prepare_node(prepared) == prepared  # idempotent: nodes read back from Redis are prepared already
    plain = NodeInfo("cpu-only", {"cpu": 8000})
    assert fw.prepare_nodes([plain]) == [plain]


def test_nodes_are_prepared_whichever_filters_a_profile_enables() -> None:
    """The prepared nodes are what Redis holds: a profile without GPUShare must not change them."""
    fw = in_tree_framework(Profile(filters=("NodeResourcesFit",)))
    assert device(1) in fw.prepare_node(gpu_node()).allocatable


def test_load_in_tree_framework_names_the_file_and_the_field(tmp_path: Path) -> None:
    path = tmp_path / "profile.yaml"
    path.write_text("filters: [NodeResourcesFit, NodePorts]\n")
    with pytest.raises(ProfileError) as exc:
        load_in_tree_framework(path)
    assert exc.value.field == "filters" and "unknown filter plugin 'NodePorts' (item 2" in exc.value.detail
    assert load_in_tree_framework(None).profile == Profile()
