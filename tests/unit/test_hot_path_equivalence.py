"""The benchmark's optimisations of hot paths change no result: the column-wise score plugins give
bit-identical scores to the original (n x k block) formulation, the hand-written pod_to_json is exactly
dataclasses.asdict, and the gang record's copy (a statement's working copy) is what deepcopy gave."""

from __future__ import annotations

import copy
import dataclasses
import json

import numpy as np
import pytest

from phalanx import fast_json
from phalanx.framework.plugin import PodRequest
from phalanx.framework.snapshot import Snapshot
from phalanx.gang.record import GangRecord
from phalanx.model.objects import (
    GangMode,
    GangSpec,
    NodeInfo,
    Placement,
    PodInfo,
    SelectorRequirement,
    SelectorTerm,
    Taint,
    Toleration,
)
from phalanx.model.pod_affinity import (
    LabelRequirement,
    LabelSelector,
    PodAffinitySpec,
    PodAffinityTerm,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
)
from phalanx.plugins.allocation_scores import LeastAllocated, MinFragment, MostAllocated
from phalanx.state.codec import (
    affinity_to_plain,
    gang_from_json,
    gang_to_json,
    node_from_json,
    node_to_json,
    pod_from_json,
    pod_to_json,
)


def _reference_utilisation(snap: Snapshot, candidates: np.ndarray, cols: np.ndarray, amounts: np.ndarray) -> np.ndarray:
    cap = snap.cap[np.ix_(candidates, cols)].astype(np.float64)
    used = snap.used[np.ix_(candidates, cols)] + amounts
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(cap > 0, used / cap, 1.0)
    return np.clip(ratio, 0.0, 1.0)


def _reference(name: str, req: PodRequest, snap: Snapshot, candidates: np.ndarray) -> np.ndarray:
    if name == "MinFragment":
        cpu, mem = snap.column.get("cpu"), snap.column.get("memory")
        cols = np.array([cpu, mem], dtype=np.intp)
        amounts = np.array([req.pod.requests.get("cpu", 0), req.pod.requests.get("memory", 0)], dtype=np.int64)
        ratio = _reference_utilisation(snap, candidates, cols, amounts)
        return (1.0 - np.abs(ratio[:, 0] - ratio[:, 1])) * 100.0
    keep = req.cols != snap.column.get("pods", -1)
    cols, amounts = req.cols[keep], req.amounts[keep]
    if cols.size == 0:
        return np.zeros(len(candidates))
    u = _reference_utilisation(snap, candidates, cols, amounts)
    return ((1.0 - u).mean(axis=1) if name == "LeastAllocated" else u.mean(axis=1)) * 100.0


@pytest.mark.parametrize("positive", [False, True], ids=["some-zero-capacity", "all-positive-capacity"])
@pytest.mark.parametrize("k", [1, 2, 3, 5, 7, 8, 10])
def test_scores_match_the_block_formulation_bit_for_bit(k: int, positive: bool) -> None:
    rng = np.random.default_rng(k)
    resources = ["cpu", "memory", "pods"] + [f"example.com/r{i}" for i in range(k)]
    nodes = []
    low = 1 if positive else 0
    for i in range(300):
        alloc = {r: int(rng.integers(low, 5)) * int(rng.choice([1, 1000, 10**9, 3 * 10**13])) for r in resources}
        nodes.append(NodeInfo(f"n{i:04d}", alloc))
    snap = Snapshot()
    used = {(n.name, r): int(rng.integers(0, 2 * v + 2)) for n in nodes for r, v in n.allocatable.items()}
    snap.set_nodes(nodes, used)
    for trial in range(20):
        requests = {
            r: int(rng.integers(1, 10**6))
            for r in rng.choice(resources, size=min(k + 1, len(resources)), replace=False)
        }
        requests.setdefault("cpu", 100)
        pod = PodInfo("ns", f"p{trial}", requests=requests)
        req = PodRequest.of(pod, snap)
        for candidates in (np.arange(len(snap)), np.flatnonzero(rng.random(len(snap)) < 0.5)):
            for plugin in (LeastAllocated(), MostAllocated(), MinFragment()):
                got = plugin.score(req, snap, candidates)
                want = _reference(plugin.name, req, snap, candidates)
                assert got.shape == want.shape
                assert np.array_equal(got, want, equal_nan=True), plugin.name
        used.update({(n.name, "cpu"): int(rng.integers(0, 10**6)) for n in nodes[:50]})
        snap.load_used(used)  # usage changes between pods; capacity stays


