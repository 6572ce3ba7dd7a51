"""Filter and score plugins over a numpy Snapshot, the framework's failure message, the registry and profiles."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from builders import model_pod

from phalanx.explain.capacity import FILTER_REASONS
from phalanx.framework.framework import Framework
from phalanx.framework.plugin import PodRequest
from phalanx.framework.profile import DEFAULT_FILTERS, Profile, ProfileError, load_profile
from phalanx.framework.registry import Registry
from phalanx.framework.snapshot import Snapshot
from phalanx.model.objects import (
    NodeInfo,
    Placement,
    PodInfo,
    SelectorRequirement,
    SelectorTerm,
    Taint,
    Toleration,
)
from phalanx.model.policies import BASIC_POLICIES
from phalanx.plugins.node_affinity import NodeAffinity, NodeSelector
from phalanx.plugins.node_resources_fit import NodeResourcesFit
from phalanx.plugins.node_unschedulable import NodeUnschedulable
from phalanx.plugins.registry import BASIC_POLICY_SCORES, in_tree_framework, in_tree_registries, plugin_names
from phalanx.plugins.taint_toleration import TaintToleration
from phalanx.scheduling.hints import RESOURCE_FILTERS, STATIC_FILTERS

GPU = "nvidia.com/gpu"
UNSCHEDULABLE_KEY = "node.kubernetes.io/unschedulable"


def snapshot(*nodes: NodeInfo, used: dict[tuple[str, str], int] | None = None) -> Snapshot:
    snap = Snapshot()
    snap.set_nodes(list(nodes), used or {})
    return snap


def pod(requests: dict[str, int] | None = None, placement: Placement | None = None, name: str = "p") -> PodInfo:
    """A pod asking exactly `requests` (milli-units): the plugins' arithmetic is what these tests check."""
    return model_pod(name, cpu=0, pods=0, requests=requests, placement=placement)


def allowed(plugin: object, p: PodInfo, snap: Snapshot) -> list[str]:
    mask = plugin.filter(PodRequest.of(p, snap), snap)  # type: ignore[attr-defined]
    assert mask.dtype == bool and mask.shape == (len(snap),)
    return [snap.nodes[i].name for i in np.flatnonzero(mask)]


def place(fw: Framework, p: PodInfo, snap: Snapshot) -> str | None:
    res = fw.place(p, snap)
    return None if res.node_index is None else snap.nodes[res.node_index].name


# -- NodeResourcesFit -------------------------------------------------------------------------------


def fit_nodes() -> Snapshot:
    return snapshot(
        NodeInfo("n1", {"cpu": 4000, "memory": 8000, "pods": 110_000, "example.com/fpga": 1000}),
        NodeInfo("n2", {"cpu": 4000, "memory": 8000, "pods": 110_000, GPU: 2000}),
        NodeInfo("n3", {"cpu": 1000, "memory": 8000, "pods": 2000, GPU: 4000}),
        used={("n3", "pods"): 2000},
    )


@pytest.mark.parametrize(
    "requests, expected",
    [
        ({}, ["n1", "n2", "n3"]),
        ({"cpu": 2000}, ["n1", "n2"]),
        ({"cpu": 4000}, ["n1", "n2"]),  # exactly fits
        ({"cpu": 4001}, []),
        ({"cpu": 1500, GPU: 1000}, ["n2"]),  # n3 has too little cpu
        ({GPU: 1000, "pods": 1000}, ["n2"]),  # n3 has GPUs but no pod slot left
        ({GPU: 3000}, ["n3"]),
        ({GPU: 5000}, []),
        ({"example.com/fpga": 1000}, ["n1"]),  # extended resource
        ({"cpu": 0, "memory": 0}, ["n1", "n2", "n3"]),  # zero requests ask for nothing
        ({"pods": 1000}, ["n1", "n2"]),  # n3's pod slots are used up
        ({"example.com/unknown": 1}, []),  # a resource no node has
    ],
)
def test_node_resources_fit(requests: dict[str, int], expected: list[str]) -> None:
    assert allowed(NodeResourcesFit(), pod(requests), fit_nodes()) == expected


