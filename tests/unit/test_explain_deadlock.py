"""`phalanx explain` names deadlocks: gangs each holding bound pods (with no known end) that another needs
and waiting for it in turn. First seed-003 as `make demo` runs it pod by pod (the real simulator, in a
fixture): two 5-worker jobs on 8 GPUs, interleaved, each bound 4 workers and waits for a fifth. Then a
cycle of three built by hand. A gang never waits for itself: its own bound pods end only after it runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import gang_spec, model_node, model_pod

from phalanx.cli.main import main
from phalanx.explain.analysis import explain, select
from phalanx.explain.view import ClusterState, Holder, PodState
from phalanx.model.keys import CONFIGMAP_LABEL, SIM_DURATION
from phalanx.model.objects import Placement
from phalanx.plugins.registry import in_tree_framework

GPU = "nvidia.com/gpu"
NS = "training"
WORKERS = 5
PHALANX = str(Path(sys.executable).parent / "phalanx")


def _seed_003() -> list[dict[str, Any]]:
    """examples/demo-two-jobs.yaml's scenario: two nodes of 4 GPUs; two jobs of 5 one-GPU workers, created
    interleaved a second apart (as two MPI operators create them), each declared by a ConfigMap with
    minAvailable 5."""
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"gpu-node-{i}"},
            "status": {"allocatable": {"cpu": "32", "memory": "128Gi", GPU: "4", "pods": "110"}},
        }
        for i in (1, 2)
    ]
    created = "2026-01-01T00:00:00Z"
    for job in ("job-a", "job-b"):
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": job, "namespace": NS, "creationTimestamp": created},
                "data": {"minAvailable": str(WORKERS), "scheduleTimeoutSeconds": "300"},
            }
        )
    for n in range(2 * WORKERS):
        job, i = ("job-a", "job-b")[n % 2], n // 2
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{job}-worker-{i}",
                    "namespace": NS,
                    "creationTimestamp": f"2026-01-01T00:00:{n:02d}Z",
                    "labels": {CONFIGMAP_LABEL: job},
                    "annotations": {SIM_DURATION: "60s"},
                },
                "spec": {
                    "schedulerName": "phalanx",
                    "containers": [
                        {
                            "name": "worker",
                            "image": "horovod-torch",
                            "resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {GPU: 1}},
                        }
                    ],
                },
            }
        )
    return docs


@pytest.fixture(scope="module")
def pod_by_pod(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("deadlock")
    workload, report = root / "seed-003.yaml", root / "report.json"
    workload.write_text(yaml.safe_dump_all(_seed_003()))
    subprocess.run(
        [PHALANX, "simulate", "-f", str(workload), "--mode", "pod", "--until", "1h", "-o", str(report)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    bound = [p for p in json.loads(report.read_text())["pods"] if p["node"]]
    assert len(bound) == 8  # the premise: each job holds 4 of the 8 GPUs and waits for a fifth
    return workload, report


def _explain(capsys: pytest.CaptureFixture[str], pod_by_pod: tuple[Path, Path], *extra: str) -> str:
    workload, report = pod_by_pod
    with pytest.raises(SystemExit) as exit_:
        main(["explain", "--report", str(report), "-f", str(workload), *extra])
    out, err = capsys.readouterr()
    assert exit_.value.code in (0, None), err
    return out


@pytest.mark.starts_processes
def test_two_jobs_each_holding_what_the_other_needs_are_a_deadlock_naming_both(capsys, pod_by_pod) -> None:
    gangs = {g["name"]: g for g in json.loads(_explain(capsys, pod_by_pod, "-o", "json"))["gangs"]}
    assert set(gangs) == {"job-a", "job-b"}
    for me, other in (("job-a", "job-b"), ("job-b", "job-a")):
        g = gangs[me]
        assert g["deadlock"] == [f"{NS}/{me}", f"{NS}/{other}"]
        assert g["verdict"].startswith("deadlock: ")
        assert f"{NS}/{me}" in g["verdict"] and f"{NS}/{other}" in g["verdict"]
        # It waits for the other job, never for itself.
        assert [h["key"] for h in g["capacity"]["runsAfter"]] == [f"{NS}/{other}"]


@pytest.mark.starts_processes
def test_the_text_never_says_a_gang_waits_for_itself(capsys, pod_by_pod) -> None:
    blocks = {block.split()[0]: block for block in _explain(capsys, pod_by_pod).strip().split("\n\n")}
    for me, other in (("job-a", "job-b"), ("job-b", "job-a")):
        block = blocks[f"{NS}/{me}"]
        assert f"once gang {NS}/{me} finishes" not in block
        assert f"deadlock: gangs {NS}/{me} and {NS}/{other}" in block
        assert f"it waits for gang {NS}/{other} to finish, and {NS}/{other} for {NS}/{me} in turn" in block


@pytest.mark.starts_processes
def test_one_gang_asked_for_still_finds_its_deadlock(capsys, pod_by_pod) -> None:
    (job_a,) = json.loads(_explain(capsys, pod_by_pod, f"{NS}/job-a", "-o", "json"))["gangs"]
    assert job_a["deadlock"] == [f"{NS}/job-a", f"{NS}/job-b"]


# -- a cycle of three, built by hand ------------------------------------------------------------------------


def _bound(name: str, gang: str, node: str, ends_at: float | None = None) -> PodState:
    info = model_pod(name, gang, gpus=2)
    holder = Holder("gang", f"default/{gang}")
    return PodState(
        "default", name, info, True, node=node, phase="Running", holder=holder, gang=holder.key, ends_at=ends_at
    )


def _pending(name: str, gang: str, only_on: str) -> PodState:
    info = model_pod(name, gang, gpus=2, placement=Placement(node_selector=(("kubernetes.io/hostname", only_on),)))
    return PodState("default", name, info, True, phase="Pending", gang=f"default/{gang}")


def _ring(ends_of_c: float | None) -> ClusterState:
    """a holds n1 and may only use n2, b holds n2 and may only use n3, c holds n3 and may only use n1."""
    state = ClusterState(
        "virtual", 0.0, {"kind": "report"}, "phalanx", 600.0, [model_node(n, gpus=2) for n in "n1 n2 n3".split()]
    )
    for gang, held, wanted in (("a", "n1", "n2"), ("b", "n2", "n3"), ("c", "n3", "n1")):
        g = state.gang(f"default/{gang}")
        g.spec = gang_spec(gang, 2)
        g.pods = [
            _bound(f"{gang}-0", gang, held, ends_of_c if gang == "c" else None),
            _pending(f"{gang}-1", gang, wanted),
        ]
        state.pods += g.pods
    return state


def test_a_cycle_of_three_names_all_three() -> None:
    state = _ring(ends_of_c=None)
    e = {g.name: g for g in explain(state, select(state, None, None), in_tree_framework()).gangs}
    assert e["a"].deadlock == ["default/a", "default/b", "default/c"]
    assert e["b"].deadlock == ["default/b", "default/c", "default/a"]
    assert e["a"].verdict == (
        "deadlock: gangs default/a, default/b and default/c each wait for the next to finish, which holds "
        "capacity it needs (default/a -> default/b -> default/c -> default/a); one of them must give its pods up"
    )


def test_a_holder_with_a_known_end_breaks_the_cycle() -> None:
    """c's pod ends at a known time (its run time is known): c finishes without running, so nobody is
    deadlocked; b waits for c, a for b."""
    state = _ring(ends_of_c=900.0)
    e = {g.name: g for g in explain(state, select(state, None, None), in_tree_framework()).gangs}
    assert all(g.deadlock == [] for g in e.values())
    assert "deadlock" not in e["a"].verdict
    assert e["b"].capacity is not None and e["b"].capacity.runs_at == 900.0