def test_capacity_cache_follows_node_changes() -> None:
    snap = Snapshot()
    snap.set_nodes([NodeInfo("a", {"cpu": 1000}), NodeInfo("b", {"cpu": 2000})], {})
    pod = PodInfo("ns", "p", requests={"cpu": 500})
    first = LeastAllocated().score(PodRequest.of(pod, snap), snap, np.arange(2))
    snap.upsert_nodes([NodeInfo("a", {"cpu": 4000})])  # capacity changed: a new generation
    again = LeastAllocated().score(PodRequest.of(pod, snap), snap, np.arange(2))
    assert first.tolist() == [50.0, 75.0] and again.tolist() == [87.5, 75.0]
    snap.upsert_nodes([NodeInfo("c", {"memory": 1})])  # a node without cpu: the np.where path again
    third = LeastAllocated().score(PodRequest.of(pod, snap), snap, np.arange(3))
    assert third.tolist() == [87.5, 75.0, 0.0]


def _pods() -> list[PodInfo]:
    rich = PodInfo(
        "ns",
        "rich",
        uid="u-1",
        priority=7,
        created_at=12.5,
        requests={"cpu": 100, "memory": 5, "pods": 1000},
        placement=Placement(
            node_selector=(("zone", "a"), ("disk", "ssd")),
            affinity_terms=(
                SelectorTerm(
                    (SelectorRequirement("gpu", "In", ("a100", "h100")), SelectorRequirement("spot", "DoesNotExist")),
                    (SelectorRequirement("metadata.name", "NotIn", ("n1",)),),
                ),
                SelectorTerm((SelectorRequirement("cores", "Gt", ("4",)),)),
            ),
            tolerations=(Toleration("gpu", "Exists", "", "NoSchedule"), Toleration()),
        ),
        gang="ns/g",
        gang_created_at=3.0,
        node_name="n2",
        annotations={"a": "b"},
        labels={"app": "x"},
        duration=30.0,
        invalid="",
    )
    affine = dataclasses.replace(
        rich,
        name="affine",
        pod_affinity=PodAffinitySpec(
            required_anti_affinity=(PodAffinityTerm("zone", LabelSelector((("app", "x"),)), ("ns",)),),
            preferred_affinity=(
                WeightedPodAffinityTerm(
                    7, PodAffinityTerm("host", LabelSelector((), (LabelRequirement("tier", "In", ("a", "b")),)))
                ),
            ),
            spread=(TopologySpreadConstraint(2, "zone", "ScheduleAnyway", LabelSelector(), 3, ("rev",)),),
        ),
    )
    return [PodInfo("ns", "plain"), rich, dataclasses.replace(rich, duration=None, invalid="bad"), affine]


@pytest.mark.parametrize("pod", _pods(), ids=lambda p: p.name)
def test_pod_to_json_is_asdict(pod: PodInfo) -> None:
    fast = pod_to_json(pod)
    plain = {**dataclasses.asdict(pod), "pod_affinity": affinity_to_plain(pod.pod_affinity)}
    assert fast == plain
    assert json.dumps(fast) == json.dumps(plain)  # same keys in the same order
    assert pod_from_json(json.loads(json.dumps(fast))) == pod
    fast["requests"]["cpu"] = -1  # a copy, as asdict makes
    assert pod.requests.get("cpu") != -1