def test_node_resources_fit_counts_used_capacity() -> None:
    snap = fit_nodes()
    p = pod({"cpu": 3000})
    assert allowed(NodeResourcesFit(), p, snap) == ["n1", "n2"]
    snap.reserve(snap.index["n1"], {"cpu": 2000})
    assert allowed(NodeResourcesFit(), p, snap) == ["n2"]
    snap.reserve(snap.index["n1"], {"cpu": 2000}, sign=-1)
    assert allowed(NodeResourcesFit(), p, snap) == ["n1", "n2"]


def test_unknown_resource_is_explained() -> None:
    fw = in_tree_framework(Profile(filters=("NodeResourcesFit",)))
    res = fw.place(pod({"cpu": 1000, "example.com/unknown": 1000}), fit_nodes())
    assert not res.ok
    assert res.message == "0/3 nodes are available: 3 Insufficient example.com/unknown (no node offers it)"


# -- NodeUnschedulable ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tolerations, expected",
    [
        ((), ["n2"]),
        ((Toleration(UNSCHEDULABLE_KEY, "Exists", effect="NoSchedule"),), ["n1", "n2"]),
        ((Toleration(UNSCHEDULABLE_KEY, "Exists"),), ["n1", "n2"]),
        ((Toleration(UNSCHEDULABLE_KEY, "Equal", ""),), ["n1", "n2"]),
        ((Toleration(operator="Exists"),), ["n1", "n2"]),  # tolerates everything
        ((Toleration(UNSCHEDULABLE_KEY, "Exists", effect="NoExecute"),), ["n2"]),
        ((Toleration(UNSCHEDULABLE_KEY, "Equal", "yes"),), ["n2"]),
        ((Toleration("other", "Exists"),), ["n2"]),
    ],
)
def test_node_unschedulable(tolerations: tuple[Toleration, ...], expected: list[str]) -> None:
    snap = snapshot(NodeInfo("n1", unschedulable=True), NodeInfo("n2"))
    assert allowed(NodeUnschedulable(), pod(placement=Placement(tolerations=tolerations)), snap) == expected


def test_cordoning_a_node_takes_effect_after_upsert() -> None:
    snap = snapshot(NodeInfo("n1"), NodeInfo("n2"))
    p = pod()
    assert allowed(NodeUnschedulable(), p, snap) == ["n1", "n2"]  # caches the static mask
    snap.upsert_nodes([NodeInfo("n1", unschedulable=True)])
    assert allowed(NodeUnschedulable(), p, snap) == ["n2"]


# -- NodeSelector -----------------------------------------------------------------------------------

LABELLED = (
    NodeInfo("n1", labels={"zone": "a", "disk": "ssd"}),
    NodeInfo("n2", labels={"zone": "b", "disk": "ssd"}),
    NodeInfo("n3", labels={"zone": "a"}),
)


@pytest.mark.parametrize(
    "selector, expected",
    [
        ((), ["n1", "n2", "n3"]),
        ((("zone", "a"),), ["n1", "n3"]),
        ((("disk", "ssd"), ("zone", "a")), ["n1"]),  # ANDed
        ((("zone", "c"),), []),
        ((("missing", ""),), []),  # a missing label is not an empty one
    ],
)
def test_node_selector(selector: tuple[tuple[str, str], ...], expected: list[str]) -> None:
    assert allowed(NodeSelector(), pod(placement=Placement(node_selector=selector)), snapshot(*LABELLED)) == expected


def test_node_selector_sees_relabelled_nodes() -> None:
    snap = snapshot(NodeInfo("n1", labels={"zone": "b"}))
    p = pod(placement=Placement(node_selector=(("zone", "a"),)))
    assert allowed(NodeSelector(), p, snap) == []
    snap.upsert_nodes([NodeInfo("n1", labels={"zone": "a"})])
    assert allowed(NodeSelector(), p, snap) == ["n1"]


# -- NodeAffinity -----------------------------------------------------------------------------------

AFFINITY_NODES = (
    NodeInfo("n1", labels={"zone": "a", "gpus": "4"}),
    NodeInfo("n2", labels={"zone": "b", "gpus": "8"}),
    NodeInfo("n3", labels={}),
)


def expr(key: str, op: str, *values: str) -> SelectorRequirement:
    return SelectorRequirement(key, op, tuple(values))


def term(*expressions: SelectorRequirement, fields: tuple[SelectorRequirement, ...] = ()) -> SelectorTerm:
    return SelectorTerm(tuple(expressions), fields)


