"""`phalanx starvation-bench`: large gangs behind a stream of small ones, with the starvation bound off
and on, through the real services on the embedded cluster (phalanx.sim.run.simulate).

The mix is synthetic (phalanx.trace.synthetic): gangs of 8x1, 16x8 and 4x2 GPUs arriving as a Poisson
stream on 60 nodes of 8 GPUs, durations known. Printed and written: large-gang (16x8) wait p50/p99,
timeouts per gang shape, and GPU allocation averaged over the arrival window.
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile
from typing import Any

from phalanx.bench.stats import write_results
from phalanx.sim.driver import SimOptions
from phalanx.sim.run import simulate
from phalanx.sim.workload import load_workload
from phalanx.trace.synthetic import GangKind, NodeGroup, SyntheticOptions, generate, parse_duration
from phalanx.trace.writer import PodShape, write_workload_file

LARGE = "16x8"
KINDS = (
    GangKind(8, 1, 1000, "8Gi"),
    GangKind(16, 8, 8000, "64Gi"),
    GangKind(4, 2, 2000, "16Gi"),
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "starvation-bench",
        help="large gangs behind small ones: the starvation bound off and on",
        description="Runs the same synthetic contention mix twice through the embedded cluster, without "
        "and with reservations for starving gangs, and compares large-gang waits, timeouts and GPU allocation.",
    )
    p.add_argument("--count", type=int, default=400, help="gangs in the mix (default 400)")
    p.add_argument("--nodes", type=int, default=60, help="nodes of 8 GPUs (default 60)")
    p.add_argument("--rate", type=float, default=1.4, help="gang arrivals per minute, Poisson (default 1.4)")
    p.add_argument("--duration", default="2m-8m", help="pod run time, uniform LOW-HIGH (default 2m-8m)")
    p.add_argument("--wait", type=float, default=600.0, help="gang waiting time before it times out (default 600)")
    p.add_argument("--bound", type=float, default=360.0, help="starvation bound for the 'on' run (default 360)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="bench", help="directory for starvation.json and starvation.txt")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    options = SyntheticOptions(
        nodes=(NodeGroup(args.nodes, 8, 64000, "512Gi"),),
        gangs=KINDS,
        count=args.count,
        rate_per_minute=args.rate,
        poisson=True,
        duration=parse_duration(args.duration),
        seed=args.seed,
    )
    trace = generate(options)
    shapes = _gang_shapes(trace.pods)
    window = max(p.arrival for p in trace.pods)
    with tempfile.TemporaryDirectory(prefix="phalanx-starvation-") as tmp:
        path = os.path.join(tmp, "mix.yaml")
        write_workload_file(trace, path, io.StringIO())
        results = {}
        for label, bound in (("off", 0.0), ("on", args.bound)):
            workload = load_workload([path])
            report = simulate(
                workload,
                SimOptions(default_wait=args.wait),
                scheduler_env={"PHALANX_STARVATION_BOUND": str(bound)},
            )
            results[label] = _measure(report, shapes, window, args.nodes * 8, args.wait)
            results[label]["bound"] = bound
    doc = {
        "mix": {
            "gangs": args.count,
            "kinds": [k.label() for k in KINDS],
            "nodes": f"{args.nodes}x8 GPUs",
            "ratePerMinute": args.rate,
            "duration": options.duration.describe(),
            "waitSeconds": args.wait,
            "seed": args.seed,
        },
        "runs": results,
    }
    write_results(args.out, "starvation", doc, render(doc))
    return 0


def _gang_shapes(pods: list[PodShape]) -> dict[str, str]:
    """gang key -> "SIZExGPUS"."""
    sizes: dict[str, tuple[int, int]] = {}
    for p in pods:
        if p.gang is not None:
            key = f"{p.namespace}/{p.gang.name}"
            sizes[key] = (p.gang.total_number, p.gpus)
    return {k: f"{n}x{g}" for k, (n, g) in sizes.items()}


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def _measure(report: dict[str, Any], shapes: dict[str, str], window: float, gpus: int, wait: float) -> dict[str, Any]:
    """`wait`: the gangs' waiting time; a gang that timed out counts as having waited that long (at least)."""
    timeouts = {label: 0 for label in sorted(set(shapes.values()))}
    totals = dict(timeouts)
    for g in report["podGroups"]:
        label = shapes.get(f"{g['namespace']}/{g['name']}", "?")
        totals[label] = totals.get(label, 0) + 1
        if g["timedOut"]:
            timeouts[label] = timeouts.get(label, 0) + 1
    large = [w["waitSeconds"] for w in report.get("gangWaits") or [] if shapes.get(w["gang"]) == LARGE]
    censored = large + [wait] * timeouts.get(LARGE, 0)
    gpu_of = {}
    for p in report["pods"]:
        gang = p["gang"]
        label = shapes.get(gang or "", "")
        gpu_of[p["name"]] = int(label.split("x")[1]) if label else 0
    busy = 0.0
    end = report["summary"]["virtualSeconds"]
    for p in report["pods"]:
        start = p["startedAt"] if p["startedAt"] is not None else p["boundAt"]
        if start is None:
            continue
        stop = p["finishedAt"] if p["finishedAt"] is not None else end
        busy += gpu_of[p["name"]] * max(0.0, min(stop, window) - min(start, window))
    return {
        "largeWaitP50": _percentile(large, 50),
        "largeWaitP99": _percentile(large, 99),
        "largeBound": len(large),
        "largeWaitP50All": _percentile(censored, 50),
        "largeWaitP99All": _percentile(censored, 99),
        "timeouts": timeouts,
        "gangs": totals,
        "gangsTimedOut": report["summary"]["gangsTimedOut"],
        "gpuAllocation": busy / (gpus * window) if window > 0 else 0.0,
        "virtualSeconds": end,
        "wallSeconds": report["summary"]["wallSeconds"],
    }


