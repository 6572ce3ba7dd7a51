"""PhalanxJobs in `phalanx simulate`: a workload holding jobs runs them as phalanx-controller would (the
leader first, the gang of leader + minWorkersNum; lost pods recreated within restartLimit; pods cleaned as
cleanPodPolicy says when the job ends, at that virtual instant), and the report's `jobs` has each job's
stages as the controller took it through them, its wait and run times and restarts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import make_node

from phalanx.model.keys import SIM_DURATION
from phalanx.report.summary import summary_lines
from phalanx.sim.driver import SimOptions
from phalanx.sim.jobs import SIM_FAILURES
from phalanx.sim.run import simulate
from phalanx.sim.workload import load_workload

REPO = Path(__file__).resolve().parents[2]


def job(
    name: str,
    *,
    workers: int,
    minimum: int,
    leader_runs: str,
    worker_runs: str,
    at: str,
    failures: str | None = None,
    **spec: Any,
) -> Any:
    def template(runs: str) -> dict[str, Any]:
        resources = {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}
        return {
            "metadata": {"annotations": {SIM_DURATION: runs}},
            "spec": {"containers": [{"name": "main", "image": "x", "resources": resources}]},
        }

    meta: dict[str, Any] = {"name": name, "namespace": "rl", "creationTimestamp": at}
    if failures is not None:
        meta["annotations"] = {SIM_FAILURES: failures}
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "PhalanxJob",
        "metadata": meta,
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


def gpu_job(name: str, *, gpus: int, runs: str, at: str, priority: int = 0) -> list[dict[str, Any]]:
    """A plain gang (PodGroup and pods) of `gpus` one-GPU pods: what waits for a job's capacity."""
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "rl", "creationTimestamp": at},
        "spec": {"minMember": gpus},
    }
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-{i}",
                "namespace": "rl",
                "labels": {"scheduling.x-k8s.io/pod-group": name},
                "annotations": {SIM_DURATION: runs},
                "creationTimestamp": at,
            },
            "spec": {
                "schedulerName": "phalanx",
                "priority": priority,
                "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}],
            },
        }
        for i in range(gpus)
    ]
    return [group, *pods]


@pytest.mark.integration
def test_the_leader_is_created_first_then_its_workers_in_the_same_pass(tmp_path: Path) -> None:
    """As the controller's _apply: one reconcile creates the leader, then each worker, at the job's arrival."""
    node = make_node("gpu-1").cpu("16").memory("64Gi").gpu(4).build()
    at = "2026-01-01T00:00:05Z"
    report = run(
        tmp_path,
        [
            node,
            job("first", workers=1, minimum=1, leader_runs="10s", worker_runs="10s", at="2026-01-01T00:00:00Z"),
            job("a", workers=3, minimum=2, leader_runs="10s", worker_runs="10s", at=at),
        ],
    )
    a = next(j for j in report["jobs"] if j["name"] == "a")
    assert a["created"] == [{"pod": p, "at": 5.0} for p in ("a-learner", "a-actor-0", "a-actor-1", "a-actor-2")]
    pods = {p["name"]: p for p in report["pods"]}
    assert all(pods[p["pod"]]["createdAt"] == 5.0 for p in a["created"])


@pytest.mark.integration
def test_a_worker_that_fails_once_is_recreated_and_the_job_succeeds(tmp_path: Path) -> None:
    """actor-1 fails 30 s after its start: its restart is counted (Rescheduling), it is deleted and made
    again under its name at that instant, scheduled again, and the job goes back to Running and Succeeds
    when the leader does."""
    node = make_node("gpu-1").cpu("16").memory("64Gi").gpu(4).build()
    a = job(
        "a",
        workers=2,
        minimum=2,
        leader_runs="100s",
        worker_runs="100s",
        at="2026-01-01T00:00:00Z",
        failures="[{pod: actor-1, after: 30s}]",
        restartLimit=1,
    )
    report = run(tmp_path, [node, a])
    [rl] = report["jobs"]
    assert [(s["stage"], s["at"]) for s in rl["stages"]] == [
        ("Pending", 0),
        ("Running", 0),
        ("Rescheduling", 30),
        ("Running", 30),
        ("Succeeded", 100),
    ], rl["stages"]
    assert rl["stages"][2]["message"] == "recreating a-actor-1"
    assert rl["restarts"] == 1 and rl["podRestarts"] == {"a-actor-1": 1}
    assert rl["created"][-1] == {"pod": "a-actor-1", "at": 30.0}
    pods = {p["name"]: p for p in report["pods"]}
    actor = pods["a-actor-1"]
    [failed] = actor["previous"]
    assert (failed["startedAt"], failed["finishedAt"], failed["ended"]) == (0, 30, "Failed")
    # the new pod starts at 30 for its own 100 s; the leader's success at 100 ends it (cleanPodPolicy All)
    assert (actor["boundAt"], actor["finishedAt"], actor["ended"]) == (30, 100, "Deleted")
    assert actor["annotations"]["phalanx.dev/restarts"] == "1"
    lines = summary_lines(report)
    assert (
        "  job rl/a: Pending at 0 s, Running at 0 s, Rescheduling at 30 s, Running at 30 s, Succeeded at 1m 40s; "
        "waited 0 s, ran 1m 40s, 1 restart" in lines
    ), lines


