"""`make bench-idle`: the CPU each scheduler spends with nothing to schedule, on a fresh kube-apiserver.

A scheduler is idle most of its life: between jobs, at night, on a cluster whose queue is empty. What it spends
then is paid whether it places anything or not, and bench-k8s's CPU per bound pod counts it in (a steady run
of 30 s carries 30 s of it). Each run: a fresh etcd + kube-apiserver, `--nodes` fake Nodes and one gang of 3
bound first (so every path has run once), then the scheduler's processes are sampled from /proc over
`--seconds` with nothing else created. Phalanx as deployed (Redis with a password, the three services as
processes with mutual TLS, leader election on), the peer as bench-k8s runs it (kube-scheduler with
Coscheduling, hack/build-peer-scheduler.sh).

Results accumulate by label in DIR/idle.json and DIR/idle.txt (ms of CPU per second, per process and in all).
Run as `python -m phalanx.bench.idle [--seconds 30] [--nodes 500] [--label NAME] [--out DIR]`; needs
`make tools` (and `make peer-scheduler` for the peer).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from phalanx.bench.k8s.workloads import PEER, PHALANX, Shape
from phalanx.bench.report import LabelledResults, machine

WARMUP_S = 5.0  # after the gang bound: start-up's last work (reconciliation's first passes) is not idling


def measure(which: str, nodes: int, seconds: float) -> dict[str, Any]:
    """One run: the scheduler's processes' CPU over `seconds` of nothing to do, after one gang bound."""
    from phalanx.bench.k8s.observe import Observed, Watches
    from phalanx.bench.k8s.runner import connect, install_podgroup_crd
    from phalanx.bench.k8s.schedulers import PeerUnderTest, PhalanxUnderTest, peer_binary_path
    from phalanx.bench.k8s.workloads import SCHEDULER_NAMES, create_objects
    from phalanx.bench.procs import cpu_seconds
    from phalanx.testing.apiserver import LocalApiServer

    shape = Shape("idle", nodes=nodes, gangs=1, gang_size=3, expected_bound=3, timeout=60)
    server = LocalApiServer().start()
    run_dir = Path(tempfile.mkdtemp(prefix=f"bench-idle-{which}-"))
    sut: Any = None
    watches: Watches | None = None
    try:
        api = connect(str(server.kubeconfig_path))
        install_podgroup_crd(api)
        create_objects(api, shape, SCHEDULER_NAMES[which], 8)
        seen = Observed()
        watches = Watches(api, seen)
        watches.start()
        kubeconfig = str(server.kubeconfig_path)
        if which == PHALANX:
            sut = PhalanxUnderTest(kubeconfig, run_dir)
        else:
            binary = peer_binary_path()
            if binary is None:
                raise SystemExit("bench-idle: no peer-scheduler binary (make peer-scheduler)")
            sut = PeerUnderTest(binary, kubeconfig, run_dir)
        sut.launch()
        deadline = time.monotonic() + shape.timeout
        while True:
            with seen.lock:
                if len(seen.bound) >= shape.expected_bound:
                    break
            if time.monotonic() > deadline:
                raise SystemExit(f"bench-idle: {which} did not bind its gang in {shape.timeout:g}s ({run_dir})")
            time.sleep(0.1)
        time.sleep(WARMUP_S)
        pids = sut.pids()
        before = {name: cpu_seconds(pid) or 0.0 for name, pid in pids.items()}
        started = time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - started
        after = {name: cpu_seconds(pid) or 0.0 for name, pid in pids.items()}
        alive = sut.alive()
        sut.stop()
        sut = None
        shutil.rmtree(run_dir, ignore_errors=True)  # the logs are kept only when something failed
    finally:
        if watches is not None:
            watches.stop()
        if sut is not None:
            sut.stop()
        server.stop()
    per_s = {name: round(1000 * (after[name] - before[name]) / elapsed, 2) for name in pids}
    return {
        "scheduler": which,
        "nodes": nodes,
        "seconds": round(elapsed, 1),
        "alive": alive,
        "cpu_ms_per_s": per_s,
        "total_cpu_ms_per_s": round(sum(per_s.values()), 2),
    }


def table(doc: dict[str, Any]) -> str:
    lines = [
        "phalanx bench-idle: CPU of the scheduler's processes with nothing to schedule, on a fresh kube-apiserver",
        "after one gang of 3 bound and 5 s more; ms of CPU per second of wall clock (1,000 = one core busy)",
        "",
    ]
    for label, entry in doc["sets"].items():
        info = entry["machine"]
        commit = info.get("git_commit", "?")[:12] + (" (dirty)" if info.get("git_dirty") else "")
        lines.append(
            f"{label}: commit {commit}, {info.get('date', '?')}, {info.get('cpu_count', '?')} cores "
            f"({info.get('cpu_model', '?')}), load {info.get('load_average_at_start', '?')} at the start"
        )
        for r in entry["runs"]:
            parts = ", ".join(f"{name} {ms:g}" for name, ms in r["cpu_ms_per_s"].items())
            lines.append(
                f"  {r['scheduler']:8} {r['nodes']} nodes, {r['seconds']:g} s: {r['total_cpu_ms_per_s']:g} ms/s ({parts})"
                + ("" if r["alive"] else "  NOT ALIVE AT THE END")
            )
        lines.append("")
    return "\n".join(lines).rstrip()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m phalanx.bench.idle", description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=30.0, help="seconds sampled while idle (default 30)")
    p.add_argument("--nodes", type=int, default=500, help="fake Nodes in the cluster (default 500)")
    p.add_argument("--schedulers", default=f"{PHALANX},{PEER}", help=f"comma-separated: {PHALANX}, {PEER}")
    p.add_argument("--label", default="now", help="this set's name in the results (default: now)")
    p.add_argument("--out", default="bench", help="directory of idle.json and idle.txt (default bench)")
    args = p.parse_args(argv)
    from phalanx.testing.apiserver import APISERVER_MISSING_REASON, apiserver_available

    if not apiserver_available():
        print(f"bench-idle: {APISERVER_MISSING_REASON}", file=sys.stderr)
        return 2
    which = [s.strip() for s in args.schedulers.split(",") if s.strip()]
    unknown = [s for s in which if s not in (PHALANX, PEER)]
    if unknown or not which:
        print(
            f"bench-idle: --schedulers: {', '.join(unknown) or 'none given'}; known: {PHALANX}, {PEER}", file=sys.stderr
        )
        return 2
    results = LabelledResults(Path(args.out), "idle")
    info = machine()
    runs = []
    for name in which:
        print(f"bench-idle '{args.label}': {name}, {args.nodes} nodes, {args.seconds:g} s idle", flush=True)
        runs.append(measure(name, args.nodes, args.seconds))
        print(f"  {runs[-1]['total_cpu_ms_per_s']:g} ms of CPU per second: {runs[-1]['cpu_ms_per_s']}", flush=True)
    info["finished"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    print(results.save(args.label, {"machine": info, "runs": runs}, table))
    return 0 if all(r["alive"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
