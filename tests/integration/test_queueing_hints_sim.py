"""Queueing hints through the real stack (redis-server, queue, scheduler and binder as processes, the
simulator on a virtual clock): a gang short of GPUs is not retried each time a CPU-only pod finishes, only
when GPUs free, and then it binds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import make_node, make_pod

from phalanx.model.keys import KOORD_MIN_AVAILABLE, KOORD_NAME, KOORD_WAITING_TIME, SIM_DURATION
from phalanx.sim.driver import SimOptions
from phalanx.sim.run import simulate
from phalanx.sim.workload import load_workload

pytestmark = pytest.mark.integration


def ts(seconds: float) -> str:
    whole = int(seconds)
    return f"2026-01-01T00:{whole // 60:02d}:{whole % 60:02d}Z"


def gang_pod(name: str, gang: str, gpus: int, at: float, runs: str) -> dict[str, Any]:
    return (
        make_pod(name)
        .scheduler("phalanx")
        .container()
        .gpu(gpus)
        .cpu("4")
        .created(ts(at))
        .annotation(KOORD_NAME, gang)
        .annotation(KOORD_MIN_AVAILABLE, "2")
        .annotation(KOORD_WAITING_TIME, "1h")
        .annotation(SIM_DURATION, runs)
        .build()
    )


def test_a_gpu_starved_gang_waits_through_cpu_churn_and_binds_when_gpus_free(tmp_path: Path) -> None:
    objects: list[dict[str, Any]] = [make_node(f"gpu-{i}").cpu("64").memory("256Gi").gpu(8).build() for i in range(2)]
    objects.append(make_node("cpu-0").cpu("16").memory("64Gi").build())
    objects += [gang_pod(f"hold-{i}", "hold", 6, 0, "300s") for i in range(2)]  # leaves 2 GPUs per node
    objects += [gang_pod(f"big-{i}", "big", 8, 1, "60s") for i in range(2)]  # waits for the hold gang
    cpu_pods = 40
    for k in range(cpu_pods):  # CPU-only pods, one every 5 s for 200 s, each finishing 4 s later
        objects.append(
            make_pod(f"cpu-{k}")
            .scheduler("phalanx")
            .container()
            .cpu("8")
            .created(ts(2 + 5 * k))
            .annotation(SIM_DURATION, "4s")
            .build()
        )
    path = tmp_path / "workload.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    report = simulate(load_workload([path]), SimOptions(), log_dir=tmp_path / "logs")
    pods = {p["name"]: p for p in report["pods"]}
    assert all(pods[f"cpu-{k}"]["boundAt"] == 2 + 5 * k for k in range(cpu_pods))
    assert pods["big-0"]["boundAt"] == pods["big-1"]["boundAt"] == 300.0  # when the hold gang finished
    # hold (2) + big at arrival (2) + every CPU pod once (40) + big once GPUs free (2). Retrying the big gang
    # on every CPU pod that finishes would add 2 attempts for each of them.
    assert report["summary"]["schedulingAttempts"] == 2 + 2 + cpu_pods + 2