AFFINITY_CASES = {
    "In": ([term(expr("zone", "In", "a"))], ["n1"]),
    "In several values": ([term(expr("zone", "In", "a", "b"))], ["n1", "n2"]),
    "NotIn matches nodes without the label": ([term(expr("zone", "NotIn", "a"))], ["n2", "n3"]),
    "Exists": ([term(expr("zone", "Exists"))], ["n1", "n2"]),
    "DoesNotExist": ([term(expr("zone", "DoesNotExist"))], ["n3"]),
    "Gt": ([term(expr("gpus", "Gt", "5"))], ["n2"]),
    "Lt": ([term(expr("gpus", "Lt", "5"))], ["n1"]),
    "Gt compares numbers, not strings": ([term(expr("gpus", "Gt", "10"))], []),
    "Gt with a non-integer value": ([term(expr("gpus", "Gt", "many"))], []),
    "Lt without a value": ([term(expr("gpus", "Lt"))], []),
    "unknown operator": ([term(expr("zone", "Like", "a"))], []),
    "requirements of a term are ANDed": ([term(expr("zone", "Exists"), expr("gpus", "Lt", "5"))], ["n1"]),
    "matchFields metadata.name In": ([term(fields=(expr("metadata.name", "In", "n3"),))], ["n3"]),
    "matchFields metadata.name NotIn": ([term(fields=(expr("metadata.name", "NotIn", "n1"),))], ["n2", "n3"]),
    "matchFields and matchExpressions ANDed": (
        [term(expr("zone", "Exists"), fields=(expr("metadata.name", "In", "n1", "n3"),))],
        ["n1"],
    ),
    "terms are ORed": (
        [term(expr("zone", "In", "a")), term(fields=(expr("metadata.name", "In", "n3"),))],
        ["n1", "n3"],
    ),
    "an empty term matches nothing": ([term()], []),
    "an empty term ORed with another": ([term(), term(expr("zone", "In", "b"))], ["n2"]),
}


@pytest.mark.parametrize("terms, expected", AFFINITY_CASES.values(), ids=AFFINITY_CASES.keys())
def test_node_affinity(terms: list[SelectorTerm], expected: list[str]) -> None:
    p = pod(placement=Placement(affinity_terms=tuple(terms)))
    assert allowed(NodeAffinity(), p, snapshot(*AFFINITY_NODES)) == expected


def test_no_affinity_allows_every_node() -> None:
    assert allowed(NodeAffinity(), pod(), snapshot(*AFFINITY_NODES)) == ["n1", "n2", "n3"]


# -- TaintToleration --------------------------------------------------------------------------------

TAINTED = (
    NodeInfo("n1", taints=(Taint("gpu", "true", "NoSchedule"),)),
    NodeInfo("n2", taints=(Taint("dedicated", "ml", "NoExecute"),)),
    NodeInfo("n3", taints=(Taint("spot", "yes", "PreferNoSchedule"),)),
    NodeInfo("n4"),
    NodeInfo("n5", taints=(Taint("a", "", "NoSchedule"), Taint("b", "", "NoSchedule"))),
)

TAINT_CASES = {
    "no tolerations: PreferNoSchedule is ignored": ((), ["n3", "n4"]),
    "Equal with the value": ((Toleration("gpu", "Equal", "true"),), ["n1", "n3", "n4"]),
    "Equal with another value": ((Toleration("gpu", "Equal", "false"),), ["n3", "n4"]),
    "empty operator means Equal": ((Toleration("gpu", "", "true"),), ["n1", "n3", "n4"]),
    "Exists with the key": ((Toleration("gpu", "Exists"),), ["n1", "n3", "n4"]),
    "Exists with the matching effect": ((Toleration("gpu", "Exists", effect="NoSchedule"),), ["n1", "n3", "n4"]),
    "Exists with another effect": ((Toleration("gpu", "Exists", effect="NoExecute"),), ["n3", "n4"]),
    "NoExecute taint tolerated": ((Toleration("dedicated", "Equal", "ml", "NoExecute"),), ["n2", "n3", "n4"]),
    "Exists without a key tolerates everything": ((Toleration(operator="Exists"),), ["n1", "n2", "n3", "n4", "n5"]),
    "Exists without a key, one effect": ((Toleration(operator="Exists", effect="NoExecute"),), ["n2", "n3", "n4"]),
    "every taint must be tolerated": ((Toleration("a", "Exists"),), ["n3", "n4"]),
    "both taints tolerated": ((Toleration("a", "Exists"), Toleration("b", "Exists")), ["n3", "n4", "n5"]),
}


