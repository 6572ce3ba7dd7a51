"""`phalanx bench`: the scheduler_perf-style benchmark through the three services and Redis."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


def add_bench_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="measure throughput and gang latency through the services on the embedded cluster",
        description="Starts redis-server and the queue, scheduler and binder on the wall clock for each "
        "workload (scheduler_perf's SchedulingBasic and gang shapes, a GPU training shape, at "
        "several cluster sizes), and reports pods/s, gangs/s, gang latency, peak memory, Redis "
        "commands and gRPC calls.",
    )
    p.add_argument("--quick", action="store_true", help="small shapes on 100 nodes (CI smoke, under a minute)")
    p.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        help="run only workloads whose name contains NAME (repeatable), e.g. basic-5000, gang3, gpu",
    )
    p.add_argument("--sizes", metavar="N,N,...", help="cluster sizes (default 500,1000,2000,5000; quick: 100)")
    p.add_argument("--rate", type=float, default=100.0, help="gangs of 3 fed per second in latency runs")
    p.add_argument("--gpu-rate", type=float, default=20.0, help="GPU gangs fed per second")
    p.add_argument("--output", "-o", metavar="FILE.json", help="write the results as JSON")
    p.add_argument("--table", metavar="FILE.txt", help="also write the printed table here")
    p.add_argument("--log-dir", metavar="DIR", help="keep the services' logs here (default: a temp directory)")
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run each workload N times and keep the run of median pods/s (a shared machine is noisy)",
    )
    p.add_argument(
        "--tls",
        action="store_true",
        help="mutual TLS between the services, as deployed (default: plaintext on loopback)",
    )
    p.add_argument("--list", action="store_true", help="list the workloads and exit")
    p.set_defaults(func=run_bench)


def run_bench(args: argparse.Namespace) -> int:
    from phalanx.bench.extra import extra_missing
    from phalanx.bench.workloads import suite

    sizes = tuple(int(x) for x in args.sizes.split(",")) if args.sizes else None
    workloads = suite(quick=args.quick, sizes=sizes, rate=args.rate, gpu_rate=args.gpu_rate)
    if args.only:
        names = {w.name for w in workloads}  # an exact name selects just that one (basic-500, not basic-5000)
        workloads = [w for w in workloads if any(w.name == o if o in names else o in w.name for o in args.only)]
        if not workloads:
            print(f"phalanx bench: no workload matches {', '.join(args.only)}", file=sys.stderr)
            return 2
    if args.list:
        for w in workloads:
            print(f"{w.name:24} {w.kind:10} nodes={len(w.nodes):,} pods={w.pod_count:,} gangs={len(w.gangs):,}")
        return 0
    if (missing := extra_missing()) is not None:
        print(f"phalanx bench: {missing}", file=sys.stderr)
        return 2
    from phalanx.bench.report import machine, notes, table
    from phalanx.bench.runner import BenchError, RunOptions, run_workload

    info = machine()
    print(
        f"phalanx bench: {len(workloads)} workload(s) on {info['cpu_count']} cores ({info['cpu_model']}), "
        f"Python {info['python']}, load average {info['load_average_at_start']}",
        file=sys.stderr,
    )
    opts = RunOptions(log_dir=Path(args.log_dir) if args.log_dir else None, tls=args.tls)
    results: list[dict[str, Any]] = []
    failed: list[str] = []
    started = time.monotonic()
    for w in workloads:
        t = time.monotonic()
        print(
            f"  {w.name} ({w.kind}, {len(w.nodes):,} nodes, {w.pod_count:,} pods)...",
            end="",
            file=sys.stderr,
            flush=True,
        )
        runs = []
        try:
            for _ in range(max(args.repeat, 1)):
                runs.append(run_workload(w, opts))
        except BenchError as exc:
            print(" FAILED", file=sys.stderr)
            print(str(exc), file=sys.stderr)
            failed.append(w.name)
            continue
        # The median run: by throughput, or by p99 latency for a latency run (whose pods/s is the feed rate).
        if w.kind == "latency":
            runs.sort(key=lambda x: x["latency_ms"]["p99"] if x["latency_ms"]["p99"] is not None else float("inf"))
        else:
            runs.sort(key=lambda x: x["pods_per_second"])
        r = runs[(len(runs) - 1) // 2]
        if len(runs) > 1:
            r["runs_pods_per_second"] = [x["pods_per_second"] for x in runs]
            r["runs_latency_p99_ms"] = [x["latency_ms"]["p99"] for x in runs]
        results.append(r)
        print(
            f" {r['pods_per_second']:,.0f} pods/s, p99 {r['latency_ms']['p99']} ms ({time.monotonic() - t:.0f}s)",
            file=sys.stderr,
        )
    text = table(results)
    extra = notes(results)
    print(text)
    for line in extra:
        print(line)
    doc = {
        "machine": info,
        "quick": bool(args.quick),
        "repeat": max(args.repeat, 1),
        "seconds": round(time.monotonic() - started, 1),
        "failed": failed,
        "results": results,
    }
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(doc, indent=2) + "\n")
    if args.table:
        Path(args.table).parent.mkdir(parents=True, exist_ok=True)
        header = (
            f"phalanx bench{' --quick' if args.quick else ''}: {info['cpu_count']} cores ({info['cpu_model']}), "
            f"Python {info['python']}, redis-server {info['redis_server']}, commit {info['git_commit'][:12]}"
            f"{' (dirty)' if info['git_dirty'] else ''}, {info['date']}\n\n"
        )
        Path(args.table).write_text(header + text + "\n" + "".join(line + "\n" for line in extra))
    if failed:
        print(f"phalanx bench: {len(failed)} workload(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
