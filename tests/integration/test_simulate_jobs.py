"""PhalanxJobs in `phalanx simulate`: a workload holding jobs runs them as phalanx-controller would create
them (the leader first, the gang of leader + minWorkersNum), and the report's `jobs` has each job's stages
(the controller's rules replayed on the pods' virtual times), wait and run times."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import make_node

from phalanx.model.keys import SIM_DURATION
from phalanx.report.summary import summary_lines
from phalanx.sim.driver import SimOptions
from phalanx.sim.run import simulate
from phalanx.sim.workload import load_workload

REPO = Path(__file__).resolve().parents[2]


def job(name: str, *, workers: int, minimum: int, leader_runs: str, worker_runs: str, at: str, **spec: Any) -> Any:
    def template(runs: str) -> dict[str, Any]:
        resources = {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}
        return {
            "metadata": {"annotations": {SIM_DURATION: runs}},
            "spec": {"containers": [{"name": "main", "image": "x", "resources": resources}]},
        }

    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "PhalanxJob",
        "metadata": {"name": name, "namespace": "rl", "creationTimestamp": at},
        "spec": {
            "leader": {"name": "learner", "template": template(leader_runs)},
            "workerSets": [{"name": "actor", "counts": workers, "template": template(worker_runs)}],
            "minWorkersNum": minimum,
            **spec,
        },
    }


def run(tmp_path: Path, objects: list[dict[str, Any]]) -> dict[str, Any]:
    path = tmp_path / "workload.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    workload = load_workload([path])
    assert not workload.errors, workload.errors
    return simulate(workload, SimOptions(), log_dir=tmp_path / "logs")


@pytest.mark.integration
def test_two_jobs_on_capacity_for_one_run_one_after_the_other(tmp_path: Path) -> None:
    node = make_node("gpu-1").cpu("16").memory("64Gi").gpu(4).build()
    report = run(
        tmp_path,
        [
            node,
            job("a", workers=3, minimum=3, leader_runs="100s", worker_runs="100s", at="2026-01-01T00:00:00Z"),
            job("b", workers=3, minimum=3, leader_runs="50s", worker_runs="50s", at="2026-01-01T00:00:01Z"),
        ],
    )
    jobs = {j["name"]: j for j in report["jobs"]}
    assert [s["stage"] for s in jobs["a"]["stages"]] == ["Pending", "Running", "Succeeded"]
    assert jobs["a"]["waitSeconds"] == 0 and jobs["a"]["runSeconds"] == 100
    assert jobs["b"]["stage"] == "Succeeded" and jobs["b"]["waitSeconds"] == 99 and jobs["b"]["runSeconds"] == 50
    lines = summary_lines(report)
    assert "  job rl/b: Pending at 1 s, Running at 1m 40s, Succeeded at 2m 30s; waited 1m 39s, ran 50 s" in lines, lines
    pods = {p["name"]: p for p in report["pods"]}
    assert {p["gang"] for p in report["pods"]} == {"rl/a", "rl/b"}
    assert all(pods[f"b-{n}"]["boundAt"] >= 100 for n in ("learner", "actor-0", "actor-1", "actor-2"))


@pytest.mark.integration
def test_min_workers_below_the_count_starts_at_the_minimum(tmp_path: Path) -> None:
    """3 GPUs held 30 s by a pod; 5 GPUs: a job of 1 + 3 with a minimum of 1 starts on the free 2 at once
    (Running, ScheduledPartly) and takes the other 2 places when the pod ends."""
    node = make_node("gpu-1").cpu("16").memory("64Gi").gpu(5).build()
    blocker = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "blocker",
            "namespace": "rl",
            "annotations": {SIM_DURATION: "30s"},
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {
            "schedulerName": "phalanx",
            "priority": 100,
            "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "3"}}}],
        },
    }
    report = run(
        tmp_path,
        [
            node,
            blocker,
            job("rl", workers=3, minimum=1, leader_runs="60s", worker_runs="60s", at="2026-01-01T00:00:01Z"),
        ],
    )
    [rl] = report["jobs"]
    stages = [(s["stage"], s["scheduleState"]) for s in rl["stages"]]
    assert stages[:2] == [("Pending", "Unscheduled"), ("Running", "ScheduledPartly")], stages
    assert rl["waitSeconds"] == 0 and rl["stage"] == "Succeeded"
    bound = sorted(p["boundAt"] for p in report["pods"] if p["name"].startswith("rl-"))
    assert bound == [1, 1, 30, 30], bound


def test_a_job_the_controller_would_refuse_is_an_error_naming_the_field(tmp_path: Path) -> None:
    bad = job("bad", workers=2, minimum=3, leader_runs="1s", worker_runs="1s", at="2026-01-01T00:00:00Z")
    path = tmp_path / "workload.yaml"
    path.write_text(yaml.safe_dump_all([bad, make_node("n").gpu(1).build()]))
    workload = load_workload([path])
    assert workload.errors == [f"{path}#1: PhalanxJob rl/bad: spec.minWorkersNum: 3 must be between 0 and 2; skipped"]
    assert [o.kind for o in workload.objects] == ["Node"] and not workload.jobs


def test_the_example_job_loads_leader_first() -> None:
    workload = load_workload([REPO / "examples" / "phalanx-job.yaml"])
    assert not workload.errors
    assert [o.name for o in workload.objects if o.kind == "Pod"][0] == "rl-train-learner"
    [group] = [o for o in workload.objects if o.kind == "PodGroup"]
    assert group.obj["spec"] == {"minMember": 4, "minTaskMember": {"leader": 1, "worker": 3}}