@pytest.mark.integration
def test_a_recreated_pod_waits_for_capacity_when_another_took_its_place(tmp_path: Path) -> None:
    """The failed worker's GPU is freed at its failure; a gang waiting for one GPU (of the job's priority, 5:
    neither preempts the other) takes it in that instant, and the recreated worker goes through the
    scheduler again: it waits (Rescheduling) until that gang ends."""
    node = make_node("gpu-1").cpu("16").memory("64Gi").gpu(3).build()
    a = job(
        "a",
        workers=2,
        minimum=2,
        leader_runs="100s",
        worker_runs="100s",
        at="2026-01-01T00:00:00Z",
        failures="[{pod: actor-0, after: 10s}]",
    )
    report = run(tmp_path, [node, a, *gpu_job("other", gpus=1, runs="20s", at="2026-01-01T00:00:01Z", priority=5)])
    [rl] = report["jobs"]
    assert [(s["stage"], s["at"]) for s in rl["stages"]][2:] == [
        ("Rescheduling", 10),
        ("Running", 30),
        ("Succeeded", 100),
    ]
    pods = {p["name"]: p for p in report["pods"]}
    assert pods["other-0"]["boundAt"] == 10
    assert pods["a-actor-0"]["createdAt"] == 10 and pods["a-actor-0"]["boundAt"] == 30


@pytest.mark.integration
def test_a_leader_failing_past_restart_limit_fails_the_job_and_frees_its_workers_then(tmp_path: Path) -> None:
    """restartLimit 1: the leader fails 10 s after each start; its first loss is recreated, its second fails
    the job at 20 s, and its workers (cleanPodPolicy All) end then: the gang waiting for their GPUs starts
    at 20 s, not when they would have finished (100 s)."""
    node = make_node("gpu-1").cpu("16").memory("64Gi").gpu(4).build()
    a = job(
        "a",
        workers=2,
        minimum=2,
        leader_runs="100s",
        worker_runs="100s",
        at="2026-01-01T00:00:00Z",
        failures="[{pod: learner, after: 10s, times: 5}]",
        restartLimit=1,
    )
    report = run(tmp_path, [node, a, *gpu_job("waiting", gpus=3, runs="10s", at="2026-01-01T00:00:01Z")])
    [rl] = report["jobs"]
    assert [(s["stage"], s["at"]) for s in rl["stages"]] == [
        ("Pending", 0),
        ("Running", 0),
        ("Rescheduling", 10),
        ("Running", 10),
        ("Failed", 20),
    ], rl["stages"]
    assert rl["stage"] == "Failed" and rl["restarts"] == 2 and rl["runSeconds"] == 20
    assert rl["message"] == "the leader a-learner was restarted 2 times (restartLimit 1)"
    pods = {p["name"]: p for p in report["pods"]}
    for worker in ("a-actor-0", "a-actor-1"):
        assert (pods[worker]["finishedAt"], pods[worker]["ended"], pods[worker]["deletedAt"]) == (20, "Deleted", 20)
    assert [p["ended"] for p in pods["a-learner"]["previous"]] == ["Failed"]
    assert pods["a-learner"]["ended"] == "Failed" and pods["a-learner"]["finishedAt"] == 20
    assert [pods[f"waiting-{i}"]["boundAt"] for i in range(3)] == [20, 20, 20]
    assert "Failed at 20 s; waited 0 s, ran 20 s, 2 restarts" in "\n".join(summary_lines(report))