@pytest.mark.parametrize("tolerations, expected", TAINT_CASES.values(), ids=TAINT_CASES.keys())
def test_taint_toleration(tolerations: tuple[Toleration, ...], expected: list[str]) -> None:
    p = pod(placement=Placement(tolerations=tolerations))
    assert allowed(TaintToleration(), p, snapshot(*TAINTED)) == expected


# -- the failure message ----------------------------------------------------------------------------


def test_failure_message_counts_each_node_once_kube_scheduler_style() -> None:
    snap = snapshot(
        NodeInfo("n1", {"cpu": 8000, GPU: 1000}),
        NodeInfo("n2", {"cpu": 8000, GPU: 1000}),
        # Tainted and without GPUs: counted once, at the first filter that rejects it.
        NodeInfo("n3", {"cpu": 8000}, taints=(Taint("dedicated", "infra", "NoSchedule"),)),
    )
    res = in_tree_framework().place(pod({"cpu": 1000, GPU: 2000}), snap)
    assert res.node_index is None and not res.ok
    assert res.message == "0/3 nodes are available: 2 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint"


def test_failure_message_lists_every_reason() -> None:
    snap = snapshot(
        NodeInfo("n1", {"cpu": 1000, "memory": 1000}),
        NodeInfo("n2", {"cpu": 8000, "memory": 8000}, unschedulable=True),
        NodeInfo("n3", {"cpu": 8000, "memory": 8000}, labels={"zone": "b"}),
    )
    p = pod({"cpu": 2000, "memory": 2000}, Placement(node_selector=(("zone", "b"),)))
    snap.reserve(snap.index["n3"], {"cpu": 7000})
    res = in_tree_framework().place(p, snap)
    assert res.message == (
        "0/3 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match node selector, "
        "1 node(s) were unschedulable"
    )


def test_failure_message_without_nodes() -> None:
    res = in_tree_framework().place(pod({"cpu": 1}), Snapshot())
    assert not res.ok and res.message.startswith("0/0 nodes are available")


# -- scores -----------------------------------------------------------------------------------------


def two_nodes(**used: int) -> Snapshot:
    return snapshot(
        NodeInfo("n1", {"cpu": 4000, "memory": 4000, "pods": 110_000}),
        NodeInfo("n2", {"cpu": 4000, "memory": 4000, "pods": 110_000}),
        used={(n, "cpu"): v for n, v in used.items()},
    )


def fill(fw: Framework, snap: Snapshot, count: int, requests: dict[str, int]) -> list[str]:
    out = []
    for i in range(count):
        p = pod(requests, name=f"p{i}")
        res = fw.place(p, snap)
        assert res.node_index is not None
        snap.reserve(res.node_index, p.requests)
        out.append(snap.nodes[res.node_index].name)
    return out


def test_least_allocated_spreads() -> None:
    fw = in_tree_framework(Profile(scores={"LeastAllocated": 1}))
    assert place(fw, pod({"cpu": 1000, "pods": 1000}), two_nodes(n1=3000, n2=1000)) == "n2"
    assert fill(fw, two_nodes(), 4, {"cpu": 1000, "pods": 1000}) == ["n1", "n2", "n1", "n2"]


def test_most_allocated_packs() -> None:
    fw = in_tree_framework(Profile(scores={"MostAllocated": 1}))
    assert place(fw, pod({"cpu": 1000, "pods": 1000}), two_nodes(n1=1000, n2=3000)) == "n2"
    assert fill(fw, two_nodes(), 5, {"cpu": 1000, "pods": 1000}) == ["n1", "n1", "n1", "n1", "n2"]


