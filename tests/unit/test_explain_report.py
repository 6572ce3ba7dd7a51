"""`phalanx explain --report` on a report made by the real simulator (`phalanx simulate`, in a fixture).

The workload: four 4-GPU nodes, a tainted one and a CPU-only one. Gang train-a (5 pods of 2 GPUs, an hour
each) takes 10 of the 16 schedulable GPUs and an ordinary pod (etl, 1 GPU, 20 minutes) one more; gang
train-b (4 pods of 2 GPUs) arrives a minute later and cannot fit, nor would it once etl ends; gang huge
(2 pods of 4 GPUs, only for the one node labelled a100) can never fit; gang broken declares a minimum
that is not a number. The simulation stops at 10 minutes, while train-a still runs. Expected values are
computed from where the simulator put the running pods, never written down.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from phalanx.cli.main import main
from phalanx.model.keys import KOORD_MIN_AVAILABLE, KOORD_NAME, KOORD_WAITING_TIME, LABEL_X_K8S_PODGROUP, SIM_DURATION

pytestmark = pytest.mark.starts_processes  # the module's simulation runs `phalanx simulate` in a child

GPU = "nvidia.com/gpu"
GPUS = 4
GPU_NODES = [f"gpu-{i}" for i in range(1, 5)]
A_PODS, B_PODS, PER_POD = 5, 4, 2
RUN_SECONDS = 3600
ETL_SECONDS = 1200
UNTIL = 600
NS = "training"
PHALANX = str(Path(sys.executable).parent / "phalanx")


def _node(
    name: str, gpus: int, labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": taints or []},
        "status": {"allocatable": {"cpu": "32", "memory": "128Gi", GPU: str(gpus), "pods": "110"}},
    }


def _pod(
    name: str,
    at: str,
    gpus: int,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    selector: dict[str, str] | None = None,
    seconds: int = RUN_SECONDS,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "creationTimestamp": at,
            "labels": labels or {},
            "annotations": {SIM_DURATION: f"{seconds}s", **(annotations or {})},
        },
        "spec": {
            "schedulerName": "phalanx",
            "nodeSelector": selector or {},
            "containers": [
                {
                    "name": "main",
                    "image": "trainer",
                    "resources": {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {GPU: gpus}},
                }
            ],
        },
    }


def _workload() -> list[dict[str, Any]]:
    koord = {KOORD_WAITING_TIME: "2h"}
    docs = [_node(n, GPUS, {"gpu-model": "a100"} if n == GPU_NODES[-1] else {}) for n in GPU_NODES]
    docs += [
        _node("gpu-tainted", GPUS, taints=[{"key": "dedicated", "value": "inference", "effect": "NoSchedule"}]),
        _node("cpu-1", 0),
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "train-a", "namespace": NS, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"minMember": A_PODS},
        },
    ]
    docs += [
        _pod(f"train-a-{i}", "2026-01-01T00:00:00Z", PER_POD, labels={LABEL_X_K8S_PODGROUP: "train-a"})
        for i in range(A_PODS)
    ]
    docs.append(_pod("etl-0", "2026-01-01T00:00:00Z", 1, seconds=ETL_SECONDS))
    docs += [
        _pod(
            f"train-b-{i}",
            "2026-01-01T00:01:00Z",
            PER_POD,
            annotations={KOORD_NAME: "train-b", KOORD_MIN_AVAILABLE: str(B_PODS), **koord},
        )
        for i in range(B_PODS)
    ]
    docs += [
        _pod(
            f"huge-{i}",
            "2026-01-01T00:02:00Z",
            GPUS,
            selector={"gpu-model": "a100"},
            annotations={KOORD_NAME: "huge", KOORD_MIN_AVAILABLE: "2", **koord},
        )
        for i in range(2)
    ]
    docs.append(
        _pod("broken-0", "2026-01-01T00:02:00Z", 1, annotations={KOORD_NAME: "broken", KOORD_MIN_AVAILABLE: "many"})
    )
    return docs


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("explain")
    workload, report = root / "workload.yaml", root / "report.json"
    workload.write_text(yaml.safe_dump_all(_workload()))
    subprocess.run(
        [PHALANX, "simulate", "-f", str(workload), "--until", f"{UNTIL}s", "-o", str(report)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return workload, report, json.loads(report.read_text())


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_:
        main(["explain", *args])
    out, err = capsys.readouterr()
    return int(exit_.value.code or 0), out, err


def _explained(
    capsys: pytest.CaptureFixture[str], simulated: tuple[Path, Path, dict[str, Any]], *extra: str
) -> dict[str, Any]:
    workload, report, _ = simulated
    code, out, err = _run(capsys, "--report", str(report), "-f", str(workload), "-o", "json", *extra)
    assert code == 0, err
    return {g["name"]: g for g in json.loads(out)["gangs"]}


def _free_after_train_a(report: dict[str, Any]) -> dict[str, int]:
    """Free GPUs per node as the simulation left them: train-a's pods and etl run."""
    placed = [p["node"] for p in report["pods"] if p["name"].startswith("train-a-")]
    assert len(placed) == A_PODS and all(placed)  # the scenario's premise: train-a runs
    etl = next(p for p in report["pods"] if p["name"] == "etl-0")
    assert etl["node"] and etl["finishedAt"] is None
    return {n: GPUS - PER_POD * placed.count(n) - (n == etl["node"]) for n in GPU_NODES}