@pytest.mark.integration
@pytest.mark.parametrize(
    ("policy", "actors_end", "eval_deleted", "waiting_bound"),
    [
        ("All", (50, "Deleted"), 50, 50),  # every pod deleted, the finished eval worker too
        ("Running", (50, "Deleted"), None, 50),  # the running actors deleted, the finished eval kept
        ("None", (100, None), None, 100),  # nothing deleted: the actors run to their end
    ],
)
def test_clean_pod_policy_when_the_leader_succeeds(
    tmp_path: Path,
    policy: str,
    actors_end: tuple[float, str | None],
    eval_deleted: float | None,
    waiting_bound: float,
) -> None:
    """The leader succeeds at 50 s; actors would run to 100 s, the eval worker finished at 10 s. The job is
    Succeeded at 50 s whatever the policy; what ends then, and so when the gang waiting for 3 of the 4 GPUs
    gets them, is the policy's."""
    node = make_node("gpu-1").cpu("16").memory("64Gi").gpu(4).build()
    a = job(
        "a",
        workers=2,
        minimum=2,
        leader_runs="50s",
        worker_runs="100s",
        at="2026-01-01T00:00:00Z",
        cleanPodPolicy=policy,
    )
    evaluator = {
        "name": "eval",
        "counts": 1,
        "template": {
            "metadata": {"annotations": {SIM_DURATION: "10s"}},
            "spec": {"containers": [{"name": "e", "image": "x", "resources": {"requests": {"cpu": "1"}}}]},
        },
    }
    a["spec"]["workerSets"].append(evaluator)
    report = run(tmp_path, [node, a, *gpu_job("waiting", gpus=3, runs="10s", at="2026-01-01T00:00:01Z")])
    [rl] = report["jobs"]
    assert [(s["stage"], s["at"]) for s in rl["stages"]][-1] == ("Succeeded", 50)
    pods = {p["name"]: p for p in report["pods"]}
    for actor in ("a-actor-0", "a-actor-1"):
        assert (pods[actor]["finishedAt"], pods[actor]["ended"]) == actors_end
    assert pods["a-eval-0"]["finishedAt"] == 10 and pods["a-eval-0"]["ended"] is None
    assert pods["a-eval-0"]["deletedAt"] == eval_deleted
    assert pods["a-learner"]["ended"] is None and pods["a-learner"]["finishedAt"] == 50
    assert [pods[f"waiting-{i}"]["boundAt"] for i in range(3)] == [waiting_bound] * 3


@pytest.mark.parametrize(
    ("failures", "error"),
    [
        ("{pod: actor-0}", "metadata.annotations[simulation.phalanx.dev/failures]: must be a list of"),
        ("[{pod: actor-7, after: 1s}]", "[0].pod: 'actor-7' is not a pod of this job (learner, actor-0, actor-1)"),
        ("[{pod: learner}]", "[0].after: required"),
        ("[{pod: learner, after: soon}]", '[0].after: "soon" is not a duration'),
        ("[{pod: learner, after: 1s}, {pod: learner, after: 1s, times: 0}]", "[1].times: 0 must be an integer"),
        ("[{pod: learner, after: 1s, when: 3}]", "[0].when: unknown field (known: pod, after, times)"),
        ("[{pod: learner, after: -1}]", "[0].after: -1 is not a non-negative duration"),
    ],
)
def test_bad_planned_failures_are_an_error_naming_the_field(tmp_path: Path, failures: str, error: str) -> None:
    bad = job("bad", workers=2, minimum=1, leader_runs="1s", worker_runs="1s", at="2026-01-01T00:00:00Z")
    bad["metadata"]["annotations"] = {SIM_FAILURES: failures}
    path = tmp_path / "workload.yaml"
    path.write_text(yaml.safe_dump_all([bad, make_node("n").gpu(1).build()]))
    workload = load_workload([path])
    [message] = workload.errors
    assert message.startswith(f"{path}#1: PhalanxJob rl/bad: metadata.annotations[") and error in message, message
    assert message.endswith("; skipped") and not workload.jobs


@pytest.mark.integration
def test_the_restarts_example_runs_as_the_readme_shows(tmp_path: Path) -> None:
    workload = load_workload([REPO / "examples" / "phalanx-job-restarts.yaml"])
    assert not workload.errors
    lines = [line for line in summary_lines(simulate(workload, SimOptions(), log_dir=tmp_path)) if "  job " in line]
    readme = (REPO / "README.md").read_text()
    assert len(lines) == 2 and all(f"\n{line}\n" in readme for line in lines), lines