def test_records_of_one_placement_share_it_and_others_keep_their_own() -> None:
    # A restarted scheduler reads every reservation record: a job's pods, one placement, are built once.
    rich = _pods()[1]
    twins = [dataclasses.replace(rich, name=f"p{i}", uid=f"u{i}") for i in range(3)]
    other = dataclasses.replace(rich, placement=dataclasses.replace(rich.placement, node_selector=(("zone", "b"),)))
    read = [pod_from_json(json.loads(json.dumps(pod_to_json(p)))) for p in [*twins, other]]
    assert read[:3] == twins and read[3] == other
    assert read[0].placement is read[1].placement is read[2].placement
    assert read[3].placement is not read[0].placement
    assert read[3].placement.node_selector == (("zone", "b"),)


@pytest.mark.parametrize(
    "gang",
    [
        GangSpec("ns", "g", 3, 3),
        GangSpec(
            "ns",
            "rich",
            2,
            4,
            mode=GangMode.NON_STRICT,
            groups=("ns/rich", "ns/other"),
            wait_seconds=30.5,
            min_resources={"cpu": 4000, "nvidia.com/gpu": 2000},
            created_at=1795867200.25,
            source="podgroup/scheduling.x-k8s.io",
            invalid="",
            match_policy="only-waiting",
            queue="team-a",
            min_task_member={"worker": 2, "ps": 1},
        ),
    ],
    ids=lambda g: g.name,
)
def test_gang_to_json_is_asdict(gang: GangSpec) -> None:
    assert gang_to_json(gang) == fast_json.dumps({**dataclasses.asdict(gang), "mode": gang.mode.value})
    assert gang_from_json(gang_to_json(gang)) == gang


@pytest.mark.parametrize(
    "node",
    [
        NodeInfo("n0"),
        NodeInfo(
            "n1",
            allocatable={"cpu": 32000, "nvidia.com/gpu": 8000},
            labels={"zone": "a", "kubernetes.io/hostname": "n1"},
            taints=(Taint("gpu", "true", "NoSchedule"), Taint("spot", effect="PreferNoSchedule")),
            unschedulable=True,
        ),
    ],
    ids=lambda n: n.name,
)
def test_node_to_json_is_asdict(node: NodeInfo) -> None:
    assert node_to_json(node) == fast_json.dumps(dataclasses.asdict(node))
    assert node_from_json(node_to_json(node)) == node


def test_gang_record_copy_matches_deepcopy() -> None:
    # copy() names every field: a new field must be added there (and here) or it would be dropped.
    assert [f.name for f in dataclasses.fields(GangRecord)] == [
        "key",
        "cycle",
        "valid",
        "first_wait",
        "satisfied_at",
        "timed_out",
        "trace",
        "assumed",
        "bound",
        "rounds",
        "roles",
        "retry_at",
        "timeouts",
        "succeeded",
    ]
    rec = GangRecord(
        "ns/g",
        cycle=3,
        valid=False,
        first_wait=1.0,
        satisfied_at=None,
        timed_out=False,
        trace="t",
        assumed={"ns/a"},
        bound={"ns/b"},
        rounds={"ns/a": 2},
        roles={"ns/a": "worker"},
        retry_at=2.0,
        timeouts=1,
        succeeded=4,
    )
    copied = rec.copy()
    assert copied == copy.deepcopy(rec)
    for f in dataclasses.fields(GangRecord):  # every mutable field is copied, not shared
        value = getattr(rec, f.name)
        if not isinstance(value, (str, int, float, bool, type(None), tuple, frozenset)):
            assert getattr(copied, f.name) is not value, f.name
    copied.assumed.add("ns/c")
    copied.rounds["ns/a"] = 9
    copied.roles["ns/b"] = "master"
    assert rec.assumed == {"ns/a"} and rec.rounds == {"ns/a": 2} and rec.roles == {"ns/a": "worker"}
