"""The simulation's series: capacity reserved for waiting gangs and not bound, and whether a run is the
arrived-GPU-demand sweep the FGD metric is read from."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from phalanx.model.gpu import GPU
from phalanx.sim.series import SeriesRecorder

GIB = 2**30 * 1000  # memory in milli-units, as the simulator records requests


def gpus(n: float, cpu: int = 1) -> dict[str, int]:
    return {GPU: int(n * 1000), "cpu": cpu * 1000, "memory": 4 * GIB}


def recorder(gpu_count: int = 8) -> SeriesRecorder:
    rec = SeriesRecorder()
    rec.node_added({GPU: gpu_count * 1000, "cpu": 64_000, "memory": 256 * GIB})
    return rec


def at(report: dict[str, Any], key: str, t: float) -> dict[str, float]:
    s = report["series"]
    i = s["t"].index(t)
    return {r: values[i] for r, values in s[key].items()}


def test_reserved_follows_what_each_gang_holds_until_it_binds_or_lets_go() -> None:
    rec = recorder()
    for name in ("a0", "a1", "a2", "b0", "b1"):
        rec.pod_arrived(gpus(1), f"ns/{name[0]}", 0.0)
    rec.gang_reserved("ns/a", {GPU: 2000, "cpu": 2000}, 1.0)  # two of gang a's three pods
    rec.gang_reserved("ns/b", {GPU: 1000, "cpu": 1000}, 2.0)
    rec.gang_reserved("ns/a", {GPU: 3000, "cpu": 3000}, 3.0)  # its third: then it binds at once
    for _ in range(3):
        rec.pod_bound(gpus(1), 3.0)
    rec.gang_reserved("ns/a", {}, 3.0)
    rec.gang_reserved("ns/b", {}, 10.0)  # timed out: released
    report = rec.report()
    assert at(report, "reserved", 1.0)[GPU] == 2 and at(report, "reserved", 1.0)["cpu"] == 2
    assert at(report, "reserved", 2.0)[GPU] == 3
    assert at(report, "reserved", 3.0)[GPU] == 1  # a bound (allocated now), b still holds one
    assert report["series"]["allocated"][GPU][report["series"]["t"].index(3.0)] == 3
    assert at(report, "reservedRatio", 2.0)[GPU] == pytest.approx(3 / 8)
    assert at(report, "reserved", 10.0) == {GPU: 0, "cpu": 0, "memory": 0}


def test_reports_arriving_out_of_order_fold_by_time() -> None:
    rec = recorder()
    rec.gang_reserved("ns/a", {GPU: 4000}, 5.0)
    rec.gang_reserved("ns/a", {GPU: 2000}, 2.0)  # learnt later, happened earlier
    report = rec.report()
    assert at(report, "reserved", 2.0)[GPU] == 2 and at(report, "reserved", 5.0)[GPU] == 4


def sweep(rec: SeriesRecorder, pods: int, each: float, finish_at: float | None = None) -> None:
    """`pods` GPU pods arriving one a second, each bound as it arrives while 20 GPUs last; one finishes at
    `finish_at`."""
    for i in range(pods):
        rec.pod_arrived(gpus(each), "", float(i))
        if (i + 1) * each <= 20:
            rec.pod_bound(gpus(each), float(i))
    if finish_at is not None:
        rec.pod_finished(gpus(each), finish_at)


def test_a_sweep_in_small_steps_with_nothing_leaving_is_one() -> None:
    rec = recorder(20)
    sweep(rec, 26, 1)  # 1/20 = 5% a step, up to 130%
    report = rec.report()
    assert report["gpuDemandSweep"] is True
    assert report["gpuAllocationAtDemand"] == {"0.9": 0.9, "1": 1.0, "1.1": 1.0, "1.3": 1.0}
    rec = recorder(20)
    sweep(rec, 26, 1, finish_at=40.0)  # a pod leaving after the last level changes nothing
    assert rec.report()["gpuDemandSweep"] is True


@pytest.mark.parametrize(
    "why, build",
    [
        ("a pod finished before 130%", lambda rec: sweep(rec, 26, 1, finish_at=10.5)),
        ("demand jumped 25% at once", lambda rec: sweep(rec, 6, 5)),
        ("demand never reached 90%", lambda rec: sweep(rec, 10, 1)),
    ],
)
def test_runs_that_are_no_sweep(why: str, build: Callable[[SeriesRecorder], None]) -> None:
    rec = recorder(20)
    build(rec)
    assert rec.report()["gpuDemandSweep"] is False, why


def test_no_gpus_no_sweep() -> None:
    rec = SeriesRecorder()
    rec.node_added({"cpu": 64_000, "memory": 256 * GIB})
    for i in range(30):
        rec.pod_arrived({"cpu": 1000}, "", float(i))
    assert rec.report()["gpuDemandSweep"] is False
