"""bench-k8s's pure parts, without an API server: arrival schedule and figures, percentiles, the CPU-per-pod
lead row and its paired ratio, the steady shapes, and the py-spy profile summariser."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from phalanx.bench.k8s import arrival, profile, report
from phalanx.bench.k8s.workloads import PEER, PHALANX, WARMUP_GANG, Shape, gang_names, steady, workloads


def test_gangs_are_due_at_a_fixed_rate() -> None:
    assert arrival.due_offsets(20, 4) == [0.0, 0.05, 0.1, 0.15]
    with pytest.raises(ValueError):
        arrival.due_offsets(0, 3)
    assert arrival.workers_for(20, 3) >= 20 * 4 * 0.1  # four times the POSTs in flight at 100 ms each
    assert arrival.workers_for(0.5, 3) == 4


def test_dist_has_p99_and_empty_is_none() -> None:
    d = report.dist([float(i) for i in range(1, 101)], 1000, 1)
    assert d == {"n": 100, "p50": 51000.0, "p95": 95000.0, "p99": 99000.0, "max": 100000.0}
    assert report.dist([]) == {"n": 0, "p50": None, "p95": None, "p99": None, "max": None}


def test_arrival_figures_from_a_log() -> None:
    log = arrival.ArrivalLog(t0=100.0)
    for i in range(5):  # five gangs due every 0.1 s, each started 2 ms late
        g = f"gang-{i:05d}"
        log.due[g] = 100.0 + 0.1 * i
        log.started[g] = 100.002 + 0.1 * i
        log.created[f"{g}-0"] = log.started[g] + 0.001
    bound = {f"gang-{i:05d}-0": 100.0 + 0.1 * i + 0.051 for i in range(4)}  # the last one never bound
    f = arrival.figures(log, bound, 10.0)
    assert f["gangs_created"] == 5 and f["pods_created"] == 5 and f["pods_bound"] == 4
    assert f["achieved_gangs_per_s"] == pytest.approx(10.0)
    assert f["start_lag_ms"]["max"] == pytest.approx(2.0)
    assert f["latency_ms"]["p50"] == pytest.approx(48.0) and f["latency_ms"]["n"] == 4
    bound["gang-00001-0"] += 0.2  # the slowest, created 0.103 s after the first gang was due
    assert arrival.figures(log, bound, 10.0)["slowest"] == [[0.1, pytest.approx(248.0)]]


def test_arrivals_create_each_gang_podgroup_first_then_its_pods(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[str, str, float]] = []
    lock = threading.Lock()

    def fake_call(api: Any, method: str, path: str, body: Any = None, content_type: str | None = None) -> None:
        with lock:
            sent.append((path.rsplit("/", 1)[-1], body["metadata"]["name"], time.monotonic()))

    monkeypatch.setattr(arrival, "call", fake_call)
    shape = steady("s", nodes=1, gangs_per_s=200, seconds=0.05, timeout=5)
    gangs = gang_names(shape)
    arr = arrival.Arrivals(None, shape, "sched", gangs)  # type: ignore[arg-type]
    before = time.time()
    arr.start()
    assert arr.join(5)
    # the first gang's due time on the wall clock, to find the slowest pods in the services' logs
    assert before <= arr.log.t0_unix <= before + 0.05
    assert arrival.figures(arr.log, {}, 200)["first_due_unix"] == pytest.approx(arr.log.t0_unix, abs=0.001)
    assert WARMUP_GANG not in arr.log.started  # created before the launch, not by the arrivals
    assert sorted(arr.log.started) == [g for g in gangs if g != WARMUP_GANG]
    for g in arr.log.started:
        kinds = [k for k, name, _ in sent if name == g or name.startswith(g + "-")]
        assert kinds == ["podgroups", "pods", "pods", "pods"]
        assert arr.log.started[g] >= arr.log.due[g]
    first = {name: t for _, name, t in sent}
    assert all(arr.log.created[p] <= first[p] for p in arr.log.created)


def test_steady_shape_counts_its_warmup_gang() -> None:
    s = steady("steady-500n-20gps", nodes=500, gangs_per_s=20, seconds=30, timeout=180)
    assert s.steady and s.gangs == 600 and s.warmup_pods == 3
    assert s.pods == s.expected_bound == 1803 and s.pods_before_launch == 3 and not s.contention
    assert list(gang_names(s))[0] == WARMUP_GANG and len(gang_names(s)) == 601
    plain = Shape("g", nodes=1, gangs=2, gang_size=3, expected_bound=6)
    assert not plain.steady and plain.pods_before_launch == 6 and WARMUP_GANG not in gang_names(plain)
    large = {s.name: s for s in workloads(large=True)}
    assert large["gang-5000n-10000x3"].pods == 30000 and large["gang-5000n-10000x3"].nodes == 5000
    assert any(s.steady for s in workloads(quick=True)) and any(s.steady for s in workloads())


def _run(which: str, rep: int, cpu: float, procs: dict[str, float], pods: int = 100) -> dict[str, Any]:
    return {
        "workload": "w",
        "scheduler": which,
        "repeat": rep,
        "cpu_per_bound_pod_ms": cpu,
        "scheduler_peak_rss_mib": 100.0,
        "api_requests_per_pod_by_kind": {},
        "processes": {
            p: {"cpu_s": v, "peak_rss_mib": 10.0, "cpu_per_bound_pod_ms": v * 1000 / pods} for p, v in procs.items()
        },
        "correctness": {"ok": True, "partial_gangs": 0, "overcommitted_nodes": 0, "pods_bound": pods, "gangs_bound": 0},
        "event_sources": [],
    }


def test_cpu_per_pod_leads_and_its_ratio_is_the_median_of_the_repeats_ratios() -> None:
    runs = [
        _run(PHALANX, 1, 4.0, {"binder": 0.3, "scheduler": 0.1}),
        _run(PEER, 1, 1.0, {"kube-scheduler": 0.1}),
        _run(PEER, 2, 2.0, {"kube-scheduler": 0.2}),
        _run(PHALANX, 2, 5.0, {"binder": 0.4, "scheduler": 0.1}),
        _run(PHALANX, 3, 9.0, {"binder": 0.8, "scheduler": 0.1}),
        _run(PEER, 3, 3.0, {"kube-scheduler": 0.3}),
    ]
    summary = report.summarize(runs)
    entry = summary["w"]
    # per repeat 4x, 2.5x, 3x: the median is 3x; the ratio of medians (5 / 2) would say 2.5x
    assert entry["paired_ratio_phalanx_over_peer"]["cpu_per_bound_pod_ms"] == 3.0
    assert entry["ratio_phalanx_over_peer"]["cpu_per_bound_pod_ms"] == 2.5
    assert entry[PHALANX]["processes"]["binder"]["cpu_per_bound_pod_ms"] == 4.0
    lines = report.table(summary, {}).splitlines()
    assert lines[2].startswith("CPU per bound pod, ms (all scheduler processes)") and lines[2].endswith("3.00x")
    assert [ln.split()[0] for ln in lines[3:6]] == ["binder", "scheduler", "kube-scheduler"]
    assert "4.00" in lines[3] and "1.00" in lines[4] and "2.00" in lines[5]


def test_report_ratio_without_pairs_is_none() -> None:
    assert report.paired_ratios([_run(PHALANX, 1, 4.0, {})], "w")["cpu_per_bound_pod_ms"] is None


RAW = [
    "<module> (a.py:1);main (a.py:5);work (b.py:10) 30",
    "<module> (a.py:1);main (a.py:6);work (b.py:12);helper (c.py:3) 10",
    "<module> (a.py:1);main (a.py:7);main (a.py:9) 5",
    "garbage",
]


def test_profile_counts_self_and_inclusive_samples_by_function() -> None:
    s = profile.summarize_stacks(RAW)
    assert s.samples == 45
    assert s.self_samples == {"work (b.py)": 30, "helper (c.py)": 10, "main (a.py)": 5}
    assert s.inclusive["main (a.py)"] == 45  # recursion counted once a sample
    assert s.inclusive["work (b.py)"] == 40 and s.inclusive["helper (c.py)"] == 10
    assert profile.us_per_pod(100, 100, 10) == 100_000.0  # 1 s of CPU over 10 pods
    assert profile.us_per_pod(5, 100, 0) == 0.0


def test_profile_summary_reads_the_runs_meta(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "r-binder.txt").write_text("\n".join(RAW) + "\n")
    (tmp_path / "r-meta.json").write_text(
        json.dumps({"rate": 100, "pods_bound": 45, "files": {"binder": "r-binder.txt"}})
    )
    assert profile.summary_main([str(tmp_path / "r-binder.txt")], top=2) == 0
    out = capsys.readouterr().out
    assert "--gil" in out and "GIL" in out
    assert "45 samples at 100/s" in out and "10,000 us/pod" in out
    assert "work (b.py)" in out and "6,666.7" in out  # 30 samples / 100 Hz / 45 pods
    (tmp_path / "other.txt").write_text(RAW[0] + "\n")
    assert profile.summary_main([str(tmp_path / "other.txt")]) == 2  # no meta names it and no --pods
    assert profile.summary_main([str(tmp_path / "other.txt")], pods=30) == 0


def test_older_runs_get_cpu_per_pod_from_what_they_recorded() -> None:
    old: dict[str, Any] = {
        "scheduler_cpu_s": 3.0,
        "processes": {"binder": {"cpu_s": 2.0}},
        "correctness": {"pods_bound": 1000},
    }
    failed: dict[str, Any] = {"error": "x"}
    report.derive_cpu_per_pod([old, failed])
    assert old["cpu_per_bound_pod_ms"] == 3.0 and old["processes"]["binder"]["cpu_per_bound_pod_ms"] == 2.0
    assert "cpu_per_bound_pod_ms" not in failed
    assert old["cpu_per_pod_after_first_binding_ms"] is None  # it recorded no start-up CPU


def test_cpu_per_pod_splits_at_the_first_binding() -> None:
    """Start-up (the processes' CPU when the first binding was seen) apart from the CPU per pod after it."""
    run: dict[str, Any] = {
        "scheduler_cpu_s": 4.0,
        "startup_cpu_s": {"binder": 0.7, "queue": 0.3, "scheduler": 1.0},
        "processes": {"binder": {"cpu_s": 2.0}},
        "correctness": {"pods_bound": 2000},
    }
    report.derive_cpu_per_pod([run])
    assert run["cpu_per_bound_pod_ms"] == 2.0
    assert run["cpu_to_first_binding_s"] == 2.0 and run["cpu_per_pod_after_first_binding_ms"] == 1.0
    assert report.startup_split(1.0, {"kube-scheduler": 0.4}, 0) == {
        "cpu_to_first_binding_s": None,
        "cpu_per_pod_after_first_binding_ms": None,
    }