@pytest.mark.parametrize(
    "used, requests, expected",
    [
        # n1 would be 75% cpu / 25% memory, n2 25% / 25%.
        ({("n1", "cpu"): 2000}, {"cpu": 1000, "memory": 1000}, "n2"),
        # A cpu-only pod on n2 (half its memory used) evens it out.
        ({("n2", "memory"): 2000}, {"cpu": 2000}, "n2"),
    ],
)
def test_min_fragment_prefers_balanced_cpu_and_memory(used: dict, requests: dict, expected: str) -> None:
    snap = snapshot(
        NodeInfo("n1", {"cpu": 4000, "memory": 4000}), NodeInfo("n2", {"cpu": 4000, "memory": 4000}), used=used
    )
    assert place(in_tree_framework(Profile(scores={"MinFragment": 1})), pod(requests), snap) == expected


@pytest.mark.parametrize(
    "weights, expected",
    [
        ({"LeastAllocated": 3, "MostAllocated": 1}, "n2"),
        ({"LeastAllocated": 1, "MostAllocated": 3}, "n1"),
        ({"LeastAllocated": 1, "MostAllocated": 0}, "n2"),  # a zero weight switches a score off
        ({"LeastAllocated": 0, "MostAllocated": 1}, "n1"),
    ],
)
def test_score_weights_combine(weights: dict[str, float], expected: str) -> None:
    snap = two_nodes(n1=3000, n2=1000)
    assert place(in_tree_framework(Profile(scores=weights)), pod({"cpu": 500}), snap) == expected


def test_ties_go_to_the_lowest_node_name() -> None:
    nodes = [NodeInfo(n, {"cpu": 4000}) for n in ("n3", "n1", "n2")]
    snap = snapshot(*nodes)
    for scores in ({"LeastAllocated": 1}, {"MostAllocated": 1}, {"MinFragment": 1}, {}):
        assert place(in_tree_framework(Profile(scores=scores)), pod({"cpu": 1000}), snap) == "n1"


def test_scores_ignore_the_pods_column() -> None:
    # Only pod slots requested: no score applies, so the tie goes to the lowest name despite n1's use.
    snap = snapshot(NodeInfo("n1", {"pods": 10_000}), NodeInfo("n2", {"pods": 10_000}), used={("n1", "pods"): 9000})
    assert place(in_tree_framework(Profile(scores={"LeastAllocated": 1})), pod({"pods": 1000}), snap) == "n1"


# -- percentageOfNodesToScore -----------------------------------------------------------------------


def ten_nodes(cordoned: tuple[str, ...] = ()) -> Snapshot:
    nodes = [NodeInfo(f"n{i:02d}", {"cpu": 10_000}, unschedulable=f"n{i:02d}" in cordoned) for i in range(10)]
    return snapshot(*nodes, used={(f"n{i:02d}", "cpu"): i * 500 for i in range(10)})


@pytest.mark.parametrize(
    "pct, cordoned, expected",
    [
        (100, (), "n09"),  # MostAllocated over every node
        (30, (), "n02"),  # only the first 3 feasible nodes are scored
        (30, ("n00", "n01"), "n04"),  # feasible ones: cordoned nodes do not count
        (1, (), "n00"),  # at least one node
        (50, (), "n04"),
    ],
)
def test_percentage_of_nodes_to_score(pct: int, cordoned: tuple[str, ...], expected: str) -> None:
    fw = in_tree_framework(Profile(scores={"MostAllocated": 1}, percentage_of_nodes_to_score=pct))
    assert place(fw, pod({"cpu": 100}), ten_nodes(cordoned)) == expected


# -- registry ---------------------------------------------------------------------------------------


def test_registry_refuses_duplicate_names() -> None:
    reg: Registry[object] = Registry("filter")
    reg.register("A", object)
    with pytest.raises(ValueError, match="filter plugin 'A' is already registered"):
        reg.register("A", dict)
    assert reg.names() == ["A"]


def test_registry_names_known_plugins_for_unknown_ones() -> None:
    reg: Registry[object] = Registry("score")
    reg.register("Zeta", object)
    reg.register("Alpha", object)
    with pytest.raises(ValueError) as exc:
        reg.create("Nope")
    assert str(exc.value) == "unknown score plugin 'Nope' (known: Alpha, Zeta)"


def test_in_tree_registries_hold_the_builtin_plugins() -> None:
    filters, scores = in_tree_registries()
    assert filters.names() == sorted(DEFAULT_FILTERS)
    assert scores.names() == [
        "GPUFragmentation",
        "InterPodAffinity",
        "JobAffinity",
        "JobAntiAffinity",
        "LeaderFirst",
        "LeastAllocated",
        "MinFragment",
        "MostAllocated",
        "PodTopologySpread",
    ]
    for name in filters.names():
        assert filters.create(name).name == name


