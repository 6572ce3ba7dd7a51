"""Scenarios through the real stack: redis-server and the three services as separate processes on
loopback ports, driven by the simulator on a virtual clock."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import make_configmap, make_node, make_pod, make_podgroup

from phalanx.bench.burst import ideal_makespan, out_of_turn
from phalanx.model.keys import (
    CONFIGMAP_LABEL,
    DELAYED_BIND_POD_NUM,
    KOORD_GROUPS,
    KOORD_MIN_AVAILABLE,
    KOORD_NAME,
    KOORD_TIMEOUT,
    KOORD_TOTAL_NUMBER,
    KOORD_WAITING_TIME,
    LABEL_SIGS_PODGROUP,
    LABEL_X_K8S_PODGROUP,
    LIGHT_MIN_AVAILABLE,
    LIGHT_NAME,
    SIM_DURATION,
    VOLCANO_GROUP_NAME,
)
from phalanx.sim.driver import SimOptions
from phalanx.sim.run import simulate
from phalanx.sim.workload import load_workload

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def ts(seconds: float) -> str:
    whole = int(seconds)
    return f"2026-01-01T00:{whole // 60:02d}:{whole % 60:02d}Z"


def gpu_node(name: str, gpus: int) -> dict[str, Any]:
    return make_node(name).cpu("64").memory("256Gi").gpu(gpus).build()


def worker(name: str, ns: str = "default", gpus: int = 1, at: float = 0) -> Any:
    return make_pod(name, ns).scheduler("phalanx").container().gpu(gpus).cpu("1").created(ts(at))


def run(tmp_path: Path, objects: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "workload.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    scheduler_env = options.pop("scheduler_env", None)
    return simulate(
        load_workload([path]), SimOptions(**options), scheduler_env=scheduler_env, log_dir=tmp_path / "logs"
    )


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in report["pods"]}


def test_seed003_deadlock_none_binds_and_the_gang_retries_in_vain(tmp_path: Path) -> None:
    report = simulate(load_workload([REPO / "examples/seed003-deadlock.yaml"]), SimOptions(), log_dir=tmp_path / "logs")
    pods = report["pods"]
    assert len(pods) == 5
    assert all(p["node"] is None for p in pods)
    # Seed 003's form (a ConfigMap) is not given up (issue 22): it times out at 20 s, backs off 10 s, is tried
    # again, and times out at 50 s; twice with nothing bound, the run ends. No pod is marked timed out.
    assert all(KOORD_TIMEOUT not in p["annotations"] for p in pods)
    assert all(
        "timed out after waiting 20s" in p["reason"] and p["reason"].endswith("retrying after 10s") for p in pods
    )
    assert report["summary"]["virtualSeconds"] == 50.0
    assert report["podGroups"] == [
        {
            "namespace": "sw-mpi-operator",
            "name": "gpu-pg",
            "phase": "Pending",
            "bound": 0,
            "minMember": 5,
            "pods": 5,
            "timedOut": True,
        }
    ]


def test_seed004_two_interleaved_gangs_one_binds_whole_other_waits_whole(tmp_path: Path) -> None:
    objects: list[dict[str, Any]] = [gpu_node("n1", 3)]
    for i in range(3):  # A batch pod, an ordinary... as seed 004: A and B pods interleave in the queue
        for gang, at in (("qj-1", 2 * i), ("qj-2", 2 * i + 1)):
            objects.append(
                worker(f"{gang}-{i}", at=at)
                .annotation(VOLCANO_GROUP_NAME, gang)
                .annotation(DELAYED_BIND_POD_NUM, "3")
                .annotation(KOORD_WAITING_TIME, "100s")
                .build()
            )
    report = run(tmp_path, objects)
    pods = by_name(report)
    bound = sorted(n for n, p in pods.items() if p["node"])
    assert bound in (["qj-1-0", "qj-1-1", "qj-1-2"], ["qj-2-0", "qj-2-1", "qj-2-2"])
    groups = {g["name"]: g for g in report["podGroups"]}
    assert sorted(g["bound"] for g in groups.values()) == [0, 3]
    assert report["summary"]["partialGangs"] == 0


def test_demo_pod_mode_deadlocks_gang_mode_runs_both_jobs(tmp_path: Path) -> None:
    workload = load_workload([REPO / "examples/demo-two-jobs.yaml"])
    pod_mode = simulate(workload, SimOptions(mode="pod", until=3600), log_dir=tmp_path / "pod")
    gang_mode = simulate(workload, SimOptions(mode="gang", until=3600), log_dir=tmp_path / "gang")
    assert pod_mode["summary"]["partialGangs"] == 2
    assert pod_mode["summary"]["podsFinished"] == 0
    assert gang_mode["summary"]["partialGangs"] == 0
    assert gang_mode["summary"]["podsFinished"] == 10
    # Each job ran whole: its five workers bound at the same instant.
    for job in ("job-a", "job-b"):
        times = {p["boundAt"] for p in gang_mode["pods"] if p["name"].startswith(job)}
        assert len(times) == 1


KNAVIGATOR_BURST = REPO / "examples/knavigator-gang-burst.yaml"


def _burst_named_against_arrival(tmp_path: Path) -> Path:
    """The burst with job-NN created NN x 10 ms in (knavigator's submission order) and named job-(54-NN):
    the names now sort against the arrival, so only the creation times say whose turn it is."""

    def rename(name: str) -> str:
        return re.sub(r"^job-(\d\d)", lambda m: f"job-{54 - int(m[1]):02d}", name)

    def restamp(obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        if m := re.match(r"job-(\d\d)", meta["name"]):
            meta["creationTimestamp"] = f"2026-01-01T00:00:00.{10 * int(m[1]):03d}Z"
            meta["name"] = rename(meta["name"])
            labels = meta.get("labels") or {}
            if LABEL_X_K8S_PODGROUP in labels:
                labels[LABEL_X_K8S_PODGROUP] = rename(labels[LABEL_X_K8S_PODGROUP])

    docs = list(yaml.safe_load_all(KNAVIGATOR_BURST.read_text()))
    for doc in docs:
        for obj in doc.get("items", [doc]):
            restamp(obj)
    path = tmp_path / "burst-named-against-arrival.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


@pytest.mark.parametrize("names", ["in-arrival-order", "against-arrival-order"])
def test_knavigator_burst_runs_at_its_ideal_makespan_in_arrival_order(tmp_path: Path, names: str) -> None:
    # Issue 22: the queue moved a budget of the waiting gangs per freed node, and the gangs it tried and
    # failed sorted by their failure time behind those it held back: later gangs took the freed capacity
    # first, and a wave ran part-empty (300 s, 1.11x).
    path = KNAVIGATOR_BURST if names == "in-arrival-order" else _burst_named_against_arrival(tmp_path)
    workload = load_workload([path])
    report = simulate(workload, SimOptions(), log_dir=tmp_path / "logs")
    assert report["summary"]["gangsBound"] == 53 and report["summary"]["partialGangs"] == 0
    assert ideal_makespan(workload) == 270.0
    assert report["summary"]["virtualSeconds"] == 270.0  # 1.00x the ideal: nine full waves of 30 s
    assert out_of_turn(report, workload) == []  # every gang in its turn: creation time, then name
    starts = {(p["gang"], p["boundAt"]) for p in report["pods"]}
    assert len(starts) == 53  # each gang bound at one instant
    assert sorted({at for _, at in starts}) == [30.0 * wave for wave in range(9)]


def test_gang_group_that_cannot_complete_binds_nothing_and_times_out(tmp_path: Path) -> None:
    group = json.dumps(["team-a/trainer", "team-b/evaluator"])
    objects: list[dict[str, Any]] = [gpu_node("n1", 4)]
    for i in range(2):
        objects.append(
            worker(f"trainer-{i}", "team-a")
            .annotation(KOORD_NAME, "trainer")
            .annotation(KOORD_MIN_AVAILABLE, "2")
            .annotation(KOORD_GROUPS, group)
            .annotation(KOORD_WAITING_TIME, "30s")
            .build()
        )
    for i in range(3):  # needs 3 GPUs, only 2 left after the trainer: the group can never complete
        objects.append(
            worker(f"evaluator-{i}", "team-b")
            .annotation(KOORD_NAME, "evaluator")
            .annotation(KOORD_MIN_AVAILABLE, "3")
            .annotation(KOORD_GROUPS, group)
            .annotation(KOORD_WAITING_TIME, "30s")
            .build()
        )
    report = run(tmp_path, objects)
    assert report["summary"]["podsBound"] == 0
    trainers = [p for p in report["pods"] if p["namespace"] == "team-a"]
    assert all(p["annotations"].get(KOORD_TIMEOUT) == "true" for p in trainers)
    assert report["summary"]["virtualSeconds"] == 30.0


def test_gang_group_binds_across_namespaces_when_complete(tmp_path: Path) -> None:
    group = json.dumps(["team-a/trainer", "team-b/evaluator"])
    objects: list[dict[str, Any]] = [gpu_node("n1", 4)]
    for ns, gang in (("team-a", "trainer"), ("team-b", "evaluator")):
        for i in range(2):
            objects.append(
                worker(f"{gang}-{i}", ns)
                .annotation(KOORD_NAME, gang)
                .annotation(KOORD_MIN_AVAILABLE, "2")
                .annotation(KOORD_GROUPS, group)
                .build()
            )
    report = run(tmp_path, objects)
    assert report["summary"]["podsBound"] == 4
    assert len({p["boundAt"] for p in report["pods"]}) == 1


def _declaration_forms(min_available: int, pods: int) -> list[dict[str, Any]]:
    """One gang per declaration form of compatibility.md, each with `pods` one-GPU pods."""
    objs: list[dict[str, Any]] = [
        make_podgroup("xk8s").min_member(min_available).build(),
        make_podgroup("sigs", api_version="scheduling.sigs.k8s.io/v1alpha1")
        .min_member(min_available)
        .annotation(KOORD_TOTAL_NUMBER, str(max(min_available, pods)))
        .build(),
        make_podgroup("volcano", api_version="scheduling.volcano.sh/v1beta1").min_member(min_available).build(),
        make_configmap("cm").data("minAvailable", str(min_available)).data("scheduleTimeoutSeconds", "30").build(),
    ]
    forms = {
        "xk8s": lambda b: b.label(LABEL_X_K8S_PODGROUP, "xk8s"),
        "sigs": lambda b: b.label(LABEL_SIGS_PODGROUP, "sigs"),
        "volcano": lambda b: b.annotation(VOLCANO_GROUP_NAME, "volcano"),
        "cm": lambda b: b.label(CONFIGMAP_LABEL, "cm"),
        "koord": lambda b: b.annotation(KOORD_NAME, "koord").annotation(KOORD_MIN_AVAILABLE, str(min_available)),
        "light": lambda b: b.annotation(LIGHT_NAME, "light").annotation(LIGHT_MIN_AVAILABLE, str(min_available)),
        "delayed": lambda b: b.annotation(VOLCANO_GROUP_NAME, "delayed").annotation(
            DELAYED_BIND_POD_NUM, str(min_available)
        ),
    }
    for form, link in forms.items():
        for i in range(pods):
            objs.append(link(worker(f"{form}-{i}").annotation(KOORD_WAITING_TIME, "30s")).build())
    return objs


def test_every_declaration_form_is_a_gang(tmp_path: Path) -> None:
    # Complete gangs bind whole; gangs one pod short bind nothing (pods alone would have bound).
    complete = run(tmp_path / "complete", [gpu_node("n1", 64)] + _declaration_forms(3, 3))
    short = run(tmp_path / "short", [gpu_node("n1", 64)] + _declaration_forms(3, 2))
    forms = ["xk8s", "sigs", "volcano", "cm", "koord", "light", "delayed"]
    groups = {g["name"]: g for g in complete["podGroups"]}
    assert sorted(groups) == sorted(forms)
    for form in forms:
        assert groups[form]["bound"] == 3 and groups[form]["minMember"] == 3, form
    assert complete["summary"]["podsBound"] == 21
    assert short["summary"]["podsBound"] == 0
    # Timed out: Koordinator's forms for good (marked), the others back off and are tried again (issue 22).
    for p in short["pods"]:
        final = p["gang"] in ("default/koord", "default/sigs")
        assert (p["annotations"].get(KOORD_TIMEOUT) == "true") == final, p["name"]
        assert p["reason"].endswith("until its pods are recreated" if final else "retrying after 10s"), p["name"]


def test_pods_wait_for_their_podgroup_and_schedule_when_it_appears(tmp_path: Path) -> None:
    objects: list[dict[str, Any]] = [gpu_node("n1", 4)]
    objects += [worker(f"w{i}", at=0).label(LABEL_X_K8S_PODGROUP, "late").build() for i in range(2)]
    objects.append(make_podgroup("late").min_member(2).created(ts(30)).build())
    report = run(tmp_path, objects, until=20)
    assert report["summary"]["podsBound"] == 0
    assert all("PodGroup default/late" in p["reason"] and "does not exist" in p["reason"] for p in report["pods"])
    # Parked until their PodGroup arrives, as the cluster feed parks them (phalanx.cluster.gang_intake.admit):
    # the scheduler never tries them before.
    assert report["summary"]["schedulingAttempts"] == 0
    report = run(tmp_path / "later", objects)
    assert [p["boundAt"] for p in report["pods"]] == [30.0, 30.0]


def test_bad_input_names_object_and_field_and_the_rest_still_runs(tmp_path: Path) -> None:
    good = [
        worker(f"good-{i}").annotation(KOORD_NAME, "good").annotation(KOORD_MIN_AVAILABLE, "2").build()
        for i in range(2)
    ]
    bad = [
        worker("abc").annotation(KOORD_NAME, "g1").annotation(KOORD_MIN_AVAILABLE, "abc").build(),
        worker("negative").annotation(KOORD_NAME, "g2").annotation(KOORD_MIN_AVAILABLE, "-3").build(),
        worker("total")
        .annotation(KOORD_NAME, "g3")
        .annotation(KOORD_MIN_AVAILABLE, "3")
        .annotation(KOORD_TOTAL_NUMBER, "2")
        .build(),
        worker("groups")
        .annotation(KOORD_NAME, "g4")
        .annotation(KOORD_MIN_AVAILABLE, "1")
        .annotation(KOORD_GROUPS, "[not-a-list")
        .build(),
        worker("rfc").annotation(KOORD_NAME, "Not_RFC1123").annotation(KOORD_MIN_AVAILABLE, "1").build(),
        make_pod("badcpu").scheduler("phalanx").container().cpu("lots").build(),
    ]
    path = tmp_path / "w.yaml"
    text = yaml.safe_dump_all([gpu_node("n1", 8)] + good + bad)
    text += "---\nkind: Pod\nmetadata: {name: broken\n  this is: [not yaml\n"
    path.write_text(text)
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "phalanx.cli.main", "simulate", "-f", str(path), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    pods = by_name(report)
    assert pods["good-0"]["node"] and pods["good-1"]["node"]
    expectations = {
        "abc": f"Pod default/abc: metadata.annotations[{KOORD_MIN_AVAILABLE}]",
        "negative": f"metadata.annotations[{KOORD_MIN_AVAILABLE}]",
        "total": f"metadata.annotations[{KOORD_TOTAL_NUMBER}]",
        "groups": f"metadata.annotations[{KOORD_GROUPS}]",
        "rfc": f"metadata.annotations[{KOORD_NAME}]",
        "badcpu": "spec.containers[0].resources.requests.cpu",
    }
    for name, fragment in expectations.items():
        assert pods[name]["node"] is None
        assert fragment in pods[name]["reason"], (name, pods[name]["reason"])
    errors = "\n".join(report["summary"]["errors"])
    assert "w.yaml#10: not valid YAML" in errors
    # Only unusable input at all is a failure of the command.
    empty = tmp_path / "broken.yaml"
    empty.write_text("kind: [\n")
    proc = subprocess.run(
        [sys.executable, "-m", "phalanx.cli.main", "simulate", "-f", str(empty)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "broken.yaml#1: not valid YAML" in proc.stderr


def test_scheduler_killed_mid_gang_and_restarted_loses_nothing(tmp_path: Path) -> None:
    objects: list[dict[str, Any]] = [gpu_node("n1", 2), gpu_node("n2", 2)]
    for i in range(4):  # two pods arrive first (the scheduler dies right after reserving them), two later
        objects.append(
            worker(f"w{i}", at=0 if i < 2 else 10)
            .annotation(KOORD_NAME, "train")
            .annotation(KOORD_MIN_AVAILABLE, "4")
            .annotation(KOORD_WAITING_TIME, "60s")
            .annotation(SIM_DURATION, "30s")
            .build()
        )
    objects.append(worker("other", at=20).build())  # an ordinary pod: no GPU is free until the gang finishes
    report = run(tmp_path, objects, scheduler_env={"PHALANX_FAULT": "scheduler.after_commit:1"})
    assert report["summary"]["schedulerRestarts"] == 1
    pods = by_name(report)
    assert [pods[f"w{i}"]["boundAt"] for i in range(4)] == [10.0] * 4
    per_node: dict[str, int] = {}
    for i in range(4):
        per_node[pods[f"w{i}"]["node"]] = per_node.get(pods[f"w{i}"]["node"], 0) + 1
    assert per_node == {"n1": 2, "n2": 2}  # never over-committed
    assert [pods[f"w{i}"]["finishedAt"] for i in range(4)] == [40.0] * 4
    assert pods["other"]["boundAt"] == 40.0
