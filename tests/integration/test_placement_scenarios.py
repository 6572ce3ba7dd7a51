"""GPU placement through the real stack (redis-server, queue, scheduler and binder as processes): the
default profile's GPUFragmentation against spreading, for gangs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import make_node, make_pod

from phalanx.model.keys import BASIC_POLICY, KOORD_MIN_AVAILABLE, KOORD_NAME, KOORD_WAITING_TIME
from phalanx.sim.driver import SimOptions
from phalanx.sim.run import simulate
from phalanx.sim.workload import load_workload

pytestmark = pytest.mark.integration


def _gang(name: str, size: int, gpus: int, at: int) -> list[dict[str, Any]]:
    return [
        make_pod(f"{name}-{i}")
        .scheduler("phalanx")
        .container()
        .gpu(gpus)
        .cpu("1")
        .created(f"2026-01-01T00:00:{at:02d}Z")
        .annotation(KOORD_NAME, name)
        .annotation(KOORD_MIN_AVAILABLE, str(size))
        .annotation(KOORD_WAITING_TIME, "30s")
        .build()
        for i in range(size)
    ]


def _run(tmp_path: Path, profile: str | None) -> dict[str, Any]:
    nodes = [make_node(f"n{i}").cpu("64").memory("256Gi").gpu(8).build() for i in range(3)]
    # A gang of four 2-GPU pods, then a gang of two 8-GPU pods: on three 8-GPU nodes both fit only if the
    # first gang leaves two nodes whole.
    objects = nodes + _gang("small", 4, 2, 0) + _gang("large", 2, 8, 5)
    path = tmp_path / "workload.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    env = None
    if profile is not None:
        (tmp_path / "profile.yaml").write_text(profile)
        env = {"PHALANX_PROFILE": str(tmp_path / "profile.yaml")}
    return simulate(load_workload([path]), SimOptions(), scheduler_env=env, log_dir=tmp_path / "logs")


def test_default_profile_packs_a_gang_so_the_next_gang_still_fits(tmp_path: Path) -> None:
    report = _run(tmp_path, None)
    nodes = {p["name"]: p["node"] for p in report["pods"]}
    assert len({nodes[f"small-{i}"] for i in range(4)}) == 1
    assert all(nodes[f"large-{i}"] for i in range(2))
    assert report["summary"]["gangsBound"] == 2


def test_spreading_strands_the_large_gang(tmp_path: Path) -> None:
    report = _run(tmp_path, "scores:\n  LeastAllocated: 1\n")
    nodes = {p["name"]: p["node"] for p in report["pods"]}
    assert len({nodes[f"small-{i}"] for i in range(4)}) == 3
    assert not any(nodes[f"large-{i}"] for i in range(2))
    assert report["summary"]["gangsBound"] == 1


def _simulate(tmp_path: Path, objects: list[dict[str, Any]]) -> dict[str, str]:
    path = tmp_path / "workload.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    report = simulate(load_workload([path]), SimOptions(), log_dir=tmp_path / "logs")
    return {p["name"]: p["node"] for p in report["pods"]}


def test_a_job_chooses_its_placement_policy_by_annotation(tmp_path: Path) -> None:
    """Two identical gangs of three 1-GPU pods: the default packs its gang on one node, the one annotated
    JobAntiAffinity gets one pod per node (the annotation crosses queue and scheduler)."""
    nodes = [make_node(f"n{i}").cpu("64").memory("256Gi").gpu(8).build() for i in range(3)]
    spread = _gang("spread", 3, 1, 0)
    for pod in spread:
        pod["metadata"]["annotations"][BASIC_POLICY] = "JobAntiAffinity"
    placed = _simulate(tmp_path, nodes + _gang("packed", 3, 1, 0) + spread)
    assert len({placed[f"packed-{i}"] for i in range(3)}) == 1
    assert sorted(placed[f"spread-{i}"] for i in range(3)) == ["n0", "n1", "n2"]


def test_leader_first_reads_the_leader_from_its_label_through_the_services(tmp_path: Path) -> None:
    """A busy node and an idle one: LeaderFirst puts the job's leader (a Kubeflow Master, known by its
    label, which must cross the gRPC hops) on the idle node and its workers on the busy one."""
    nodes = [make_node(f"n{i}").cpu("64").memory("256Gi").gpu(8).build() for i in range(2)]
    busy = make_pod("busy").scheduler("phalanx").container().gpu(6).cpu("1").node_name("n0").build()
    job = _gang("job", 3, 1, 1)
    job[0]["metadata"].setdefault("labels", {})["training.kubeflow.org/replica-type"] = "Master"
    for pod in job:
        pod["metadata"]["annotations"][BASIC_POLICY] = "LeaderFirst"
    placed = _simulate(tmp_path, [*nodes, busy, *job])
    assert placed["job-0"] == "n1", placed
    assert placed["job-1"] == placed["job-2"] == "n0"
