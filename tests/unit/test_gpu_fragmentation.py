"""GPUFragmentation: a pod goes where it costs the arriving mix the least usable GPU capacity."""

from __future__ import annotations

import numpy as np
from builders import model_node, model_pod

from phalanx.framework.profile import Profile
from phalanx.framework.snapshot import Snapshot
from phalanx.model.gpu import GPU_SHARE
from phalanx.model.objects import Placement, PodInfo, SelectorRequirement, SelectorTerm
from phalanx.plugins.registry import in_tree_framework

FRAG_ONLY = Profile(scores={"GPUFragmentation": 1.0})
SPREAD = Profile(scores={"LeastAllocated": 1.0})


def _cluster(nodes: list) -> tuple[Snapshot, object]:
    fw = in_tree_framework(FRAG_ONLY)
    snap = Snapshot()
    snap.set_nodes(fw.prepare_nodes(nodes), {})
    return snap, fw


def _place(fw: object, snap: Snapshot, pod: PodInfo) -> str:
    res = fw.place(pod, snap)  # type: ignore[attr-defined]
    assert res.node_index is not None, res.message
    snap.reserve(res.node_index, res.requests, pod=pod)
    return snap.nodes[res.node_index].name


def _learn(fw: object, snap: Snapshot, pods: list[PodInfo]) -> None:
    """Lets the plugin see the mix (it learns from the pods it is asked to score) without placing them."""
    for p in pods:
        fw.place(p, snap)  # type: ignore[attr-defined]


def test_one_gpu_pods_fill_a_started_node_and_keep_whole_nodes_for_eight_gpu_pods() -> None:
    snap, fw = _cluster([model_node(f"n{i}", gpus=8) for i in range(3)])
    _learn(fw, snap, [model_pod("big", gpus=8), model_pod("small", gpus=1)] * 5)
    nodes = {_place(fw, snap, model_pod(f"w{i}", gpus=1)) for i in range(8)}
    assert len(nodes) == 1  # eight one-GPU pods share one node
    assert _place(fw, snap, model_pod("b0", gpus=8)) != nodes.pop()
    assert _place(fw, snap, model_pod("b1", gpus=8))  # the third node is still whole


def test_spreading_would_strand_the_eight_gpu_pods() -> None:
    # The same arrivals under LeastAllocated: the one-GPU pods break every node and the 8-GPU pod fits nowhere.
    fw = in_tree_framework(SPREAD)
    snap = Snapshot()
    snap.set_nodes(fw.prepare_nodes([model_node(f"n{i}", gpus=8) for i in range(3)]), {})
    for i in range(3):
        res = fw.place(model_pod(f"w{i}", gpus=1), snap)
        snap.reserve(res.node_index, res.requests)
    assert fw.place(model_pod("b0", gpus=8), snap).node_index is None


def test_shares_pack_onto_a_used_device_before_breaking_a_whole_one() -> None:
    snap, fw = _cluster([model_node("a", gpus=2), model_node("b", gpus=2)])
    share = {GPU_SHARE: 400}
    _learn(fw, snap, [model_pod("s", requests=share), model_pod("g", gpus=1)] * 5)
    first = _place(fw, snap, model_pod("s0", requests=share))
    assert _place(fw, snap, model_pod("s1", requests=share)) == first
    used = snap.used[snap.index[first]]
    devices = [snap.column[c] for c in snap.column if c.startswith("phalanx.dev/gpu-device-")]
    assert sorted(int(used[j]) for j in devices if used[j]) == [800]  # one device holds both shares


def test_cpu_only_pods_go_where_cpu_is_not_needed_by_gpu_pods() -> None:
    # "dense": 8 GPUs, 16 cores; "roomy": 1 GPU, 64 cores. The GPU pods of the mix need 2 cores per GPU.
    snap, fw = _cluster([model_node("dense", gpus=8, cpu=16), model_node("roomy", gpus=1, cpu=64)])
    _learn(fw, snap, [model_pod("g", gpus=1, cpu=2)] * 10)
    assert _place(fw, snap, model_pod("web", cpu=8)) == "roomy"


def test_node_constraints_of_the_mix_count_where_they_apply() -> None:
    # Pods that must run on model X make X's whole nodes worth more: an unconstrained 8-GPU pod goes to Y.
    x = [model_node(f"x{i}", gpus=8, labels={"phalanx.dev/gpu-model": "X"}) for i in range(2)]
    y = model_node("y", gpus=8, labels={"phalanx.dev/gpu-model": "Y"})
    snap, fw = _cluster([*x, y])
    only_x = Placement(affinity_terms=(SelectorTerm((SelectorRequirement("phalanx.dev/gpu-model", "In", ("X",)),)),))
    _learn(fw, snap, [model_pod("cx", gpus=8, placement=only_x), model_pod("any", gpus=8)] * 5)
    assert _place(fw, snap, model_pod("free", gpus=8)) == "y"


def test_without_gpus_it_scores_nothing_and_the_spread_decides() -> None:
    fw = in_tree_framework()  # the default profile: GPUFragmentation and LeastAllocated
    snap = Snapshot()
    snap.set_nodes(fw.prepare_nodes([model_node("a"), model_node("b")]), {})
    frag = next(p for p, _ in fw.scores if p.name == "GPUFragmentation")
    from phalanx.framework.plugin import PodRequest

    pod = model_pod("w", cpu=4)
    assert not frag.score(PodRequest.of(pod, snap), snap, np.arange(2)).any()
    first = _place(fw, snap, pod)
    assert _place(fw, snap, model_pod("w2", cpu=4)) != first


def test_the_default_profile_places_gpu_pods_by_fragmentation() -> None:
    fw = in_tree_framework()
    snap = Snapshot()
    snap.set_nodes(fw.prepare_nodes([model_node(f"n{i}", gpus=8) for i in range(2)]), {})
    placed = {_place(fw, snap, model_pod(f"w{i}", gpus=1)) for i in range(4)}
    assert len(placed) == 1  # packed, not spread as LeastAllocated alone would


def test_distinct_rows_groups_rows_as_numpy_unique_does_even_when_hashes_collide() -> None:
    from phalanx.plugins.gpu_fragmentation import _ROW_HASH, distinct_rows

    rng = np.random.default_rng(7)
    key = rng.integers(0, 3, size=(500, 6)).astype(np.int64)
    first, inverse = distinct_rows(key)
    assert (key[first][inverse] == key).all()  # every row is its representative
    assert len(first) == len(np.unique(key, axis=0))  # and distinct rows stay apart
    # Rows built to share a hash (w1 * w0 either way): told apart all the same.
    w0, w1 = int(_ROW_HASH[0]), int(_ROW_HASH[1])
    colliding = np.array([[w1, 0], [0, w0], [w1, 0]], dtype=np.int64)
    first, inverse = distinct_rows(colliding)
    assert len(first) == 2 and inverse[0] == inverse[2] != inverse[1]