def test_the_short_resource_the_free_gpus_and_the_excluded_nodes(capsys, simulated) -> None:
    free = _free_after_train_a(simulated[2])
    b = _explained(capsys, simulated)["train-b"]
    assert (b["state"], b["minMember"], b["bound"], b["pending"]) == ("Waiting", B_PODS, 0, B_PODS)
    assert b["declaredBy"] == "koordinator-annotations" and b["waitSeconds"] == 7200
    reason = next(p["reason"] for p in simulated[2]["pods"] if f"{p['namespace']}/{p['name']}" == b["reason"]["pod"])
    assert b["reason"]["message"] == reason
    cap = b["capacity"]
    assert cap["short"] == [GPU]
    assert cap["total"][GPU] == B_PODS * PER_POD and cap["perPod"][GPU] == PER_POD
    assert cap["fitNow"] == sum(f // PER_POD for f in free.values()) < B_PODS
    assert [n["free"][GPU] for n in cap["bestNodes"]] == sorted(free.values(), reverse=True)
    assert cap["freeOnEligible"][GPU] == sum(free.values())
    assert sorted(cap["eligibleNodes"]) == GPU_NODES
    excluded = {x["filter"]: x for x in cap["excluded"]}
    assert excluded["TaintToleration"]["details"] == {"gpu-tainted": "dedicated=inference:NoSchedule"}
    assert excluded["NodeResourcesFit"]["nodes"] == ["cpu-1"]
    assert excluded["NodeResourcesFit"]["reason"] == "too small even when empty"


def test_the_holder_and_when_the_gang_would_run(capsys, simulated) -> None:
    report = simulated[2]
    started = [p["startedAt"] for p in report["pods"] if p["name"].startswith("train-a-")]
    cap = _explained(capsys, simulated)["train-b"]["capacity"]
    holders = {h["key"]: h for h in cap["heldBy"]}
    a = holders[f"{NS}/train-a"]
    assert (a["kind"], a["pods"], a["holds"][GPU]) == ("gang", A_PODS, A_PODS * PER_POD)
    assert a["endsAt"] == max(started) + RUN_SECONDS and a["endBasis"] == SIM_DURATION
    assert a["endsInSeconds"] == max(started) + RUN_SECONDS - report["summary"]["virtualSeconds"]
    # etl ends first, but its one GPU is not what train-b lacks: only train-a's end lets it run.
    assert [h["key"] for h in cap["runsAfter"]] == [f"{NS}/train-a"]
    assert cap["runsAt"] == a["endsAt"]


def test_a_gang_that_never_fits_and_a_malformed_one(capsys, simulated) -> None:
    gangs = _explained(capsys, simulated)
    huge = gangs["huge"]["capacity"]
    assert huge["eligibleNodes"] == [GPU_NODES[-1]]  # the only a100 node
    assert {x["filter"] for x in huge["excluded"]} >= {"NodeSelector"}
    assert huge["runsAfter"] is None  # two 4-GPU pods, one 4-GPU node: no amount of waiting helps
    assert huge["fitWhenEmptied"] == GPUS // GPUS
    broken = gangs["broken"]
    assert broken["state"] == "Invalid"
    assert broken["error"] == (
        f'Pod {NS}/broken-0: metadata.annotations[{KOORD_MIN_AVAILABLE}]: "many" is not a positive integer'
    )
    assert "train-a" not in gangs  # it runs: only waiting gangs are listed


def test_text_names_the_shortfall_the_holder_and_the_never(capsys, simulated) -> None:
    workload, report, data = simulated
    free = sorted(_free_after_train_a(data).values(), reverse=True)
    code, text, _ = _run(capsys, "--report", str(report), "-f", str(workload))
    assert code == 0
    blocks = {block.split()[0]: block for block in text.strip().split("\n\n")}
    b = blocks[f"{NS}/train-b"]
    assert f"short of {GPU}" in b
    assert f"the best {len(free)} nodes have {', '.join(str(f) for f in free)} free" in b
    assert f"gang {NS}/train-a: {A_PODS} pods on" in b and f"[{SIM_DURATION}]" in b
    assert f"once gang {NS}/train-a finishes" in b
    assert "gpu-tainted (dedicated=inference:NoSchedule)" in b
    assert "never as the cluster stands" in blocks[f"{NS}/huge"]
    assert '"many" is not a positive integer' in blocks[f"{NS}/broken"]


def test_yaml_is_the_json_document(capsys, simulated) -> None:
    workload, report, _ = simulated
    outputs = [_run(capsys, "--report", str(report), "-f", str(workload), "-o", kind)[1] for kind in ("json", "yaml")]
    assert yaml.safe_load(outputs[1]) == json.loads(outputs[0])


def test_one_gang_by_name_whatever_its_state(capsys, simulated) -> None:
    gangs = _explained(capsys, simulated, f"{NS}/train-a")
    assert list(gangs) == ["train-a"]
    assert (gangs["train-a"]["state"], gangs["train-a"]["bound"]) == ("Satisfied", A_PODS)
    workload, report, _ = simulated
    code, _, err = _run(capsys, "--report", str(report), "-f", str(workload), "no-such-gang")
    assert code == 1 and "no gang no-such-gang" in err


def test_the_report_names_its_workload_so_f_may_be_left_out(capsys, simulated) -> None:
    workload, report, data = simulated
    assert data["workload"] == [str(workload.resolve())]
    code, out, err = _run(capsys, "--report", str(report), "-o", "json")
    assert code == 0, err
    assert {g["name"]: g for g in json.loads(out)["gangs"]} == _explained(capsys, simulated)


def test_without_the_workload_counts_and_reasons_only(capsys, simulated, tmp_path: Path) -> None:
    _, _, data = simulated
    report = tmp_path / "moved.json"  # a report whose workload files are gone
    report.write_text(json.dumps({**data, "workload": [str(tmp_path / "gone.yaml")]}))
    code, out, err = _run(capsys, "--report", str(report), "-o", "json")
    assert code == 0, err
    gangs = {g["name"]: g for g in json.loads(out)["gangs"]}
    groups = {g["name"]: g for g in data["podGroups"]}
    b = gangs["train-b"]
    assert (b["minMember"], b["bound"]) == (groups["train-b"]["minMember"], groups["train-b"]["bound"])
    assert b["capacity"] is None and "-f" in b["capacityNote"]
    assert b["reason"]["message"].startswith(f"gang {NS}/train-b:")
    assert b["waitSeconds"] is None  # its declaration is in the workload, not in the report
