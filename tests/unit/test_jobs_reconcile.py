"""PhalanxJob rules without a cluster: validation naming the field, the objects built (gang, priority,
policies, leader address) and each stage transition of one reconcile, including the crash-safety rule that a
loss is counted once however often it is looked at."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from phalanx.jobs.api import JobSpecError, parse_spec
from phalanx.jobs.objects import ENV_LEADER_ADDRESS, desired_pods, pod, podgroup
from phalanx.jobs.reconcile import PodView, reconcile

NOW = "2026-01-01T00:00:00Z"


def template(**spec: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "main", "image": "pause"}], **spec}}


def job(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "leader": {"name": "learner", "template": template()},
        "workerSets": [{"name": "actor", "template": template(), "counts": 2}],
        "minWorkersNum": 2,
        "restartLimit": 1,
    }
    base.update(spec)
    meta = {"name": "rl", "namespace": "ns", "uid": "job-uid", "generation": 1, "resourceVersion": "1"}
    return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "PhalanxJob", "metadata": meta, "spec": base}


def view(name: str, phase: str = "Pending", node: str = "", ready: bool = False, uid: str = "") -> PodView:
    return PodView(name, uid or f"uid-{name}", phase, node, ready, False)


def running(*names: str) -> dict[str, PodView]:
    return {n: view(n, "Running", "n1", True) for n in names}


PODS = ["rl-learner", "rl-actor-0", "rl-actor-1"]


def step(j: dict[str, Any], pods: dict[str, PodView], **kw: Any) -> Any:
    plan = reconcile(j, pods, service=True, podgroup=True, now=NOW, **kw)
    j["status"] = copy.deepcopy(plan.status)  # what the controller writes
    return plan


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"priority": 11}, "spec.priority"),
        ({"priority": 0}, "spec.priority"),
        ({"minWorkersNum": 3}, "spec.minWorkersNum"),
        ({"restartLimit": -1}, "spec.restartLimit"),
        ({"cleanPodPolicy": "Some"}, "spec.cleanPodPolicy"),
        ({"schedulerPolicy": {"basicPolicy": "Binpak"}}, "spec.schedulerPolicy.basicPolicy"),
        ({"schedulerPolicy": {"jobQueuePolicy": "FIFO"}}, "spec.schedulerPolicy.jobQueuePolicy"),
        ({"workerSets": []}, "spec.workerSets"),
        ({"workerSets": [{"name": "a", "template": template(), "counts": 0}]}, "spec.workerSets[0].counts"),
        ({"workerSets": [{"name": "learner", "template": template()}]}, "spec.workerSets[0].name"),
        ({"workerSets": [{"name": "A_b", "template": template()}]}, "spec.workerSets[0].name"),
        ({"workerSets": [{"name": "a", "template": {"spec": {}}}]}, "spec.workerSets[0].template.spec.containers"),
        (
            {"leader": {"name": "l", "template": template(restartPolicy="Always")}},
            "spec.leader.template.spec.restartPolicy",
        ),
        (
            {"leader": {"name": "l", "template": template(priorityClassName="x")}},
            "spec.leader.template.spec.priorityClassName",
        ),
        ({"leader": None}, "spec.leader"),
        ({"terminating": "yes"}, "spec.terminating"),
    ],
)
def test_an_invalid_spec_is_refused_naming_the_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(JobSpecError) as err:
        parse_spec(job(**change))
    assert err.value.field == field, str(err.value)
    plan = reconcile(job(**change), {}, service=False, podgroup=False, now=NOW)
    assert not plan.create and not plan.create_podgroup
    [valid] = [c for c in plan.status["conditions"] if c["type"] == "Valid"]
    assert valid["status"] == "False" and valid["message"].startswith(field + ":")


def test_the_seeds_defaults() -> None:
    raw = job()
    for key in ("minWorkersNum", "restartLimit"):
        del raw["spec"][key]
    del raw["spec"]["workerSets"][0]["counts"]
    spec = parse_spec(raw)
    assert (spec.restart_limit, spec.min_workers, spec.priority, spec.clean_pod_policy.value) == (3, 1, 5, "All")
    assert spec.worker_sets[0].counts == 1 and spec.terminating is False
    assert parse_spec(job(schedulerPolicy={"basicPolicy": "binpack"})).basic_policy == "BinPack"


def test_the_pods_carry_the_gang_priority_policies_and_leader_address() -> None:
    raw = job(priority=8, schedulerPolicy={"basicPolicy": "LeaderFirst", "jobQueuePolicy": "DRF"})
    raw["spec"]["workerSets"].append({"name": "eval", "template": template(), "counts": 1})
    spec = parse_spec(raw)
    places = desired_pods("rl", spec)
    assert [n for n, _, _ in places] == ["rl-learner", "rl-actor-0", "rl-actor-1", "rl-eval-0"]
    _, role, index = places[2]
    body = pod(raw, spec, role, index, restarts=2, scheduler_name="phalanx")
    ann, labels, pspec = body["metadata"]["annotations"], body["metadata"]["labels"], body["spec"]
    assert ann["scheduling.k8s.io/group-name"] == "rl" and ann["volcano.sh/task-spec"] == "worker"
    assert ann["phalanx.dev/basic-policy"] == "LeaderFirst" and ann["phalanx.dev/job-queue-policy"] == "DRF"
    assert ann["phalanx.dev/restarts"] == "2" and labels["phalanx.dev/role"] == "worker"
    assert pspec["priorityClassName"] == "phalanx-job-priority-8" and pspec["restartPolicy"] == "Never"
    assert (pspec["hostname"], pspec["subdomain"]) == ("rl-actor-1", "rl")
    env = {e["name"]: e["value"] for e in pspec["containers"][0]["env"]}
    assert env[ENV_LEADER_ADDRESS] == "rl-learner.rl.ns.svc"
    leader = pod(raw, spec, places[0][1], 0, restarts=0, scheduler_name="phalanx")
    assert leader["metadata"]["name"] == "rl-learner" and leader["metadata"]["labels"]["phalanx.dev/role"] == "leader"
    group = podgroup(raw, spec)
    assert group["spec"] == {"minMember": 3, "minTaskMember": {"leader": 1, "worker": 2}}


def test_pending_creates_leader_first_then_starting_running_succeeded() -> None:
    j = job()
    plan = reconcile(j, {}, service=False, podgroup=False, now=NOW)
    assert plan.create_podgroup and plan.create_service
    assert [n for n, _ in plan.create] == PODS  # the leader first
    j["status"] = plan.status
    assert plan.status["stage"] == "Pending" and plan.status["scheduleState"] == "Unscheduled"
    pods = {n: view(n) for n in PODS}
    assert step(j, pods).status["stage"] == "Pending"
    pods = {n: view(n, "Pending", "n1") for n in PODS}
    plan = step(j, pods)
    assert (plan.status["stage"], plan.status["scheduleState"]) == ("Starting", "ScheduledSucceed")
    pods = running(*PODS)
    plan = step(j, pods)
    assert plan.status["stage"] == "Running" and plan.status["startTime"] == NOW and not plan.create
    pods["rl-learner"] = view("rl-learner", "Succeeded", "n1")
    plan = step(j, pods)
    assert plan.status["stage"] == "Succeeded"
    assert sorted(n for n, _ in plan.delete) == sorted(PODS)  # cleanPodPolicy All (the default)
    assert not step(j, pods).create  # finished: nothing is created again


def test_a_lost_worker_is_counted_once_and_recreated() -> None:
    j = job(restartLimit=3)
    pods = running(*PODS)
    step(j, pods)
    pods["rl-actor-1"] = view("rl-actor-1", "Failed", "n1", uid="old")
    plan = step(j, pods)
    assert plan.status["stage"] == "Rescheduling" and plan.counted == ["rl-actor-1"]
    assert plan.delete == [("rl-actor-1", "old")]
    # A controller that crashed after writing that status looks again: nothing is counted twice.
    again = step(j, pods)
    assert again.counted == [] and again.delete == [("rl-actor-1", "old")]
    del pods["rl-actor-1"]
    plan = step(j, pods)
    assert plan.counted == [] and plan.create == [("rl-actor-1", 1)] and plan.status["stage"] == "Rescheduling"
    pods["rl-actor-1"] = view("rl-actor-1", "Running", "n2", True, uid="new")
    plan = step(j, pods)
    assert plan.status["stage"] == "Running" and plan.status["restarts"] == 1
    assert plan.status["workers"][1] == {
        "name": "rl-actor-1", "set": "actor", "phase": "Running", "node": "n2", "restarts": 1, "uid": "new",
        "lostUid": "old",
    }  # fmt: skip


def test_a_leader_failing_more_than_the_limit_fails_the_job_and_cleans() -> None:
    j = job(restartLimit=1, cleanPodPolicy="Running")
    pods = running(*PODS)
    step(j, pods)
    pods["rl-learner"] = view("rl-learner", "Failed", "n1", uid="leader-1")
    assert step(j, pods).status["stage"] == "Rescheduling"
    pods["rl-learner"] = view("rl-learner", "Running", "n1", True, uid="leader-2")
    assert step(j, pods).status["stage"] == "Running"
    pods["rl-learner"] = view("rl-learner", "Failed", "n1", uid="leader-2")
    plan = step(j, pods)
    assert plan.status["stage"] == "Failed" and plan.status["leader"]["restarts"] == 2
    # cleanPodPolicy Running: the running workers go, the failed leader stays for its logs.
    assert sorted(n for n, _ in plan.delete) == ["rl-actor-0", "rl-actor-1"]
    assert not plan.create


def test_a_pod_that_never_ran_is_recreated_without_a_restart() -> None:
    j = job()
    step(j, {n: view(n) for n in PODS})
    plan = step(j, {n: view(n) for n in PODS[:2]})  # rl-actor-1 deleted while pending
    assert plan.counted == [] and plan.create == [("rl-actor-1", 0)] and plan.status["stage"] == "Pending"


def test_min_workers_below_the_count_runs_at_the_minimum() -> None:
    j = job(minWorkersNum=1)
    pods = running("rl-learner", "rl-actor-0") | {"rl-actor-1": view("rl-actor-1")}
    plan = step(j, pods)
    assert (plan.status["stage"], plan.status["scheduleState"]) == ("Running", "ScheduledPartly")


def test_terminating_succeeds_and_clean_pod_policy_none_keeps_pods() -> None:
    j = job(cleanPodPolicy="None")
    pods = running(*PODS)
    step(j, pods)
    j["spec"]["terminating"] = True
    plan = step(j, pods)
    assert plan.status["stage"] == "Succeeded" and plan.delete == []
    assert any(c["type"] == "Succeeded" and c["reason"] == "Terminated" for c in plan.status["conditions"])


def test_a_refused_pod_fails_the_job_as_scheduled_failed() -> None:
    j = job()
    plan = step(j, {}, create_error="creating pod rl-learner: 422 Invalid")
    assert (plan.status["stage"], plan.status["scheduleState"]) == ("Failed", "ScheduledFailed")


def test_an_unchanged_cluster_writes_the_same_status() -> None:
    j = job()
    pods = running(*PODS)
    first = step(j, pods).status
    assert step(j, pods).status == first  # no status write when nothing changed


def test_a_worker_set_shrunk_while_running_loses_its_extra_pods() -> None:
    j = job(minWorkersNum=1)
    pods = running(*PODS)
    step(j, pods)
    j["spec"]["workerSets"][0]["counts"] = 1
    plan = step(j, pods)
    assert plan.delete == [("rl-actor-1", "uid-rl-actor-1")] and not plan.create and not plan.counted
    assert [w["name"] for w in plan.status["workers"]] == ["rl-actor-0"] and plan.status["stage"] == "Running"


def test_a_worker_that_succeeds_before_its_leader_keeps_the_job_running() -> None:
    j = job()  # minWorkersNum 2 of 2 workers
    assert step(j, running(*PODS)).status["stage"] == "Running"
    pods = running(*PODS)
    pods["rl-actor-1"] = view("rl-actor-1", "Succeeded", "n1")
    plan = step(j, pods)
    assert plan.status["stage"] == "Running" and not plan.create
