"""bench-k8s's runs: one scheduler on one workload on a fresh API server, timed from its launch; and the suite.

A run starts a fresh etcd + kube-apiserver (LocalApiServer) with the PodGroup CRD, creates every object
(workloads.py), starts the watches (observe.py), samples kube-apiserver's request counters and CPU, then
launches the scheduler (schedulers.py) and waits for the expected bindings, then for their statuses; a
final LIST checks the placements. The harness sends no request between the two samples of the counters,
except in a steady-arrival run: there it creates the gangs once the warm-up gang is bound (arrival.py), and
those POSTs are taken out of the counts. With a profile directory, py-spy records Phalanx's Python
processes from the launch's end to the last status (profile.py).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.bench.k8s.arrival import Arrivals, figures
from phalanx.bench.k8s.kubeapi import BenchK8sError, connect, delta, get, metrics
from phalanx.bench.k8s.observe import Observed, Watches, correctness
from phalanx.bench.k8s.profile import Profiler
from phalanx.bench.k8s.report import dist, fmt, startup_split
from phalanx.bench.k8s.schedulers import PeerUnderTest, PhalanxUnderTest, SchedulerUnderTest
from phalanx.bench.k8s.stall_probe import Stall, StallProbe, stall_figures
from phalanx.bench.k8s.workloads import (
    PG_GROUP,
    PHALANX,
    PODS_PATH,
    SCHEDULER_NAMES,
    Shape,
    create_objects,
    install_podgroup_crd,
)

if TYPE_CHECKING:
    from phalanx.bench.procs import ProcSample
    from phalanx.kube.api import KubeApi
    from phalanx.testing.apiserver import LocalApiServer


@dataclass
class RunOptions:
    peer_binary: Path | None = None
    log_dir: Path | None = None
    settle: float = 2.0  # contention: seconds to keep watching after the expected bindings
    workers: int = 16  # threads creating objects
    profile_dir: Path | None = None  # py-spy each Phalanx Python process into this directory
    # Phalanx as launched, from (kubeconfig, run directory): bench-startup's logs more.
    phalanx: Callable[[str, Path], SchedulerUnderTest] = PhalanxUnderTest


@dataclass
class _Window:
    """Samples from just before the launch to just after the statuses settled."""

    launch: float = 0.0
    setup_s: float = 0.0
    samples: dict[str, ProcSample] = field(default_factory=dict)  # each scheduler process's latest while it lived
    startup_cpu: dict[str, float] | None = None  # each process's CPU when the first binding was seen
    busy_at_launch: float = 0.0  # the machine's busy CPU seconds so far
    busy_at_first: float | None = None
    api_before: ProcSample | None = None
    api_after: ProcSample | None = None
    etcd_before: ProcSample | None = None
    etcd_after: ProcSample | None = None
    peak_reset: bool = False
    requests: dict[str, int] = field(default_factory=dict)
    window_s: float = 0.0
    harness_cpu: float = 0.0
    busy: float = 0.0
    alive_at_end: bool = False
    watch_errors: list[str] = field(default_factory=list)
    arrival: dict[str, Any] | None = None
    stalls: list[Stall] = field(default_factory=list)  # the machine's pauses while the gangs arrived (stall_probe)
    profile_errors: list[str] = field(default_factory=list)


def _pid_of(server: LocalApiServer, attr: str) -> int | None:
    proc = getattr(server, attr, None)  # LocalApiServer keeps its children as _apiserver / _etcd
    return getattr(proc, "pid", None)


def _sample_scheduler(sut: SchedulerUnderTest, samples: dict[str, ProcSample]) -> None:
    from phalanx.bench.procs import proc_sample

    for name, pid in sut.pids().items():  # keep the latest sample of each process while it lives
        s = proc_sample(pid)
        if s.alive:
            samples[name] = s


def _wait_for_bindings(
    shape: Shape,
    which: str,
    sut: SchedulerUnderTest,
    seen: Observed,
    w: _Window,
    opts: RunOptions,
    progress: Callable[[str], None],
    expected: int | None = None,
) -> None:
    """Until the expected pods are bound (and, under contention, `settle` more seconds) or the timeout."""
    from phalanx.bench.procs import machine_busy_s

    expected = shape.expected_bound if expected is None else expected
    reached: float | None = None
    deadline = w.launch + shape.timeout
    last_report = w.launch
    while True:
        now = time.monotonic()
        with seen.lock:
            n_bound = len(seen.bound)
        _sample_scheduler(sut, w.samples)
        if n_bound and w.startup_cpu is None:
            w.startup_cpu = {k: s.cpu_s for k, s in w.samples.items()}
            w.busy_at_first = machine_busy_s() - w.busy_at_launch
        if n_bound >= expected and reached is None:
            reached = now
        if reached is not None and (not shape.contention or now - reached >= opts.settle):
            return
        if now > deadline:
            return
        if not sut.alive():
            raise BenchK8sError(f"{which} exited during the run ({sut.log_hint()})")
        if now - last_report > 15:
            progress(f"      ... {n_bound:,}/{expected:,} bound after {now - w.launch:.0f}s")
            last_report = now
        time.sleep(0.05)


def _wait_for_statuses(which: str, seen: Observed, gangs: dict[str, int], timeout: float) -> None:
    """Until every bound pod's Event and (Phalanx) every bound gang's PodGroup status was seen."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with seen.lock:
            bound = set(seen.bound)
            events_done = bound <= set(seen.event)
            gangs_bound = {g for g in gangs if sum(1 for i in range(gangs[g]) if f"{g}-{i}" in bound) >= gangs[g]}
            pg_done = which != PHALANX or gangs_bound <= set(seen.podgroup)
        if events_done and pg_done:
            return
        time.sleep(0.1)


