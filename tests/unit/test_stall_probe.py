"""bench-k8s's machine-pause probe: a real probe process sees a pause it was put through, the figures count the
slowest pods that waited through a pause, and steady arrival's p99 ratio is the median of the pairs'."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from phalanx.bench.k8s import arrival, report
from phalanx.bench.k8s.stall_probe import Stall, StallProbe, stall_figures
from phalanx.bench.k8s.workloads import PEER, PHALANX


@pytest.mark.starts_processes
def test_the_probe_process_reports_a_pause_it_was_put_through() -> None:
    probe = StallProbe().start()
    try:
        time.sleep(0.5)  # a bare interpreter (-I -S) is up and sleeping well within this
        assert probe._proc is not None and probe._proc.poll() is None
        # SIGSTOP holds the probe off the CPU as a busy machine would: its next wake-up comes that much late.
        before = time.time()
        os.kill(probe._proc.pid, signal.SIGSTOP)
        time.sleep(0.12)
        os.kill(probe._proc.pid, signal.SIGCONT)
        deadline = time.monotonic() + 5
        while not any(s.ms >= 80 for s in probe.stalls()) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stalls = probe.stop()
    long = [s for s in stalls if s.ms >= 80]
    assert len(long) == 1, stalls
    assert before < long[0].began_unix + 0.05 and long[0].ended_unix <= time.time()
    assert probe._proc is not None and probe._proc.poll() is not None  # stopped, not left running


def test_figures_count_the_slowest_pods_that_waited_through_a_pause() -> None:
    t0 = 1_000.0
    stalls = [
        Stall(t0 + 2.030, 25.0),  # 2.005-2.030: counted
        Stall(t0 + 5.020, 8.0),  # under 10 ms: not counted
        Stall(t0 - 1.0, 40.0),  # before the arrivals: not counted
        Stall(t0 + 9.050, 30.0),  # 9.020-9.050
    ]
    slowest = [
        [1.990, 50.0],  # created 1.990, bound 2.040: spans the first pause
        [2.031, 45.0],  # created after it ended
        [5.000, 60.0],  # only the short pause
        [8.960, 61.0],  # bound 9.021, just after the last pause began
        [9.100, 70.0],  # after everything
    ]
    f = stall_figures(stalls, slowest, t0, window_s=30.0)
    assert f["count"] == 2 and f["max_ms"] == 30.0 and f["total_ms"] == 55.0
    assert f["slowest"] == 5 and f["slowest_during_stall"] == 2
    assert stall_figures(stalls, slowest, t0, window_s=5.0)["count"] == 1  # the window ends before 9 s
    assert stall_figures([], slowest, t0, 30.0)["slowest_during_stall"] == 0


def test_arrival_figures_give_the_window_to_the_last_binding() -> None:
    log = arrival.ArrivalLog(t0=100.0, t0_unix=5_000.0)
    log.due["g"], log.started["g"] = 100.0, 100.001
    log.created = {"g-0": 100.002, "g-1": 100.004}
    f = arrival.figures(log, {"g-0": 100.5, "g-1": 131.25}, 1.0)
    assert f["span_s"] == pytest.approx(31.25) and f["first_due_unix"] == 5_000.0


def _steady(which: str, rep: int, p99: float) -> dict[str, Any]:
    return {
        "workload": "s",
        "scheduler": which,
        "repeat": rep,
        "cpu_per_bound_pod_ms": 1.0,
        "scheduler_peak_rss_mib": 100.0,
        "arrival": {"latency_ms": {"p99": p99}, "machine_stalls": {"count": rep, "slowest_during_stall": 2 * rep}},
        "api_requests_per_pod_by_kind": {},
        "processes": {},
        "correctness": {"ok": True, "partial_gangs": 0, "overcommitted_nodes": 0, "pods_bound": 10, "gangs_bound": 0},
        "event_sources": [],
    }


def test_steady_p99_ratio_is_the_median_of_the_pairs() -> None:
    runs = [_steady(PHALANX, 1, 30), _steady(PEER, 1, 60), _steady(PHALANX, 2, 80), _steady(PEER, 2, 40)]
    runs += [_steady(PHALANX, 3, 35), _steady(PEER, 3, 50)]
    entry = report.summarize(runs)["s"]
    # pairs 30/60 (0.5x), 80/40 (2x), 35/50 (0.7x): median 0.7x
    assert entry["paired_ratio_phalanx_over_peer"][report.P99] == 0.7
    assert entry["paired_ratio_phalanx_over_peer"][report.P99 + "_pairs"] == 3
    runs[4] = _steady(PHALANX, 3, 90)  # pairs 0.5x, 2x, 1.8x: median 1.8x; medians' ratio 80 / 50 = 1.6x
    entry = report.summarize(runs)["s"]
    assert entry["paired_ratio_phalanx_over_peer"][report.P99] == 1.8
    assert entry["ratio_phalanx_over_peer"][report.P99] == 1.6
    table = report.table(report.summarize(runs), {})
    p99_row = next(ln for ln in table.splitlines() if ln.startswith("steady: pod created -> bound, p99 ms"))
    assert p99_row.endswith("1.80x")
    pauses = next(ln for ln in table.splitlines() if ln.startswith("steady: machine pauses >= 10 ms"))
    assert pauses.split()[-3:] == ["2", "2", "-"]  # each scheduler's median over three runs; no ratio