def test_the_registry_is_the_one_list_of_plugin_names() -> None:
    """plugin_names() (what the chart's schema lists, tests/deploy/test_plugin_names.py) is the registries'
    names; every policy a job may name has a score set, naming registered plugins only."""
    filters, scores = in_tree_registries()
    assert plugin_names() == (filters.names(), scores.names())
    assert tuple(BASIC_POLICY_SCORES) == BASIC_POLICIES
    for policy, weights in BASIC_POLICY_SCORES.items():
        assert set(weights or {}) <= set(scores.names()), policy
    profile = Profile()
    assert set(profile.filters) | set(profile.node_preparers) <= set(filters.names())
    assert set(profile.scores) <= set(scores.names())


def test_code_that_treats_filters_by_name_names_registered_ones() -> None:
    """The queueing hints and explain's reasons key on filter names (they may not import the plugins): a
    renamed filter would silently lose its hint or its reason."""
    filters, _ = plugin_names()
    assert STATIC_FILTERS | RESOURCE_FILTERS <= set(filters)
    assert set(FILTER_REASONS) == STATIC_FILTERS


def test_a_policy_naming_an_unknown_plugin_fails_when_the_framework_is_built() -> None:
    """Not when a pod first names the policy, mid-run."""
    with pytest.raises(ValueError, match="unknown score plugin 'Balanced'"):
        Framework(Profile(), in_tree_registries(), {**BASIC_POLICY_SCORES, "BinPack": {"Balanced": 1.0}})


def test_framework_refuses_a_profile_with_an_unknown_plugin() -> None:
    filters, scores = in_tree_registries()
    with pytest.raises(ValueError) as exc:
        in_tree_framework(Profile(filters=("NodeUnschedulable", "NodePorts")))
    assert str(exc.value) == f"unknown filter plugin 'NodePorts' (known: {', '.join(filters.names())})"
    assert "NodeAffinity, " in str(exc.value)
    with pytest.raises(ValueError) as exc:
        in_tree_framework(Profile(scores={"Balanced": 1.0}))
    assert str(exc.value) == f"unknown score plugin 'Balanced' (known: {', '.join(scores.names())})"


def test_a_profile_filter_list_restricts_the_filters() -> None:
    snap = snapshot(NodeInfo("n1", {"cpu": 1000}, unschedulable=True))
    assert place(in_tree_framework(Profile(filters=("NodeResourcesFit",))), pod({"cpu": 500}), snap) == "n1"
    assert place(in_tree_framework(), pod({"cpu": 500}), snap) is None


# -- profiles ---------------------------------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "profile.yaml"
    path.write_text(text)
    return path


def test_load_profile_reads_every_field(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "filters: [NodeResourcesFit, TaintToleration]\n"
        "scores: {MostAllocated: 2, MinFragment: 0.5}\npercentageOfNodesToScore: 40\n",
    )
    profile = load_profile(path)
    assert profile.filters == ("NodeResourcesFit", "TaintToleration")
    assert profile.scores == {"MostAllocated": 2.0, "MinFragment": 0.5}
    assert profile.percentage_of_nodes_to_score == 40
    in_tree_framework(profile)  # every name is known


@pytest.mark.parametrize("text", ["", "# nothing\n"])
def test_an_empty_profile_is_the_default(tmp_path: Path, text: str) -> None:
    assert load_profile(write(tmp_path, text)) == Profile()
    assert load_profile(None) == Profile()


PROFILE_ERRORS = {
    "bad YAML": ("filters: [NodeResourcesFit\n", None),
    "not a mapping": ("- NodeResourcesFit\n", "mapping"),
    "unknown field": ("filters: []\nscorez: {}\n", "scorez"),
    "filters not a list": ("filters: NodeResourcesFit\n", "filters:"),
    "filters with a non-name": ("filters: [NodeResourcesFit, 3]\n", "filters:"),
    "scores not a mapping": ("scores: [LeastAllocated]\n", "scores:"),
    "negative weight": ("scores: {LeastAllocated: -1}\n", "scores.LeastAllocated:"),
    "text weight": ("scores: {MostAllocated: heavy}\n", "scores.MostAllocated:"),
    "boolean weight": ("scores: {MinFragment: true}\n", "scores.MinFragment:"),
    "percentage 0": ("percentageOfNodesToScore: 0\n", "percentageOfNodesToScore:"),
    "percentage 101": ("percentageOfNodesToScore: 101\n", "percentageOfNodesToScore:"),
    "percentage as text": ("percentageOfNodesToScore: '50'\n", "percentageOfNodesToScore:"),
    "percentage fractional": ("percentageOfNodesToScore: 50.5\n", "percentageOfNodesToScore:"),
    "percentage boolean": ("percentageOfNodesToScore: true\n", "percentageOfNodesToScore:"),
}