def _arrive(
    arrivals: Arrivals,
    shape: Shape,
    which: str,
    sut: SchedulerUnderTest,
    seen: Observed,
    w: _Window,
    opts: RunOptions,
    progress: Callable[[str], None],
) -> None:
    """A steady run: once the warm-up gang is bound, the gangs arrive; returns when all are bound (or the
    timeout) and every gang was created."""
    _wait_for_bindings(shape, which, sut, seen, w, opts, progress, expected=shape.warmup_pods)
    with seen.lock:
        if len(seen.bound) < shape.warmup_pods:
            raise BenchK8sError(f"{which} did not bind the warm-up gang in {shape.timeout:g}s")
    probe = StallProbe().start()
    try:
        arrivals.start()
        _wait_for_bindings(shape, which, sut, seen, w, opts, progress)
        if not arrivals.join(timeout=max(5.0, shape.arrival_s)):
            progress("      arrivals still running at the timeout: stopped")
    finally:
        w.stalls = probe.stop()


def run_once(
    shape: Shape, which: str, opts: RunOptions, progress: Callable[[str], None] = lambda s: None, repeat: int = 1
) -> dict[str, Any]:
    from phalanx.bench.procs import ProcSample, machine_busy_s, proc_sample, reset_peak_rss
    from phalanx.testing.apiserver import LocalApiServer

    base_dir = Path(tempfile.mkdtemp(prefix=f"bench-k8s-{shape.name}-{which}-", dir=opts.log_dir))
    t_setup = time.monotonic()
    server = LocalApiServer().start()
    sut: SchedulerUnderTest | None = None
    watches: Watches | None = None
    seen = Observed()
    w = _Window()
    api: KubeApi | None = None
    profiler: Profiler | None = None
    try:
        api = connect(str(server.kubeconfig_path))
        install_podgroup_crd(api)
        gangs = create_objects(api, shape, SCHEDULER_NAMES[which], opts.workers)
        if len(get(api, PODS_PATH)["items"]) != shape.pods_before_launch:
            raise BenchK8sError("not every pod was created")
        watches = Watches(api, seen)
        watches.start()
        kubeconfig = str(server.kubeconfig_path)
        if which == PHALANX:
            sut = opts.phalanx(kubeconfig, base_dir / "phalanx")
        else:
            if opts.peer_binary is None:
                raise BenchK8sError("no peer-scheduler binary (hack/build-peer-scheduler.sh)")
            sut = PeerUnderTest(opts.peer_binary, kubeconfig, base_dir / "peer")
        time.sleep(0.5)  # the watches are established
        api_pid, etcd_pid = _pid_of(server, "_apiserver"), _pid_of(server, "_etcd")
        w.peak_reset = bool(api_pid and reset_peak_rss(api_pid))
        w.api_before = proc_sample(api_pid) if api_pid else ProcSample()
        w.etcd_before = proc_sample(etcd_pid) if etcd_pid else ProcSample()
        metrics_before = metrics(api)
        w.setup_s = time.monotonic() - t_setup

        # -- launch and watch ----------------------------------------------------------------------------
        w.launch = time.monotonic()
        harness_cpu0 = time.process_time()
        w.busy_at_launch = machine_busy_s()
        sut.launch()
        if opts.profile_dir is not None and which == PHALANX:
            profiler = Profiler(opts.profile_dir, f"{shape.name}-{which}-r{repeat}")
            profiler.attach(sut.pids())
        arrivals = Arrivals(api, shape, SCHEDULER_NAMES[which], gangs) if shape.steady else None
        if arrivals is not None:
            _arrive(arrivals, shape, which, sut, seen, w, opts, progress)
        else:
            _wait_for_bindings(shape, which, sut, seen, w, opts, progress)
        _wait_for_statuses(which, seen, gangs, shape.status_timeout)
        time.sleep(0.5)
        if profiler is not None:
            profiler.stop()
        _sample_scheduler(sut, w.samples)
        w.api_after = proc_sample(api_pid) if api_pid else ProcSample()
        w.etcd_after = proc_sample(etcd_pid) if etcd_pid else ProcSample()
        w.requests = delta(metrics(api), metrics_before)
        if arrivals is not None:  # the harness's own creations are not the scheduler's requests
            with seen.lock:
                w.arrival = figures(arrivals.log, dict(seen.bound), shape.arrival_gps)
            w.arrival["machine_stalls"] = stall_figures(
                w.stalls, w.arrival["slowest"], w.arrival["first_due_unix"], w.arrival["span_s"]
            )
            _discount(w.requests, "POST pods", w.arrival["pods_created"])
            _discount(w.requests, f"POST podgroups.{PG_GROUP}", w.arrival["gangs_created"])
        w.window_s = time.monotonic() - w.launch
        w.harness_cpu = time.process_time() - harness_cpu0
        w.busy = machine_busy_s() - w.busy_at_launch
        w.alive_at_end = sut.alive()
        sut.stop()
        watches.stop()
        w.watch_errors = watches.errors()
        # -- correctness from a final LIST -------------------------------------------------------------
        pods = get(api, PODS_PATH)["items"]
        nodes = get(api, "/api/v1/nodes")["items"]
        check = correctness(pods, nodes, gangs, shape.expected_bound)
        if profiler is not None:
            profiler.write_meta(check["pods_bound"])
            w.profile_errors = profiler.errors
    finally:
        if profiler is not None:
            profiler.stop()
        if watches is not None:
            watches.stop()
        if sut is not None:
            sut.stop()
        if api is not None:
            api.connection.close()
        server.stop()
    if opts.log_dir is None:
        shutil.rmtree(base_dir, ignore_errors=True)
    return _result(shape, which, seen, gangs, w, check)


