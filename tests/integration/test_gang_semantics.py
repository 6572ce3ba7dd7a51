"""Gang semantics users of Volcano and Koordinator rely on, through the real stack (redis-server and the three
services as processes) on the embedded cluster: Volcano's per-role minimums (PodGroup spec.minTaskMember) and
Koordinator's match-policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import make_node, make_pod, make_podgroup

from phalanx.model.keys import (
    KOORD_MATCH_POLICY,
    KOORD_MIN_AVAILABLE,
    KOORD_NAME,
    KOORD_WAITING_TIME,
    VOLCANO_GROUP_NAME,
    VOLCANO_TASK_SPEC,
)
from phalanx.sim.driver import SimOptions
from phalanx.sim.run import simulate
from phalanx.sim.workload import load_workload

pytestmark = pytest.mark.integration


def run(tmp_path: Path, objects: list[dict[str, Any]], until: float) -> dict[str, Any]:
    path = tmp_path / "workload.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return simulate(load_workload([path]), SimOptions(until=until), log_dir=tmp_path / "logs")


def ts(seconds: int) -> str:
    return f"2026-01-01T00:00:{seconds:02d}Z"


# --- Volcano minTaskMember ------------------------------------------------------------------------------


def test_volcano_min_task_member_binds_one_master_and_one_worker(tmp_path: Path) -> None:
    """Volcano PodGroup minMember 2, minTaskMember {master: 1, worker: 1} (Strict, as intake maps Volcano's
    PodGroups); one master and three workers whose names sort first; room for one pod of each role (node
    selectors by role). Volcano binds one master and one worker; so does Phalanx, and the other two workers
    stay pending, each for its own reason."""
    nodes = [make_node(f"n-{r}").cpu("8").memory("32Gi").gpu(1).label("role", r).build() for r in ("master", "worker")]
    podgroup = (
        make_podgroup("job", api_version="scheduling.volcano.sh/v1beta1")
        .min_member(2)
        .set("spec.minTaskMember", {"master": 1, "worker": 1})
        .build()
    )
    pods = [
        make_pod(f"job-{i}")
        .scheduler("phalanx")
        .container()
        .gpu(1)
        .cpu("1")
        .annotation(VOLCANO_GROUP_NAME, "job")
        .annotation(VOLCANO_TASK_SPEC, role)
        .node_selector("role", role)
        .build()
        for i, role in enumerate(["worker", "worker", "worker", "master"])
    ]
    report = run(tmp_path, [*nodes, podgroup, *pods], until=60)
    placed = {p["name"]: p["node"] for p in report["pods"]}
    assert placed["job-3"] == "n-master"
    assert [n for n in ("job-0", "job-1", "job-2") if placed[n]] == ["job-0"]
    assert placed["job-0"] == "n-worker"
    pending = {p["name"]: p["reason"] for p in report["pods"] if not p["node"]}
    assert all("Insufficient nvidia.com/gpu" in why and "Strict" not in why for why in pending.values()), pending
    assert report["summary"]["gangsBound"] == 1
    assert report["summary"]["podsBound"] == 2


# --- Koordinator match-policy ---------------------------------------------------------------------------


def koord_pod(name: str, policy: str, at: int, node: str = "") -> dict[str, Any]:
    pod = (
        make_pod(name)
        .scheduler("phalanx")
        .container()
        .gpu(1)
        .cpu("1")
        .created(ts(at))
        .annotation(KOORD_NAME, "job")
        .annotation(KOORD_MIN_AVAILABLE, "2")
        .annotation(KOORD_WAITING_TIME, "60s")
        .annotation(KOORD_MATCH_POLICY, policy)
    )
    return (pod.node_name(node) if node else pod).build()


@pytest.mark.parametrize(
    ("policy", "third_bound_at"),
    [("once-satisfied", 10.0), ("waiting-and-running", 10.0), ("only-waiting", 20.0)],
)
def test_match_policy_decides_when_a_later_pod_binds(tmp_path: Path, policy: str, third_bound_at: float) -> None:
    """A gang of min 2 whose first two pods bind at 0 and keep running; a third pod arrives at 10, a fourth at
    20. once-satisfied binds the third alone (the gang is satisfied for good); waiting-and-running binds it too
    (2 running + 1 waiting >= 2); only-waiting holds it until the fourth makes two waiting pods."""
    nodes = [make_node("n1").cpu("64").memory("256Gi").gpu(8).build()]
    pods = [koord_pod(f"w{i}", policy, at) for i, at in enumerate([0, 0, 10, 20])]
    report = run(tmp_path, [*nodes, *pods], until=50)
    bound_at = {p["name"]: p["boundAt"] for p in report["pods"]}
    assert bound_at == {"w0": 0.0, "w1": 0.0, "w2": third_bound_at, "w3": 20.0}


@pytest.mark.parametrize(
    ("policy", "binds"), [("once-satisfied", True), ("waiting-and-running", True), ("only-waiting", False)]
)
def test_pods_found_bound_count_toward_the_gang_by_policy(tmp_path: Path, policy: str, binds: bool) -> None:
    """Two pods of the gang already bound and running when the scheduler starts (spec.nodeName set), a third
    arrives: counted with them unless the gang counts only waiting pods."""
    nodes = [make_node("n1").cpu("64").memory("256Gi").gpu(8).build()]
    pods = [koord_pod("w0", policy, 0, node="n1"), koord_pod("w1", policy, 0, node="n1"), koord_pod("w2", policy, 10)]
    report = run(tmp_path, [*nodes, *pods], until=30)
    third = next(p for p in report["pods"] if p["name"] == "w2")
    assert (third["node"] == "n1") is binds, third
