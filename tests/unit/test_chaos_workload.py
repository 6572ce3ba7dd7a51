"""The chaos suite's workload, stand-in kubelet, soak fit check and command-line parsing (pure logic)."""

from __future__ import annotations

import pytest

from phalanx.chaos.cli import parse_targets, trial_order
from phalanx.chaos.kubelet import DELETE, RUN, SUCCEED, Kubelet, finished_gangs
from phalanx.chaos.snapshot import NodeView, PodView, Snapshot
from phalanx.chaos.soak import fitting_pods
from phalanx.chaos.trials import target_process
from phalanx.chaos.workload import GangPlan, WorkloadShape, make_workload, pod_body
from phalanx.model.gpu import GPU


def test_the_same_seed_gives_the_same_workload_and_another_seed_another() -> None:
    a = make_workload("t1", "s", 7, WorkloadShape())
    b = make_workload("t1", "s", 7, WorkloadShape())
    c = make_workload("t1", "s", 8, WorkloadShape())
    assert a == b and a != c


def test_the_default_workload_has_about_700_pods_and_the_cluster_holds_about_60_percent() -> None:
    shape = WorkloadShape()
    w = make_workload("t1", "s", 3, shape)
    assert len(w.gangs) == 100 and 550 <= w.pod_count <= 850
    assert all(2 <= g.size <= 16 for g in w.gangs.values())
    gpu_pods = sum(g.size for g in w.gangs.values() if g.gpu)
    cpu_pods = w.pod_count - gpu_pods
    gpus = sum(n.gpus for n in w.nodes)
    cpu_cores = sum(n.cpu for n in w.nodes) - min(gpu_pods, gpus) * 0.5
    held = min(gpu_pods, gpus) + min(cpu_pods, cpu_cores)
    assert 0.45 <= held / w.pod_count <= 0.75
    assert gpus == 64


def test_pods_are_created_over_the_first_seconds_with_gangs_interleaved() -> None:
    w = make_workload("t1", "s", 3, WorkloadShape(create_seconds=6))
    times = [p.at for p in w.pods]
    assert times == sorted(times) and times[0] == 0 and times[-1] < 6
    order = [p.gang.key for p in w.pods]
    first_gang = order[0]
    first, last = order.index(first_gang), len(order) - 1 - order[::-1].index(first_gang)
    assert len(set(order[first : last + 1])) > 1  # other gangs' pods come between
    assert sorted(p.name for p in w.pods) == sorted(n for g in w.gangs.values() for n in g.pod_names())


def test_a_pod_body_declares_its_gang_with_koordinator_annotations() -> None:
    w = make_workload("t1", "sched", 3, WorkloadShape())
    gang = next(g for g in w.gangs.values() if g.gpu)
    body = pod_body(w, gang, gang.pod_names()[0], "600s")
    ann = body["metadata"]["annotations"]
    assert ann["gang.scheduling.koordinator.sh/name"] == gang.name
    assert ann["gang.scheduling.koordinator.sh/min-available"] == str(gang.size)
    assert body["spec"]["schedulerName"] == "sched"
    assert body["spec"]["containers"][0]["resources"]["limits"] == {GPU: "1"}


# --- the stand-in kubelet ------------------------------------------------------------------------------------


def gang(name: str = "g", size: int = 2, run: float = 3.0, delete: bool = True) -> GangPlan:
    return GangPlan("ns", name, size, True, run, delete)


def view(name: str, node: str = "", phase: str = "Pending", g: str = "ns/g") -> PodView:
    return PodView("ns", name, g, 2, node, phase, False, {"cpu": 500})


def snap(at: float, *pods: PodView) -> Snapshot:
    return Snapshot(at, {p.key: p for p in pods}, {})