def _discount(requests: dict[str, int], kind: str, n: int) -> None:
    left = requests.get(kind, 0) - n
    if left > 0:
        requests[kind] = left
    else:
        requests.pop(kind, None)


def _result(
    shape: Shape, which: str, seen: Observed, gangs: dict[str, int], w: _Window, check: dict[str, Any]
) -> dict[str, Any]:
    """One run's figures (bench/k8s.json's `runs`)."""
    with seen.lock:
        bind_times = sorted(t - w.launch for t in seen.bound.values())
        first = bind_times[0] if bind_times else None
        last = bind_times[-1] if bind_times else None
        event_lag = [seen.event[p] - t for p, t in seen.bound.items() if p in seen.event]
        cond_lag = [seen.condition[p] - t for p, t in seen.bound.items() if p in seen.condition]
        pg_lag = []
        for g, t_pg in seen.podgroup.items():
            members = sorted(seen.bound[f"{g}-{i}"] for i in range(gangs.get(g, 0)) if f"{g}-{i}" in seen.bound)
            if len(members) >= gangs.get(g, 1):
                pg_lag.append(t_pg - members[gangs[g] - 1])
        events_missing = len(set(seen.bound) - set(seen.event))
        sources = sorted(seen.event_sources)
        pg_writes = seen.podgroup_writes
    api_before, api_after, etcd_before, etcd_after = w.api_before, w.api_after, w.etcd_before, w.etcd_after
    assert api_before is not None and api_after is not None and etcd_before is not None and etcd_after is not None
    requests = w.requests
    n = max(shape.pods, 1)
    total_requests = sum(requests.values())
    sched_cpu = sum(s.cpu_s for s in w.samples.values())
    sched_peak = sum(s.peak_rss_mib for s in w.samples.values())
    api_cpu = api_after.cpu_s - api_before.cpu_s
    etcd_cpu = etcd_after.cpu_s - etcd_before.cpu_s
    bound_n = check["pods_bound"]
    return {
        "workload": shape.name,
        "scheduler": which,
        "pods": shape.pods,
        "setup_s": round(w.setup_s, 1),
        "launch_to_last_binding_s": round(last, 3) if last is not None else None,
        "first_binding_s": round(first, 3) if first is not None else None,
        "binding_span_s": round(last - first, 3) if first is not None and last is not None else None,
        "pods_per_second": round(bound_n / last, 1) if last else None,
        "pods_per_second_after_first": round((bound_n - 1) / (last - first), 1)
        if first is not None and last is not None and last > first
        else None,
        "bind_time_s": dist(bind_times),
        "status_lag_ms": {
            "scheduled_event": dist(event_lag, 1000, 1),
            "pod_condition": dist(cond_lag, 1000, 1),
            "podgroup_status": dist(pg_lag, 1000, 1),
        },
        "scheduled_events_missing": events_missing,
        "event_sources": sources,
        "podgroup_status_writes_seen": pg_writes,
        "api_requests": requests,
        "api_requests_total": total_requests,
        "api_requests_per_pod": round(total_requests / n, 3),
        "api_requests_per_pod_by_kind": {k: round(v / n, 3) for k, v in requests.items()},
        # The lead figure: the scheduler's CPU (all processes, start-up included) over the window per pod bound.
        "cpu_per_bound_pod_ms": round(sched_cpu * 1000 / bound_n, 3) if bound_n else None,
        "arrival": w.arrival,
        "processes": {
            k: {
                "cpu_s": round(s.cpu_s, 2),
                "peak_rss_mib": round(s.peak_rss_mib, 1),
                "cpu_per_bound_pod_ms": round(s.cpu_s * 1000 / bound_n, 3) if bound_n else None,
            }
            for k, s in sorted(w.samples.items())
        },
        # Launch to the first binding (sampled every 50 ms): each process's CPU, and the whole machine's.
        "startup_cpu_s": {k: round(v, 3) for k, v in sorted((w.startup_cpu or {}).items())},
        **startup_split(sched_cpu, w.startup_cpu, bound_n),
        "machine_busy_to_first_binding_s": round(w.busy_at_first, 2) if w.busy_at_first is not None else None,
        "scheduler_cpu_s": round(sched_cpu, 2),
        "scheduler_peak_rss_mib": round(sched_peak, 1),
        "apiserver_cpu_s": round(api_cpu, 2),
        "apiserver_peak_rss_mib": round(api_after.peak_rss_mib, 1),
        "apiserver_peak_rss_reset_at_launch": w.peak_reset,
        "etcd_cpu_s": round(etcd_cpu, 2),
        "harness_cpu_s": round(w.harness_cpu, 2),  # this process (watches, polling) over the window
        # CPU the machine spent on anything else over the window (other users' jobs): a noisy-run flag.
        "other_cpu_s": round(max(0.0, w.busy - sched_cpu - w.harness_cpu - api_cpu - etcd_cpu), 2),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "window_s": round(w.window_s, 2),
        "scheduler_alive_at_end": w.alive_at_end,
        "watch_errors": w.watch_errors,
        "profile_errors": w.profile_errors,
        "correctness": check,
    }


