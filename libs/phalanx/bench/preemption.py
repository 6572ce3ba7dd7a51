"""`phalanx preemption-bench`: the openb GPU trace with priority classes, preemption off and on, through the
real services on the embedded cluster (phalanx.sim.run.simulate).

Workload: the first `--fraction` of openb_pod_list_default (Alibaba's production GPU trace, published with
the FGD paper, Weng et al., USENIX ATC '23: github.com/alibaba/clusterdata, cluster-trace-gpu-v2023) on its
1,213 GPU nodes, its own arrival and deletion times; pods of one shape arriving together form gangs
(`--gang-rule`). Priorities as a training platform would set them: gangs of multi-GPU pods (distributed
training) high, every other pod low. Printed and written: the high-priority gangs' wait (p50/p90/p99,
gangs bound), pods preempted, and low-priority pods bound, for both runs.
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from phalanx.bench.replay import default_traces, first_pods, openb_workload_file
from phalanx.bench.stats import percentile, write_results
from phalanx.model.keys import KOORD_NAME
from phalanx.sim.driver import SimOptions
from phalanx.sim.run import simulate
from phalanx.sim.workload import Workload, load_workload
from phalanx.trace import openb

HIGH, LOW = 1000, 10


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "preemption-bench",
        help="openb with priority classes: high-priority gang wait with preemption off and on",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--traces", default="", help="directory of the openb CSV files (default: the shared trace)")
    p.add_argument("--fraction", type=float, default=0.5, help="share of the trace's pods replayed (default 0.5)")
    p.add_argument("--gang-rule", default="window:60", help="openb gang rule (default window:60)")
    p.add_argument("--arrival", default="trace", help="openb arrival: trace, rate:R or fgd:SEED[:FACTOR]")
    p.add_argument("--wait", type=float, default=600.0, help="the gangs' waiting time in seconds (default 600)")
    p.add_argument(
        "--nodes-fraction",
        type=float,
        default=1.0,
        help="share of the trace's nodes kept, every k-th by name (default 1.0): fewer nodes, more contention",
    )
    p.add_argument("--out", default="bench", help="directory for preemption.json and preemption.txt")
    p.set_defaults(func=run)


def prioritized(workload: Workload) -> set[str]:
    """Multi-GPU training pods get the high priority, the rest the low one (spec.priority, as the
    Priority admission plugin would write it from a priorityClassName). Returns the high-priority gangs."""
    high: set[str] = set()
    for obj in workload.objects:
        if obj.kind != "Pod":
            continue
        spec = obj.obj.setdefault("spec", {})
        gpus = sum(
            float(str(c.get("resources", {}).get("requests", {}).get("nvidia.com/gpu", 0)))
            for c in spec.get("containers") or []
        )
        spec["priority"] = HIGH if gpus >= 2 else LOW
        meta = obj.obj.get("metadata") or {}
        gang = (meta.get("annotations") or {}).get(KOORD_NAME)
        if gang and gpus >= 2:
            high.add(f"{meta.get('namespace', 'default')}/{gang}")
    return high


def run(args: argparse.Namespace) -> int:
    traces = Path(args.traces) if args.traces else default_traces()
    nodes, pods = traces / "openb_node_list_gpu_node.csv", traces / "openb_pod_list_default.csv"
    options = openb.ImportOptions(
        arrival=openb.parse_arrival(args.arrival), gang_rule=openb.parse_gang_rule(args.gang_rule)
    )
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="phalanx-preemption-") as tmp:
        path = openb_workload_file(nodes, pods, options, Path(tmp), "openb")
        for label in ("off", "on"):
            workload = _some_nodes(first_pods(load_workload([str(path)]), args.fraction), args.nodes_fraction)
            high = prioritized(workload)
            report = simulate(workload, SimOptions(default_wait=args.wait), scheduler_env={"PHALANX_PREEMPTION": label})
            results[label] = measure(report, high)
            print(f"preemption {label}: done in {report['summary']['wallSeconds']:.0f}s wall", flush=True)
    doc = {
        "workload": {
            "trace": "openb_pod_list_default (Alibaba cluster-trace-gpu-v2023)",
            "fraction": args.fraction,
            "nodesFraction": args.nodes_fraction,
            "gangRule": args.gang_rule,
            "arrival": args.arrival,
            "waitSeconds": args.wait,
            "priorities": f"multi-GPU pods {HIGH}, others {LOW}",
        },
        "runs": results,
    }
    write_results(args.out, "preemption", doc, render(doc))
    return 0


def _some_nodes(workload: Workload, fraction: float) -> Workload:
    """Every k-th node (by its order in the trace), so each GPU model keeps its share of the nodes."""
    if fraction >= 1.0:
        return workload
    step = max(1, round(1 / fraction))
    nodes = [o for o in workload.objects if o.kind == "Node"]
    keep = {id(o) for o in nodes[::step]}
    return replace(workload, objects=[o for o in workload.objects if o.kind != "Node" or id(o) in keep])


def measure(report: dict[str, Any], high_gangs: set[str]) -> dict[str, Any]:
    per_gang = {w["gang"]: w["waitSeconds"] for w in report.get("gangWaits") or [] if w["gang"] in high_gangs}
    waits = sorted(per_gang.values())
    timed_out = sorted(f"{g['namespace']}/{g['name']}" for g in report["podGroups"] if g["timedOut"])
    low_bound = sum(
        1 for p in report["pods"] if p["boundAt"] is not None and f"{p['namespace']}/{p['gang']}" not in high_gangs
    )
    return {
        "highGangs": len(high_gangs),
        "highGangsStarted": len(waits),
        "highGangsTimedOut": sum(1 for g in timed_out if g in high_gangs),
        "highWaits": {g: per_gang.get(g) for g in sorted(high_gangs)},  # None: never started
        "highWaitP50": _pct(waits, 50),
        "highWaitP90": _pct(waits, 90),
        "highWaitP99": _pct(waits, 99),
        "highWaitMean": round(sum(waits) / len(waits), 1) if waits else None,
        "podsPreempted": report["summary"].get("podsPreempted", 0),
        "partialGangs": report["summary"]["partialGangs"],
        "lowPodsBound": low_bound,
        "wallSeconds": report["summary"]["wallSeconds"],
    }


def _pct(values: list[float], q: float) -> float | None:
    found = percentile(values, q)
    return None if found is None else round(found, 1)


def render(doc: dict[str, Any]) -> str:
    w = doc["workload"]
    lines = [
        f"preemption-bench: {w['trace']}, first {w['fraction']:.0%} of pods, gang rule {w['gangRule']}, "
        f"priorities: {w['priorities']}",
        "embedded cluster, virtual clock, through queue + scheduler + binder + Redis",
        "",
        f"{'preemption':<11} {'high gangs':>10} {'started':>8} {'timed out':>9} {'wait p50':>9} {'p90':>8} "
        f"{'p99':>8} {'mean':>8} {'preempted':>9} {'low bound':>9}",
    ]
    for label, r in doc["runs"].items():
        lines.append(
            f"{label:<11} {r['highGangs']:>10} {r['highGangsStarted']:>8} {r['highGangsTimedOut']:>9} "
            f"{_s(r['highWaitP50']):>9} "
            f"{_s(r['highWaitP90']):>8} {_s(r['highWaitP99']):>8} {_s(r['highWaitMean']):>8} "
            f"{r['podsPreempted']:>9} {r['lowPodsBound']:>9}"
        )
    return "\n".join(lines) + "\n"


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}s"