def test_kubelet_runs_bound_pods_once_and_ends_the_gang_after_its_run_time() -> None:
    k = Kubelet({"ns/g": gang(run=3.0, delete=False)}, safety_seconds=15)
    acts = k.observe(snap(0, view("g-0", "n1"), view("g-1")))
    assert [(a.kind, a.name) for a in acts] == [(RUN, "g-0")]
    acts = k.observe(snap(1, view("g-0", "n1", "Running"), view("g-1", "n2")))
    assert [(a.kind, a.name) for a in acts] == [(RUN, "g-1")]
    assert k.observe(snap(3.5, view("g-0", "n1", "Running"), view("g-1", "n2", "Running"))) == []
    acts = k.observe(snap(4, view("g-0", "n1", "Running"), view("g-1", "n2", "Running")))
    assert sorted((a.kind, a.name) for a in acts) == [(SUCCEED, "g-0"), (SUCCEED, "g-1")]
    assert k.observe(snap(5, view("g-0", "n1", "Running"), view("g-1", "n2", "Running"))) == []  # sent once


def test_kubelet_ends_a_pod_of_a_gang_never_whole_only_after_the_safety_delay() -> None:
    k = Kubelet({"ns/g": gang(run=3.0)}, safety_seconds=15)
    k.observe(snap(0, view("g-0", "n1"), view("g-1")))
    assert k.observe(snap(17, view("g-0", "n1", "Running"), view("g-1"))) == []
    acts = k.observe(snap(18.5, view("g-0", "n1", "Running"), view("g-1")))
    assert [(a.kind, a.name) for a in acts] == [(DELETE, "g-0")]


def test_a_gang_has_finished_when_all_its_pods_were_created_and_are_gone_or_terminated() -> None:
    plan = gang()
    created = {"ns/g-0", "ns/g-1"}
    assert finished_gangs(snap(0, view("g-1", "n1", "Succeeded")), [plan], created) == {"ns/g"}
    assert finished_gangs(snap(0, view("g-1", "n1", "Running")), [plan], created) == set()
    assert finished_gangs(snap(0), [plan], {"ns/g-0"}) == set()  # g-1 not created yet


# --- the soak's fit check ------------------------------------------------------------------------------------


def test_fitting_pods_counts_what_the_free_capacity_holds_per_node() -> None:
    nodes = {"n1": NodeView("n1", {"cpu": 4000, GPU: 2000}), "n2": NodeView("n2", {"cpu": 4000, GPU: 8000})}
    busy = PodView("ns", "x", "", 1, "n2", "Running", False, {"cpu": 500, GPU: 7000})
    done = PodView("ns", "y", "", 1, "n1", "Succeeded", False, {"cpu": 500, GPU: 2000})
    s = Snapshot(0, {busy.key: busy, done.key: done}, nodes)
    assert fitting_pods(s, {"cpu": 500, GPU: 1000}) == 2 + 1
    assert fitting_pods(s, {"cpu": 1000}) == 4 + 3


# --- command line ----------------------------------------------------------------------------------------------


def test_targets_take_an_optional_count_and_run_round_robin() -> None:
    targets = parse_targets(["queue:2", "redis-empty", "binder.between_pods:1"], 3)
    assert targets == [("queue", 2), ("redis-empty", 3), ("binder.between_pods", 1)]
    assert trial_order(targets) == [
        "queue",
        "redis-empty",
        "binder.between_pods",
        "queue",
        "redis-empty",
        "redis-empty",
    ]
    with pytest.raises(ValueError, match="unknown target"):
        parse_targets(["kubelet"], 1)
    with pytest.raises(ValueError, match="positive"):
        parse_targets(["queue:0"], 1)


def test_each_target_kills_its_process() -> None:
    assert [
        target_process(t)
        for t in ("queue", "redis", "redis-empty", "none", "binder.before_commit", "scheduler.after_commit")
    ] == ["queue", "redis", "redis", None, "binder", "scheduler"]


def test_kubelet_garbage_collects_succeeded_pods_once_when_asked() -> None:
    k = Kubelet({"ns/g": gang(run=1.0, delete=False)}, gc_seconds=5)
    assert k.observe(snap(0, view("g-0", "n1", "Succeeded"))) == []
    acts = k.observe(snap(5, view("g-0", "n1", "Succeeded")))
    assert [(a.kind, a.name) for a in acts] == [(DELETE, "g-0")]
    assert k.observe(snap(6, view("g-0", "n1", "Succeeded"))) == []
    assert Kubelet({"ns/g": gang()}).observe(snap(99, view("g-0", "n1", "Succeeded"))) == []
