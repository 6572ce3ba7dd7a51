"""GPU fragmentation in the simulation report: free GPU that none of the waiting pods could use, in the JSON,
the HTML page, the PNG and `phalanx compare`."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from test_html_report import (
    PNG_MAGIC,
    chart,
    check_well_formed,
    hand_report,
    labels,
    no_gpu_no_gang_report,
    run_cli,
    series_points,
    step_value,
    summary_cells,
)

from phalanx.model.gpu import GPU, GPU_SHARE
from phalanx.report.compare import FRAGMENTATION_ROW, compare_rows, compare_table
from phalanx.report.html_report import render_compare_html, render_html
from phalanx.report.png_report import render_png
from phalanx.sim.fragmentation import MAX_SAMPLES
from phalanx.sim.series import SeriesRecorder

GIB = 2**30 * 1000  # memory in milli-units, as the simulator records requests


def gpus(n: float, cpu: int = 1) -> dict[str, int]:
    return {GPU: int(n * 1000), "cpu": cpu * 1000, "memory": 4 * GIB}


def share(milli: int) -> dict[str, int]:
    return {GPU_SHARE: milli, "cpu": 1000, "memory": 4 * GIB}


def cluster(*names: str, gpu_count: int = 8, cpu: int = 64) -> SeriesRecorder:
    rec = SeriesRecorder()
    for name in names:
        rec.node_added({GPU: gpu_count * 1000, "cpu": cpu * 1000, "memory": 256 * GIB}, name)
    return rec


def bind(rec: SeriesRecorder, requests: dict[str, int], node: str, at: float = 0.0) -> None:
    rec.pod_arrived(requests, "", at)
    rec.pod_bound(requests, at, node)


def last(rec: SeriesRecorder) -> dict[str, Any]:
    return rec.report()["gpuFragmentation"][-1]


# -- the figure, known by construction --------------------------------------------------------------------
def test_one_free_gpu_on_each_node_is_fragmented_for_a_waiting_two_gpu_pod() -> None:
    rec = cluster("a", "b")
    for i in range(14):  # seven one-GPU pods on each node: one GPU free on each
        bind(rec, gpus(1), "a" if i % 2 else "b")
    rec.pod_arrived(gpus(2), "", 1.0)
    report = rec.report()
    end = report["gpuFragmentation"][-1]
    assert end == {
        "t": 1.0,
        "freeMilli": 2000,
        "fragmentedMilli": 2000,
        "fragmentedRatio": 1.0,
        "waitingGpuPods": 1,
    }
    summary = report["gpuFragmentationSummary"]
    assert summary["endFragmentedRatio"] == 1.0 and summary["endFragmentedMilli"] == 2000
    # Until t=1 nothing waited: nothing was unusable by the waiting pods.
    assert report["gpuFragmentation"][0]["fragmentedMilli"] == 0
    assert 0 < summary["meanFragmentedRatio"] < 0.01


def test_the_same_free_capacity_on_one_node_is_not_fragmented() -> None:
    rec = cluster("a", "b")
    for i in range(14):
        bind(rec, gpus(1), "a" if i < 6 else "b")  # six on a (two free), eight on b
    rec.pod_arrived(gpus(2), "", 1.0)
    assert last(rec) | {"t": 0} == {
        "t": 0,
        "freeMilli": 2000,
        "fragmentedMilli": 0,
        "fragmentedRatio": 0.0,
        "waitingGpuPods": 1,
    }


def test_free_gpus_on_a_node_without_the_cpu_for_the_waiting_pod_are_fragmented() -> None:
    rec = cluster("a", "b", cpu=8)
    bind(rec, gpus(1, cpu=7), "a")  # a: 7 GPUs free, 1 core
    bind(rec, gpus(6, cpu=1), "b")  # b: 2 GPUs free, 7 cores
    rec.pod_arrived(gpus(1, cpu=4), "", 1.0)
    end = last(rec)
    assert (end["freeMilli"], end["fragmentedMilli"]) == (9000, 7000)
    assert end["fragmentedRatio"] == pytest.approx(7 / 9, abs=1e-6)


def test_shares_take_devices_that_whole_gpu_pods_cannot_use() -> None:
    rec = cluster("a", gpu_count=2)
    bind(rec, share(600), "a")
    bind(rec, share(600), "a")  # no device holds both: each device has 400 free, none is whole
    rec.pod_arrived(gpus(1), "", 1.0)
    assert (last(rec)["freeMilli"], last(rec)["fragmentedMilli"]) == (800, 800)
    rec.pod_arrived(share(300), "", 2.0)  # a share fits where the shares are
    assert last(rec)["fragmentedMilli"] == 0


def test_a_finished_pod_frees_its_node_and_a_bound_pod_stops_waiting() -> None:
    rec = cluster("a", "b")
    for i in range(14):
        bind(rec, gpus(1), "a" if i % 2 else "b")
    rec.pod_arrived(gpus(2), "", 1.0)
    rec.pod_finished(gpus(1), 2.0, "a")  # a now has two free: the waiting pod fits there, not on b
    points = rec.report()["gpuFragmentation"]
    assert (points[-1]["freeMilli"], points[-1]["fragmentedMilli"]) == (3000, 1000)
    rec.pod_bound(gpus(2), 3.0, "a")  # it binds: nothing waits, nothing is counted as fragmented
    end = last(rec)
    assert (end["freeMilli"], end["fragmentedMilli"], end["waitingGpuPods"]) == (1000, 0, 0)


def test_pods_asking_for_no_gpu_do_not_count() -> None:
    rec = cluster("a", "b")
    for i in range(14):
        bind(rec, gpus(1), "a" if i % 2 else "b")
    rec.pod_arrived({"cpu": 1000}, "", 1.0)
    assert (last(rec)["fragmentedMilli"], last(rec)["waitingGpuPods"]) == (0, 0)


def test_unnamed_nodes_and_binds_count_as_one_pool() -> None:
    """Callers that name no node (as before) still get a figure: the cluster as one node."""
    rec = cluster("", "")  # two 8-GPU nodes, pooled
    for _ in range(14):
        bind(rec, gpus(1), "")
    rec.pod_arrived(gpus(2), "", 1.0)
    assert last(rec)["fragmentedMilli"] == 0  # at most the true figure


def test_samples_are_bounded_on_a_fixed_grid_of_virtual_time() -> None:
    rec = cluster("a", "b")
    for i in range(3000):
        rec.pod_arrived(gpus(1), "", float(i))
        rec.pod_bound(gpus(1), float(i), "a")
        rec.pod_finished(gpus(1), i + 0.5, "a")
    points = rec.report()["gpuFragmentation"]
    assert len(points) == MAX_SAMPLES
    assert points[0]["t"] == 0.0 and points[-1]["t"] == 2999.5
    steps = {round(b["t"] - a["t"], 3) for a, b in zip(points, points[1:])}
    assert len(steps) == 1


def test_no_gpu_nodes_no_fragmentation() -> None:
    rec = SeriesRecorder()
    rec.node_added({"cpu": 64_000, "memory": 256 * GIB}, "cpu-only")
    for i in range(5):
        rec.pod_arrived({"cpu": 1000}, "", float(i))
        rec.pod_arrived(gpus(1), "", float(i))  # never fits: no GPUs at all
    report = rec.report()
    assert report["gpuFragmentation"] == [] and report["gpuFragmentationSummary"] == {}
    assert SeriesRecorder().report()["gpuFragmentation"] == []  # no nodes, no events


# -- the renderers ------------------------------------------------------------------------------------------
# hand_report's cluster: 8 GPUs, over t = 0..130.
FRAG_T = [0.0, 10.0, 70.0, 130.0]
FREE = [8000, 4000, 3000, 8000]
FRAGMENTED = [0, 2000, 3000, 0]


def fragmented_report(mean: float = 0.25) -> dict[str, Any]:
    r = hand_report()
    r["gpuFragmentation"] = [
        {
            "t": t,
            "freeMilli": f,
            "fragmentedMilli": g,
            "fragmentedRatio": g / f,
            "waitingGpuPods": 1 if g else 0,
        }
        for t, f, g in zip(FRAG_T, FREE, FRAGMENTED)
    ]
    r["gpuFragmentationSummary"] = {
        "meanFragmentedRatio": mean,
        "meanFragmentedMilli": 1250.0,
        "meanFreeMilli": 5750.0,
        "endFragmentedRatio": 0.0,
        "endFragmentedMilli": 0,
        "endFreeMilli": 8000,
        "samples": 4,
    }
    return r


def test_json_report_of_a_recorder_is_json() -> None:
    rec = cluster("a", "b")
    bind(rec, gpus(7), "a")
    rec.pod_arrived(gpus(2), "", 1.0)
    report = json.loads(json.dumps(rec.report()))
    assert set(report["gpuFragmentation"][0]) >= {"t", "freeMilli", "fragmentedMilli", "fragmentedRatio"}
    assert set(report["gpuFragmentationSummary"]) >= {"meanFragmentedRatio", "endFragmentedRatio"}


def test_html_page_plots_free_and_fragmented_gpu_under_the_allocation() -> None:
    page = render_html(fragmented_report(), "frag")
    check_well_formed(page)
    root = chart(page, "fragmentation")
    assert labels(root) == ["GPU free", "GPU free, unusable by waiting pods"]
    for label, values in (("GPU free", FREE), ("GPU free, unusable by waiting pods", FRAGMENTED)):
        pts = series_points(root, label)
        assert [step_value(pts, t) for t in FRAG_T] == pytest.approx([v / 8000 for v in values], abs=0.01)
    assert "free but unusable by the waiting pods" in page  # the one-sentence explanation
    cells = summary_cells(page)
    assert cells["fragmentation:mean"] == "25%"
    assert cells["fragmentation:endGpus"] == "0 GPUs"
    allocation_at = page.index('data-chart="allocation"')
    assert allocation_at < page.index('data-chart="fragmentation"') < page.index('data-chart="pending"')


def test_html_without_gpus_or_with_an_older_report_has_no_fragmentation_plot() -> None:
    for report in (no_gpu_no_gang_report(), hand_report(), {}):
        page = render_html(report, "none")
        check_well_formed(page)
        assert 'data-chart="fragmentation"' not in page
        assert "fragmentation:mean" not in page


def test_compare_has_one_row_of_mean_fragmentation_and_a_plot_per_run() -> None:
    a, b = fragmented_report(0.25), fragmented_report(0.05)
    rows = {r[0]: r[1:] for r in compare_rows(a, b, "spread", "pack")}
    assert rows[FRAGMENTATION_ROW] == ("25%", "5%")
    assert FRAGMENTATION_ROW in compare_table(a, b, "spread", "pack")
    page = render_compare_html(a, b, "spread", "pack")
    check_well_formed(page)
    assert re.search(rf'<th>{re.escape(FRAGMENTATION_ROW)}</th><td class="num">25%</td><td class="num">5%</td>', page)
    assert labels(chart(page, "fragmentation-1")) == ["GPU free", "GPU free, unusable by waiting pods"]
    # A run without it (no GPUs, or an older report) reads "-"; two such runs have no row.
    rows = {r[0]: r[1:] for r in compare_rows(no_gpu_no_gang_report(), b, "a", "b")}
    assert rows[FRAGMENTATION_ROW] == ("-", "5%")
    assert FRAGMENTATION_ROW not in {r[0] for r in compare_rows(hand_report(), hand_report(), "a", "b")}
    check_well_formed(render_compare_html(no_gpu_no_gang_report(), copy.deepcopy(b), "a", "b"))


def test_png_draws_with_and_without_fragmentation(tmp_path: Path) -> None:
    for name, report in (("f", fragmented_report()), ("n", no_gpu_no_gang_report())):
        out = tmp_path / f"{name}.png"
        render_png(report, out, name)
        assert out.read_bytes()[:8] == PNG_MAGIC


# -- through the simulator ------------------------------------------------------------------------------------
WORKLOAD = """
apiVersion: v1
kind: Node
metadata: {name: node-1}
status: {allocatable: {cpu: "8", memory: 32Gi, nvidia.com/gpu: "2", pods: "110"}}
---
apiVersion: v1
kind: Node
metadata: {name: node-2}
status: {allocatable: {cpu: "8", memory: 32Gi, nvidia.com/gpu: "2", pods: "110"}}
""" + "".join(
    f"""---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default, creationTimestamp: "2026-01-01T00:00:{at:02d}Z"}}
spec:
  schedulerName: phalanx
  {node}
  containers: [{{name: c, resources: {{requests: {{cpu: "1", nvidia.com/gpu: "{n}"}}}}}}]
"""
    for name, at, node, n in (
        ("one-a", 0, "nodeName: node-1", 1),
        ("one-b", 0, "nodeName: node-2", 1),
        ("two", 5, "", 2),
    )
)


@pytest.mark.integration
def test_simulate_reports_the_gpus_two_bound_pods_strand(tmp_path: Path) -> None:
    """Two one-GPU pods already bound on two 2-GPU nodes: the two-GPU pod fits nowhere, and the two free GPUs
    are fragmented (the driver passes node names to the series)."""
    workload, out = tmp_path / "w.yaml", tmp_path / "r.json"
    workload.write_text(WORKLOAD)
    proc = run_cli("simulate", "-f", str(workload), "--until", "30s", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    end = report["gpuFragmentation"][-1]
    assert (end["freeMilli"], end["fragmentedMilli"], end["waitingGpuPods"]) == (2000, 2000, 1)
    assert report["gpuFragmentationSummary"]["endFragmentedRatio"] == 1.0
