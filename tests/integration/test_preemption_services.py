"""Gang preemption through the real stack (redis-server and the three services as processes, driven by the
simulator on a virtual clock): the victims end and are reported preempted, the preemptor binds whole on
their nodes, and a scheduler killed between writing its nomination and asking for the evictions is
replaced by one that asks for them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_simulate_scenarios import by_name, gpu_node, run, worker

from phalanx.model.keys import KOORD_MIN_AVAILABLE, KOORD_NAME, KOORD_WAITING_TIME, SIM_DURATION

pytestmark = pytest.mark.integration


def _gang(name: str, size: int, priority: int, at: float, gpus: int = 4) -> list[dict[str, Any]]:
    pods = []
    for i in range(size):
        pod = (
            worker(f"{name}-{i}", gpus=gpus, at=at)
            .annotation(KOORD_NAME, name)
            .annotation(KOORD_MIN_AVAILABLE, str(size))
            .annotation(KOORD_WAITING_TIME, "300s")
            .annotation(SIM_DURATION, "1000s")
            .set("spec.priority", priority)
            .build()
        )
        pods.append(pod)
    return pods


def _objects() -> list[dict[str, Any]]:
    return [
        gpu_node("n1", 4),
        gpu_node("n2", 4),
        gpu_node("n3", 4),
        *_gang("cheap", 2, priority=1, at=0),
        *_gang("dear", 1, priority=5, at=0),
        *_gang("high", 2, priority=100, at=10),
    ]


def _check(report: dict[str, Any]) -> None:
    pods = by_name(report)
    assert [pods[f"cheap-{i}"]["preemptedBy"] for i in range(2)] == ["default/high"] * 2
    assert [pods[f"cheap-{i}"]["finishedAt"] for i in range(2)] == [10.0, 10.0]  # ended when evicted
    assert pods["dear-0"]["preemptedBy"] is None and pods["dear-0"]["finishedAt"] == 1000.0
    high = [pods[f"high-{i}"] for i in range(2)]
    assert {p["boundAt"] for p in high} == {10.0}  # whole, once the victims were gone
    assert sorted(p["node"] for p in high) == sorted(pods[f"cheap-{i}"]["node"] for i in range(2))
    assert report["summary"]["podsPreempted"] == 2
    assert report["summary"]["partialGangs"] == 0


def test_preemption_through_the_services(tmp_path: Path) -> None:
    _check(run(tmp_path, _objects()))


def test_scheduler_killed_after_its_nomination_still_evicts_and_binds(tmp_path: Path) -> None:
    report = run(tmp_path, _objects(), scheduler_env={"PHALANX_FAULT": "scheduler.after_nominate:1"})
    assert report["summary"]["schedulerRestarts"] == 1
    _check(report)
