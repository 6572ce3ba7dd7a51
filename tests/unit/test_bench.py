"""`phalanx bench`: the workload shapes, the percentile math, and small end-to-end runs on a real stack."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from phalanx.bench import workloads as W
from phalanx.bench.report import table
from phalanx.bench.stats import percentile, redis_delta, summarize_ms
from phalanx.cli.main import build_parser

GI = 2**30 * 1000
MI = 2**20 * 1000


# -- shapes ------------------------------------------------------------------------------------------
def test_scheduling_basic_shape() -> None:
    w = W.basic()
    assert (w.name, w.kind, len(w.nodes), len(w.initial), w.pod_count, len(w.gangs)) == (
        "basic-5000",
        "throughput",
        5000,
        1000,
        10000,
        0,
    )
    assert all(n.allocatable == {"cpu": 4000, "memory": 32 * GI, "pods": 110_000} for n in w.nodes)
    assert all(p.requests == {"cpu": 100, "memory": 500 * MI, "pods": 1000} for p in w.initial + w.pods)
    assert all(len(u) == 1 and not u[0].gang for u in w.units)
    keys = [p.key for p in w.initial + w.pods]
    assert len(set(keys)) == len(keys)
    assert len({n.name for n in w.nodes}) == 5000


@pytest.mark.parametrize("count,size", [(1000, 3), (10, 1000)])
def test_gang_shapes(count: int, size: int) -> None:
    w = W.gangs(5000, count=count, size=size)
    assert (w.name, len(w.nodes), len(w.gangs), w.pod_count) == (f"gang{size}-5000", 5000, count, count * size)
    assert all(p.requests == {"cpu": 100, "memory": 100 * MI, "pods": 1000} for p in w.pods)
    specs = {g.key: g for g in w.gangs}
    for unit in w.units:
        assert len(unit) == size and len({p.gang for p in unit}) == 1
        spec = specs[unit[0].gang]
        assert spec.min_available == spec.total_number == size
    assert not w.initial


def test_gang_latency_shape_feeds_at_a_rate() -> None:
    w = W.gang_latency(5000, count=1000, size=3, rate=100.0)
    assert (w.kind, w.rate, len(w.units), w.pod_count) == ("latency", 100.0, 1000, 3000)


def test_gpu_shape_fills_the_cluster() -> None:
    w = W.gpu(1000)
    assert len(w.nodes) == 1000 and all(n.allocatable[W.GPU] == 8000 for n in w.nodes)
    asked = sum(p.requests[W.GPU] for p in w.pods) // 1000
    assert asked == 8000  # the mix fills every GPU exactly
    seen = {(len(u), u[0].requests[W.GPU] // 1000) for u in w.units}
    assert seen == {(s, g) for s in (8, 16, 64) for g in (1, 8)}
    for unit in w.units:  # one GPU count per gang; CPU and memory scale with it
        gpus = {p.requests[W.GPU] for p in unit}
        assert len(gpus) == 1
        g = gpus.pop() // 1000
        assert unit[0].requests["cpu"] == 4000 * g and unit[0].requests["memory"] == 32 * GI * g
    # 88 GPUs, then the 8-GPU gangs are too big for the 12 left and the cycle comes round to (8, 1); 4 left
    assert W.gpu_mix(100) == [(8, 1), (16, 1), (64, 1), (8, 1)]
    assert w.fill and w.kind == "latency"


def test_suites() -> None:
    full = W.suite()
    assert {w.name for w in full} >= {"basic-5000", "gang3-5000", "gang1000-5000", "gang3-latency-5000", "gpu-1000"}
    assert {len(w.nodes) for w in full if w.shape == "basic"} == {500, 1000, 2000, 5000}
    quick = W.suite(quick=True)
    assert all(len(w.nodes) <= 100 and w.pod_count <= 2000 for w in quick)


# -- math ------------------------------------------------------------------------------------------------
def test_percentile_matches_numpy() -> None:
    rng = np.random.default_rng(3)
    for n in (1, 2, 5, 100, 1001):
        values = rng.exponential(10.0, size=n).tolist()
        for q in (0, 50, 90, 99, 100):
            assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([0.0, 10.0], 90) == pytest.approx(9.0)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


@pytest.mark.starts_processes
def test_process_probes_read_a_live_process_and_none_once_gone() -> None:
    import os
    import subprocess
    import sys

    from phalanx.bench.procs import cpu_seconds, machine_busy_s, peak_rss_mib, proc_sample

    sum(i * i for i in range(200_000))  # some CPU time to see
    me = os.getpid()
    assert (cpu_seconds(me) or 0) > 0 and (peak_rss_mib(me) or 0) > 1
    s = proc_sample(me)
    assert s.alive and s.cpu_s > 0 and 0 < s.rss_mib <= s.peak_rss_mib + 0.1
    assert machine_busy_s() > 0
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert cpu_seconds(int(gone)) is None and peak_rss_mib(int(gone)) is None and not proc_sample(int(gone)).alive


def test_summary_in_milliseconds() -> None:
    s = summarize_ms([0.001, 0.002, 0.003, 0.004])
    assert s["count"] == 4 and s["p50"] == 2.5 and s["max"] == 4.0
    assert summarize_ms([])["p99"] is None


def test_redis_delta_leaves_out_the_bench_own_commands() -> None:
    before = {"commands": 100, "reads": 50, "cmd:evalsha": 10, "cmd:llen": 0}
    after = {"commands": 190, "reads": 80, "cmd:evalsha": 20, "cmd:llen": 5}
    d = redis_delta(before, after, own_commands=6)  # 5 LLEN polls and one INFO
    assert d["commands"] == 84 and d["round_trips"] == 24
    assert d["by_command"] == {"evalsha": 10, "llen": 5}


# -- end to end ------------------------------------------------------------------------------------------
needs_redis = pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed")


def _check(r: dict[str, object]) -> None:
    assert r["pods_bound"] == r["pods"]
    assert r["pods_per_second"] > 0  # type: ignore[operator]
    lat = r["latency_ms"]
    assert lat["count"] > 0 and 0 <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]  # type: ignore[index]
    assert all(v and v > 0 for v in r["peak_rss_mib"].values())  # type: ignore[union-attr]
    assert r["redis"]["commands_per_pod"] > 0 and r["redis"]["round_trips"] > 0  # type: ignore[index]
    assert r["grpc"]["calls"] > 0  # type: ignore[index]


@pytest.mark.starts_processes
@needs_redis
def test_throughput_run_with_initial_pods(tmp_path: Path) -> None:
    from phalanx.bench.runner import RunOptions, run_workload

    w = W.basic(50, initial=40, measured=300, batch=100)
    r = run_workload(w, RunOptions(log_dir=tmp_path, timeout_floor=60))
    _check(r)
    assert (r["nodes"], r["initial_pods"], r["pods"], r["add_batches"], r["gangs"]) == (50, 40, 300, 3, 0)
    assert r["gangs_per_second"] is None
    # Every measured pod was added and bound: at least one Add per batch reached the queue, one pop
    # and one bind per batch of pods at most.
    assert r["grpc"]["by_method"].get("/phalanx.v1.Queue/Add") == 3
    assert r["redis"]["by_command"].get("rpush", 0) >= 300  # one bind-log entry per pod


@pytest.mark.starts_processes
@needs_redis
def test_cli_writes_json_and_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, txt = tmp_path / "bench.json", tmp_path / "bench.txt"
    args = build_parser().parse_args(
        [
            "bench",
            "--quick",
            "--sizes",
            "50",
            "--only",
            "gang3-latency-50",
            "--rate",
            "200",
            "--output",
            str(out),
            "--table",
            str(txt),
            "--log-dir",
            str(tmp_path / "logs"),
        ]
    )
    assert args.func(args) == 0
    doc = json.loads(out.read_text())
    assert doc["machine"]["cpu_count"] >= 1 and doc["machine"]["python"] and doc["machine"]["date"]
    assert "cpu_model" in doc["machine"] and "git_commit" in doc["machine"]
    assert doc["quick"] is True and doc["failed"] == []
    (r,) = doc["results"]
    _check(r)
    assert (r["kind"], r["gangs"], r["gangs_bound"]) == ("latency", 200, 200)
    assert r["gangs_per_second"] > 0 and r["grpc"]["calls_per_gang"] > 0
    # Constant per gang: a handful of gRPC messages and Redis round trips, whatever the count.
    assert r["grpc"]["calls_per_gang"] < 12 and r["redis"]["round_trips_per_gang"] < 12
    printed = capsys.readouterr().out
    assert "gang3-latency-50" in printed and "pods/s" in printed
    assert "gang3-latency-50" in txt.read_text()


def test_table_formats_a_result() -> None:
    r = {
        "workload": "gang3-5000",
        "kind": "throughput",
        "nodes": 5000,
        "pods": 3000,
        "pods_bound": 3000,
        "gangs": 1000,
        "gangs_bound": 1000,
        "pods_per_second": 1234.5,
        "gangs_per_second": 411.5,
        "latency_ms": {"p50": 1.0, "p90": 2.0, "p99": 3.0},
        "peak_rss_mib": {"queue": 40.0, "scheduler": 80.0, "binder": 50.0, "redis": 20.0},
        "redis": {"commands_per_pod": 22.5, "round_trips_per_gang": 2.0},
        "grpc": {"calls_per_gang": 1.02},
    }
    text = table([r])
    assert "gang3-5000" in text and "1,234.5" in text and "40/80/50/20" in text
    assert "| 3 " not in text  # a throughput run's latency (queueing) stays out of the table
