"""`phalanx replay-bench`: how fast the embedded cluster replays the real GPU trace, and what it yields.

Two measurements, both through the three services and Redis, written to JSON with the machine:
- speed: the openb default trace (its own arrivals and durations) replayed whole and in its first 25%
  and 50% of pods, so cost against pods is visible (it should grow no worse than linearly);
- the FGD paper's experiment: pods sampled until 130% of the cluster's GPUs, arriving one by one and never
  leaving; GPU allocation ratio at 90/100/110/130% arrived demand, per seed and the mean.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from phalanx.sim.driver import SimOptions
from phalanx.sim.run import simulate
from phalanx.sim.workload import Workload, load_workload
from phalanx.trace import openb
from phalanx.trace.writer import write_workload

FGD_TABLE = {  # the FGD paper's Table (mean of 10 seeds, openb_pod_list_default), for comparison
    "Random": {"0.9": 85.02, "1": 86.30, "1.1": 86.88, "1.3": 87.47},
    "BestFit": {"0.9": 89.99, "1": 92.86, "1.1": 92.94, "1.3": 93.08},
    "FGD": {"0.9": 89.98, "1": 95.23, "1.1": 95.30, "1.3": 95.39},
}


def default_traces() -> Path:
    return Path(__file__).resolve().parents[3].parent / "shared" / "traces" / "alibaba-gpu-v2023"


def _workload(nodes: Path, pods: Path, options: openb.ImportOptions, tmp: Path, name: str) -> Path:
    result = openb.import_openb(nodes, pods, options)
    path = tmp / f"{name}.yaml"
    with path.open("w") as f:
        write_workload(result.workload, f)
    return path


def _first_pods(workload: Workload, fraction: float) -> Workload:
    """The nodes and the first `fraction` of the pods by arrival."""
    pods = [o for o in workload.objects if o.kind == "Pod"]
    keep = {id(o) for o in pods[: max(1, int(len(pods) * fraction))]}
    objects = [o for o in workload.objects if o.kind != "Pod" or id(o) in keep]
    return replace(workload, objects=objects)


def run(traces: Path, seeds: int, quick: bool, out: Path | None) -> dict[str, Any]:
    nodes, pods = traces / "openb_node_list_gpu_node.csv", traces / "openb_pod_list_default.csv"
    if not nodes.exists() or not pods.exists():
        raise FileNotFoundError(f"the openb trace is not at {traces} (expected {nodes.name} and {pods.name})")
    results: dict[str, Any] = {"machine": _machine(), "speed": [], "fgd": []}
    with tempfile.TemporaryDirectory(prefix="phalanx-replay-") as tmpdir:
        tmp = Path(tmpdir)
        full = load_workload([_workload(nodes, pods, openb.ImportOptions(), tmp, "openb")])
        for fraction in (0.25,) if quick else (0.25, 0.5, 1.0):
            wl = _first_pods(full, fraction)
            n = sum(1 for o in wl.objects if o.kind == "Pod")
            started = time.monotonic()
            report = simulate(wl, SimOptions())
            wall = time.monotonic() - started
            s = report["summary"]
            row = {
                "fraction": fraction,
                "pods": n,
                "podsBound": s["podsBound"],
                "steps": s["steps"],
                "wallSeconds": round(wall, 2),
                "loopSeconds": s["wallSeconds"],
                "podsPerSecond": round(n / wall, 1),
            }
            results["speed"].append(row)
            print(
                f"openb default, first {fraction:.0%}: {n} pods in {wall:.1f}s wall "
                f"({row['podsPerSecond']} pods/s, {s['steps']} steps)",
                file=sys.stderr,
            )
        for seed in range(1, (1 if quick else seeds) + 1):
            arrival = openb.parse_arrival(f"fgd:{seed}:{0.5 if quick else 1.3}")
            wl = load_workload([_workload(nodes, pods, openb.ImportOptions(arrival=arrival), tmp, f"fgd{seed}")])
            started = time.monotonic()
            report = simulate(wl, SimOptions())
            ratio = {k: (None if v is None else round(100 * v, 2)) for k, v in report["gpuAllocationAtDemand"].items()}
            results["fgd"].append(
                {
                    "seed": seed,
                    "pods": report["summary"]["podsTotal"],
                    "wallSeconds": round(time.monotonic() - started, 2),
                    "gpuAllocationPercent": ratio,
                }
            )
            print(f"FGD experiment seed {seed}: GPU allocation % at arrived demand {ratio}", file=sys.stderr)
    results["fgdMean"] = _mean([r["gpuAllocationPercent"] for r in results["fgd"]])
    results["fgdPaper"] = FGD_TABLE
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2) + "\n")
    return results


def _mean(rows: list[dict[str, float | None]]) -> dict[str, float | None]:
    keys = rows[0].keys() if rows else []
    out: dict[str, float | None] = {}
    for k in keys:
        values = [v for r in rows if (v := r[k]) is not None]
        out[k] = round(sum(values) / len(values), 2) if values else None
    return out


def table(results: dict[str, Any]) -> str:
    from tabulate import tabulate  # the `bench` extra (the command checks for it before the replay)

    speed = [[r["pods"], r["steps"], r["wallSeconds"], r["podsPerSecond"]] for r in results["speed"]]
    levels = ("0.9", "1", "1.1", "1.3")
    rows = [(f"Phalanx default (mean of {len(results['fgd'])})", results["fgdMean"])]
    rows += [(f"paper: {name}", vals) for name, vals in results["fgdPaper"].items()]
    fgd = [[name] + [vals.get(k) for k in levels] for name, vals in rows]
    return "\n".join(
        [
            "trace replay (openb default, 1213 GPU nodes, through queue + scheduler + binder + Redis)",
            tabulate(speed, ["pods", "steps", "wall s", "pods/s"], tablefmt="plain", missingval="-"),
            "",
            "GPU allocation % at arrived GPU demand (FGD experiment)",
            tabulate(fgd, ["policy", "90%", "100%", "110%", "130%"], tablefmt="plain", missingval="-"),
        ]
    )


def _machine() -> dict[str, Any]:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        commit = ""
    return {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "commit": commit,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
