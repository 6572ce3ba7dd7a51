"""`make bench-burst`: NVIDIA knavigator's all-or-nothing gang burst (examples/knavigator-gang-burst.yaml)
replayed through the queue, scheduler and binder on the embedded cluster: its makespan against the ideal,
and the gangs that started out of the queue's order.

Run as `python -m phalanx.bench.burst [--out DIR]` (from a source checkout: the workload is in examples/);
writes DIR/burst.json and DIR/burst.txt.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from phalanx.bench.report import machine
from phalanx.bench.stats import write_results
from phalanx.model.duration import parse_duration
from phalanx.model.keys import SIM_DURATION
from phalanx.sim.driver import SimOptions
from phalanx.sim.run import simulate
from phalanx.sim.workload import Workload, WorkloadObject, load_workload

REPO = Path(__file__).resolve().parents[3]
WORKLOAD = "examples/knavigator-gang-burst.yaml"
GPU = "nvidia.com/gpu"


def _pod_gpus(pod: dict[str, Any]) -> int:
    total = 0
    for c in pod.get("spec", {}).get("containers") or []:
        resources = c.get("resources") or {}
        asked = (resources.get("requests") or {}).get(GPU, (resources.get("limits") or {}).get(GPU, 0))
        total += int(asked)
    return total


def ideal_makespan(workload: Workload) -> float:
    """GPU-seconds asked over the cluster's GPUs: no schedule ends sooner. The burst's arrival order reaches
    it exactly (every wave fills every node), so it is the burst's ideal, not only a bound."""
    asked = sum(
        _pod_gpus(o.obj) * parse_duration(o.obj["metadata"]["annotations"][SIM_DURATION])
        for o in workload.objects
        if o.kind == "Pod"
    )
    gpus = sum(int(o.obj["status"]["allocatable"].get(GPU, 0)) for o in workload.objects if o.kind == "Node")
    return asked / gpus


def _queue_order(workload: Workload) -> list[str]:
    """The gangs (namespace/name) in the order the queue promises at equal priority: creation time, then name."""
    groups: list[WorkloadObject] = [o for o in workload.objects if o.kind == "PodGroup"]
    return [
        f"{o.namespace}/{o.name}"
        for o in sorted(groups, key=lambda o: (o.at, o.namespace, o.name))  # o.at: its creation time
    ]


def out_of_turn(report: dict[str, Any], workload: Workload) -> list[str]:
    """Gangs that started before a gang ahead of them in the queue's order (each such jump is a wave that
    could have held the earlier gang)."""
    started: dict[str, float] = {}
    for p in report["pods"]:
        if p.get("gang") and p["boundAt"] is not None:
            started[p["gang"]] = min(started.get(p["gang"], p["boundAt"]), p["boundAt"])
    jumped = []
    latest = float("-inf")  # the latest start among the gangs ahead
    for gang in _queue_order(workload):
        at = started.get(gang, float("inf"))
        if at < latest:
            jumped.append(gang)
        latest = max(latest, at)
    return jumped


def run() -> dict[str, Any]:
    workload = load_workload([REPO / WORKLOAD])
    if workload.errors:
        raise SystemExit(f"{WORKLOAD}: " + "; ".join(workload.errors))
    began = time.perf_counter()
    report = simulate(workload, SimOptions(mode="gang"))
    wall = time.perf_counter() - began
    ideal = ideal_makespan(workload)
    makespan = float(report["summary"]["virtualSeconds"])
    summary = report["summary"]
    return {
        "workload": WORKLOAD,
        "nodes": sum(1 for o in workload.objects if o.kind == "Node"),
        "gangs": summary["gangsTotal"],
        "pods": summary["podsTotal"],
        "gangsBound": summary["gangsBound"],
        "partialGangs": summary["partialGangs"],
        "makespanSeconds": makespan,
        "idealSeconds": ideal,
        "ratio": makespan / ideal,
        "outOfTurn": out_of_turn(report, workload),
        "wallSecondsReplay": summary["wallSeconds"],
        "wallSecondsWithStart": round(wall, 2),
        "machine": machine(),
    }


def render(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    jumped = doc["outOfTurn"]
    # Other jobs share the VM: the load says how far the wall times are inflated.
    load = f", load average {m['load_average_at_start'][0]:g} at start" if m["load_average_at_start"] else ""
    rows = [
        ("workload", f"{doc['workload']} (NVIDIA knavigator's gang-scheduling benchmark)"),
        ("cluster", f"{doc['nodes']} nodes x 8 GPUs"),
        ("burst", f"{doc['gangs']} gangs, {doc['pods']} pods of 8 GPUs, 30 s each, all-or-nothing"),
        ("gangs bound whole", f"{doc['gangsBound']}/{doc['gangs']} ({doc['partialGangs']} partial)"),
        ("makespan (virtual)", f"{doc['makespanSeconds']:.0f} s"),
        ("ideal makespan", f"{doc['idealSeconds']:.0f} s (GPU-seconds asked / GPUs: 9 full waves)"),
        ("makespan / ideal", f"{doc['ratio']:.2f}x"),
        ("gangs started out of turn", f"{len(jumped)}" + (f" ({', '.join(jumped[:5])}...)" if jumped else "")),
        ("wall time", f"{doc['wallSecondsReplay']:.2f} s replay, {doc['wallSecondsWithStart']:.2f} s with services"),
        ("machine", f"{m['cpu_count']} cores ({m['cpu_model']}), a shared VM{load}; Python {m['python']}"),
        ("commit", f"{m['git_commit'][:7]}{' (uncommitted changes)' if m['git_dirty'] else ''}, {m['date']}"),
    ]
    width = max(len(k) for k, _ in rows) + 2
    return "burst bench: embedded cluster, virtual clock, through queue + scheduler + binder + Redis\n\n" + "".join(
        f"{k:{width}}{v}\n" for k, v in rows
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m phalanx.bench.burst", description=__doc__)
    p.add_argument("--out", default="bench", help="directory for burst.json and burst.txt (default: bench)")
    args = p.parse_args(argv)
    doc = run()
    write_results(args.out, "burst", doc, render(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