def run_suite(
    shapes: list[Shape], schedulers: list[str], repeats: int, opts: RunOptions, progress: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Every workload with every scheduler, `repeats` times; who goes first alternates."""
    runs: list[dict[str, Any]] = []
    total = len(shapes) * len(schedulers) * repeats
    k = 0
    for rep in range(repeats):
        for shape in shapes:
            order = schedulers if rep % 2 == 0 else list(reversed(schedulers))  # alternate who goes first
            for which in order:
                k += 1
                progress(f"[{k}/{total}] {shape.name} {which} (run {rep + 1}/{repeats}) ...")
                t = time.monotonic()
                try:
                    r = run_once(shape, which, opts, progress, rep + 1)
                except Exception as exc:  # one failed run is reported, the others still run
                    runs.append(
                        {
                            "workload": shape.name,
                            "scheduler": which,
                            "repeat": rep + 1,
                            "error": f"{type(exc).__name__}: {exc}"[:2000],
                        }
                    )
                    progress(f"      FAILED: {type(exc).__name__}: {str(exc)[:500]}")
                    continue
                r["repeat"] = rep + 1
                runs.append(r)
                c = r["correctness"]
                lag = r["status_lag_ms"]["scheduled_event"]["p95"]
                progress(
                    f"      {c['pods_bound']:,}/{c['pods_expected']:,} bound, last binding "
                    f"{fmt('{:.2f}', r['launch_to_last_binding_s'])}s after launch "
                    f"({fmt('{:,.0f}', r['pods_per_second'])} pods/s), first {fmt('{:.2f}', r['first_binding_s'])}s, "
                    f"Event lag p95 {fmt('{:,.0f}', lag)} ms, {r['api_requests_per_pod']:.2f} requests/pod, "
                    f"CPU {r['scheduler_cpu_s']:.1f}s, RSS {r['scheduler_peak_rss_mib']:,.0f} MiB, "
                    f"{'OK' if c['ok'] else 'NOT OK'} (setup {r['setup_s']:.0f}s, total {time.monotonic() - t:.0f}s)"
                )
    return runs