@pytest.mark.parametrize("text, field", PROFILE_ERRORS.values(), ids=PROFILE_ERRORS.keys())
def test_load_profile_errors_name_file_and_field(tmp_path: Path, text: str, field: str | None) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    message = str(exc.value)
    assert message.startswith(f"profile {path}: ")
    if field is not None:
        assert field in message
    else:
        assert "line" in message  # the YAML parser's position


def test_load_profile_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="nope.yaml"):
        load_profile(tmp_path / "nope.yaml")


# -- snapshot ---------------------------------------------------------------------------------------


def test_snapshot_sorts_nodes_and_keeps_capacity_columns() -> None:
    snap = snapshot(NodeInfo("b", {"cpu": 2000}), NodeInfo("a", {"cpu": 1000, GPU: 3000}))
    assert [n.name for n in snap.nodes] == ["a", "b"] and snap.index == {"a": 0, "b": 1}
    assert snap.cap[snap.index["b"], snap.column["cpu"]] == 2000
    assert snap.cap[snap.index["b"], snap.column[GPU]] == 0
    assert snap.free_total() == {"cpu": 3000, GPU: 3000}


def test_snapshot_reserve_and_free_total() -> None:
    snap = snapshot(NodeInfo("a", {"cpu": 1000}), NodeInfo("b", {"cpu": 2000}))
    snap.reserve(snap.index["a"], {"cpu": 400})
    snap.reserve(snap.index["b"], {"cpu": 2000})
    assert snap.free_total() == {"cpu": 600}
    snap.reserve(snap.index["a"], {"example.com/new": 5})  # a new resource gets a column
    assert snap.used_map() == {("a", "cpu"): 400, ("b", "cpu"): 2000, ("a", "example.com/new"): 5}
    assert snap.free_total()["example.com/new"] == 0  # over-use clips to zero
    snap.reserve(snap.index["b"], {"cpu": 2000}, sign=-1)
    assert snap.free_total()["cpu"] == 2600


def test_snapshot_upsert_keeps_used_capacity() -> None:
    snap = snapshot(NodeInfo("a", {"cpu": 1000}), NodeInfo("c", {"cpu": 1000}))
    snap.reserve(snap.index["c"], {"cpu": 700})
    generation = snap.generation
    snap.upsert_nodes([NodeInfo("b", {"cpu": 500}), NodeInfo("c", {"cpu": 4000})])
    assert [n.name for n in snap.nodes] == ["a", "b", "c"]
    assert snap.used_map() == {("c", "cpu"): 700}
    assert snap.cap[snap.index["c"], snap.column["cpu"]] == 4000
    assert snap.free_total() == {"cpu": 1000 + 500 + 3300}
    assert snap.generation > generation


def test_snapshot_remove_drops_the_node_and_its_use() -> None:
    snap = snapshot(NodeInfo("a", {"cpu": 1000}), NodeInfo("b", {"cpu": 1000}), NodeInfo("c", {"cpu": 1000}))
    snap.reserve(snap.index["a"], {"cpu": 100})
    snap.reserve(snap.index["c"], {"cpu": 300})
    snap.remove_nodes(["a", "zzz"])
    assert [n.name for n in snap.nodes] == ["b", "c"]
    assert snap.used_map() == {("c", "cpu"): 300}
    assert snap.free_total() == {"cpu": 1700}


def test_snapshot_load_used_replaces_use_and_ignores_unknown_nodes() -> None:
    snap = snapshot(NodeInfo("a", {"cpu": 1000}))
    snap.reserve(0, {"cpu": 100})
    snap.load_used({("a", "memory"): 7, ("gone", "cpu"): 5})
    assert snap.used_map() == {("a", "memory"): 7}