def render(doc: dict[str, Any]) -> str:
    mix = doc["mix"]
    runs = doc["runs"]
    lines = [
        f"starvation bench: {mix['gangs']} gangs ({', '.join(mix['kinds'])} GPUs), {mix['nodes']}, "
        f"Poisson {mix['ratePerMinute']}/min, durations {mix['duration']}, wait {mix['waitSeconds']:g}s, "
        f"seed {mix['seed']}",
        "",
        f"{'':34}{'off':>14}{'on':>14}",
    ]

    def row(name: str, f: Any) -> None:
        lines.append(f"{name:34}{f(runs['off']):>14}{f(runs['on']):>14}")

    row("starvation bound (s)", lambda r: f"{r['bound']:g}" if r["bound"] else "off")
    row(f"{LARGE} wait p50 (s, bound gangs)", lambda r: _fmt(r["largeWaitP50"]))
    row(f"{LARGE} wait p99 (s, bound gangs)", lambda r: _fmt(r["largeWaitP99"]))
    row(f"{LARGE} wait p50 (s, timeouts as wait)", lambda r: _fmt(r["largeWaitP50All"]))
    row(f"{LARGE} wait p99 (s, timeouts as wait)", lambda r: _fmt(r["largeWaitP99All"]))
    for label in runs["off"]["timeouts"]:
        row(f"timeouts {label}", lambda r, lb=label: f"{r['timeouts'].get(lb, 0)}/{r['gangs'].get(lb, 0)}")
    row("timeouts, all gangs", lambda r: str(r["gangsTimedOut"]))
    row("GPU allocation (arrival window)", lambda r: f"{100 * r['gpuAllocation']:.1f}%")
    row("virtual seconds", lambda r: f"{r['virtualSeconds']:.0f}")
    row("wall seconds", lambda r: f"{r['wallSeconds']:.1f}")
    return "\n".join(lines) + "\n"


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"
