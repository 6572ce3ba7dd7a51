"""Seed 001's per-job placement policies: each plugin's preference, the annotation that picks a policy per
job, the profile's default, and the errors that name a mistyped policy."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from builders import model_node, model_pod

from phalanx.framework.profile import Profile, ProfileError, load_profile
from phalanx.framework.snapshot import Snapshot
from phalanx.intake.errors import IntakeError
from phalanx.intake.pods import parse_pod
from phalanx.model import keys
from phalanx.model.objects import NodeInfo, PodInfo
from phalanx.model.policies import basic_policy_of, check_basic_policy
from phalanx.plugins.job_policies import is_leader
from phalanx.plugins.registry import in_tree_framework


def _snapshot(nodes: list[NodeInfo]) -> Snapshot:
    framework = in_tree_framework()
    snap = Snapshot()
    snap.set_nodes(framework.prepare_nodes(nodes), {})
    return snap


def _with(pod: PodInfo, policy: str, **annotations: str) -> PodInfo:
    return replace(pod, annotations={keys.BASIC_POLICY: policy, **annotations})


def _place(snap: Snapshot, pod: PodInfo, profile: Profile | None = None) -> str:
    """Places the pod and reserves it there, as a scheduling round does; returns the node's name."""
    result = in_tree_framework(profile).place(pod, snap)
    assert result.node_index is not None, result.message
    snap.reserve(result.node_index, result.requests, pod=pod)
    return snap.nodes[result.node_index].name


def _busy(snap: Snapshot, node: str, pod: PodInfo) -> None:
    snap.reserve(snap.index[node], in_tree_framework().place(pod, _only(snap, node)).requests, pod=pod)


def _only(snap: Snapshot, node: str) -> Snapshot:
    """A one-node snapshot of `node` (to learn what a pod holds there, devices included)."""
    one = Snapshot()
    one.set_nodes([snap.nodes[snap.index[node]]], {})
    return one


def test_binpack_fills_the_used_node_where_the_default_spreads_cpu_pods() -> None:
    nodes = [model_node(f"n{i}", cpu=16, memory_gib=64) for i in range(3)]
    spread, packed = _snapshot(nodes), _snapshot(nodes)
    pods = [model_pod(f"p{i}", "job", cpu=4) for i in range(3)]
    assert len({_place(spread, p) for p in pods}) == 3
    assert len({_place(packed, _with(p, "BinPack")) for p in pods}) == 1


def test_job_anti_affinity_spreads_a_gang_that_the_default_packs() -> None:
    nodes = [model_node(f"n{i}", gpus=8) for i in range(3)]
    default, anti = _snapshot(nodes), _snapshot(nodes)
    pods = [model_pod(f"w{i}", "job", gpus=1) for i in range(3)]
    assert len({_place(default, p) for p in pods}) == 1
    assert sorted(_place(anti, _with(p, "JobAntiAffinity")) for p in pods) == ["n0", "n1", "n2"]


def test_job_anti_affinity_spreads_over_zones_before_nodes() -> None:
    zones = {"n0": "a", "n1": "a", "n2": "b", "n3": "b"}
    snap = _snapshot([model_node(n, gpus=8, labels={"topology.kubernetes.io/zone": z}) for n, z in zones.items()])
    placed = [_place(snap, _with(model_pod(f"w{i}", "job", gpus=1), "JobAntiAffinity")) for i in range(2)]
    assert {zones[n] for n in placed} == {"a", "b"}


def test_job_affinity_keeps_a_job_in_the_roomiest_zone() -> None:
    # Zone a has one node, zone b three: three 6-GPU pods (one per node) all fit in zone b only.
    zones = {"n0": "a", "n1": "b", "n2": "b", "n3": "b"}
    nodes = [model_node(n, gpus=8, labels={"rack": z}) for n, z in zones.items()]
    pods = [model_pod(f"w{i}", "job", gpus=6) for i in range(3)]
    snap = _snapshot(nodes)
    placed = [_place(snap, _with(p, "JobAffinity", **{keys.JOB_TOPOLOGY_KEY: "rack"})) for p in pods]
    assert {zones[n] for n in placed} == {"b"}
    default = _snapshot(nodes)
    assert {zones[_place(default, p)] for p in pods} == {"a", "b"}


def test_job_affinity_puts_the_job_on_as_few_nodes_as_fit() -> None:
    snap = _snapshot([model_node(f"n{i}", cpu=16, memory_gib=64) for i in range(3)])
    _busy(snap, "n0", model_pod("other", cpu=8))  # the fullest node would attract a packing policy
    placed = [_place(snap, _with(model_pod(f"w{i}", "job", cpu=4), "JobAffinity")) for i in range(4)]
    assert len(set(placed)) == 1 and placed[0] != "n0"


def test_leader_first_sends_the_leader_to_the_idle_node_and_workers_to_the_busy_one() -> None:
    snap = _snapshot([model_node(f"n{i}", gpus=8) for i in range(3)])
    _busy(snap, "n0", model_pod("old", gpus=6))
    _busy(snap, "n1", model_pod("older", gpus=2))
    leader = replace(model_pod("leader", "job", gpus=1), labels={"training.kubeflow.org/replica-type": "Master"})
    workers = [model_pod(f"worker{i}", "job", gpus=1) for i in range(2)]
    assert _place(snap, _with(leader, "LeaderFirst")) == "n2"
    assert [_place(snap, _with(w, "LeaderFirst")) for w in workers] == ["n0", "n0"]


def test_the_leader_is_found_by_the_phalanx_role_or_an_operator_role_label() -> None:
    pod = model_pod("p", "job")
    assert not is_leader(pod)
    assert is_leader(replace(pod, annotations={keys.ROLE: "leader"}))
    assert is_leader(replace(pod, labels={keys.ROLE: "Learner"}))
    assert is_leader(replace(pod, labels={"volcano.sh/task-spec": "master"}))
    assert not is_leader(replace(pod, labels={"training.kubeflow.org/replica-type": "Worker"}))


def test_min_fragment_policy_balances_cpu_and_memory_where_the_default_spreads() -> None:
    nodes = [model_node("n0", cpu=16, memory_gib=64), model_node("n1", cpu=16, memory_gib=64)]
    pod = model_pod("memory-heavy", "job", cpu=1, memory_gib=24)
    outcomes = {}
    for policy in ("Default", "MinFragment"):
        snap = _snapshot(nodes)
        _busy(snap, "n0", model_pod("cpu-heavy", cpu=10, memory_gib=4))
        _busy(snap, "n1", model_pod("mem-heavy", cpu=1, memory_gib=30))
        outcomes[policy] = _place(snap, _with(pod, policy))
    assert outcomes == {"Default": "n1", "MinFragment": "n0"}


def test_the_profile_sets_the_policy_of_jobs_that_name_none(tmp_path: Path) -> None:
    path = tmp_path / "profile.yaml"
    path.write_text("basicPolicy: jobantiaffinity\n")
    profile = load_profile(path)
    assert profile.basic_policy == "JobAntiAffinity"
    snap = _snapshot([model_node(f"n{i}", gpus=8) for i in range(2)])
    assert {_place(snap, model_pod(f"w{i}", "job", gpus=1), profile) for i in range(2)} == {"n0", "n1"}
    # A job's own annotation wins over the profile's default.
    packed = _snapshot([model_node(f"n{i}", gpus=8) for i in range(2)])
    assert len({_place(packed, _with(model_pod(f"w{i}", "job", gpus=1), "Default"), profile) for i in range(2)}) == 1


def test_an_unknown_policy_is_refused_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "profile.yaml"
    path.write_text("basicPolicy: BinPacking\n")
    with pytest.raises(ProfileError, match=r"basicPolicy: unknown basic policy 'BinPacking' \(known: Default"):
        load_profile(path)
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "annotations": {keys.BASIC_POLICY: "Spread"}},
        "spec": {"containers": []},
    }
    with pytest.raises(IntakeError, match=r"Pod ns/p: metadata.annotations\[phalanx.dev/basic-policy\]: unknown"):
        parse_pod(pod)
    pod["metadata"]["annotations"] = {keys.JOB_QUEUE_POLICY: "fair"}  # type: ignore[index]
    with pytest.raises(
        IntakeError, match=r"job-queue-policy\]: unknown job-queue policy 'fair' \(known: Priority, DRF"
    ):
        parse_pod(pod)


def test_policy_names_are_read_in_any_case() -> None:
    assert check_basic_policy(" binpack ") == "BinPack"
    assert basic_policy_of(model_pod("p"), "MinFragment") == "MinFragment"
    assert basic_policy_of(_with(model_pod("p"), "leaderfirst")) == "LeaderFirst"
