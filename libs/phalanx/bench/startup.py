"""`make bench-startup`: launch to first binding of Phalanx as deployed, on a fresh kube-apiserver.

Each run is one of bench-k8s's (phalanx.bench.k8s.runner.run_once): a fresh etcd + kube-apiserver,
fake Nodes, every PodGroup and pod created before the launch, then Phalanx launched as deployed (ChaosStack:
redis-server with a password, then the queue, binder and scheduler as separate processes with mutual TLS,
the scheduler under leader election as by default) and the time from the launch (the first process started)
to the first binding seen by a watch of the pods. The services log at INFO here, so each run also says when
each step of the start happened (from their log lines, against the launch's wall clock): each service
serving, the Lease won, Redis recovered, the cluster feed's first list applied, the loop started.

The machine is shared: each run records the load average at its launch and the CPU the rest of the machine
spent during it (`other_cpu_s`, bench-k8s's measure), and the figure is the median of the runs.

Results accumulate by label in DIR/startup.json (a run with a label already there replaces it, or adds
to it with --append), and DIR/startup.txt shows every label side by side: `--label before` was run on the
commit before the start-up work (its tree first on PYTHONPATH), alternating run by run with the tree as it
is (--append), so that both saw the same load.

Run as `python -m phalanx.bench.startup [--runs 5] [--label NAME] [--out DIR]`; needs `make tools`.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from phalanx.bench.k8s.runner import RunOptions, run_once
from phalanx.bench.k8s.schedulers import PhalanxUnderTest
from phalanx.bench.k8s.workloads import PHALANX, SCHEDULER_NAMES, Shape
from phalanx.bench.report import LabelledResults, machine
from phalanx.testing.layouts import LAYOUTS, SEPARATE

SHAPE = Shape("startup-50n-100x3", nodes=50, gangs=100, gang_size=3, expected_bound=300, timeout=90)
# --shape burst: bench-k8s's gang burst (issue 25's own measure of the first binding), kept in DIR/startup-burst.*
BURST = Shape("gang-500n-1000x3", nodes=500, gangs=1000, gang_size=3, expected_bound=3000, timeout=120)
SHAPES = {"startup": SHAPE, "burst": BURST}
PROCESSES = ("redis", "queue", "binder", "scheduler", "combined")  # Phalanx's, in either layout
# What each service logs at INFO when it reaches a step of the start (the first line matching counts).
PHASES = [
    ("queue serving", "queue", r"queue serving on"),
    ("binder serving", "binder", r"binder serving on"),
    ("scheduler serving", "scheduler", r"scheduler serving on"),
    ("Lease won", "scheduler", r"leader election: .* leads \(Lease"),
    ("recovered from Redis", "scheduler", r"recovered \d+ nodes"),
    ("feed's first lists in", "scheduler", r"cluster feed: watching"),
    ("feed's first list applied", "scheduler", r"cluster feed: rebuilt from the API server"),
    ("loop started", "scheduler", r"leader election: .* is scheduling"),
]
_LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")


class _Phalanx(PhalanxUnderTest):
    """bench-k8s's Phalanx, logging at INFO (the steps of its start), with the launch's wall clock."""

    def __init__(self, kubeconfig: str, run_dir: Path, layout: str = SEPARATE) -> None:
        from phalanx.testing.stack import ChaosStack, StackConfig

        self.run_dir = run_dir
        self.stack = ChaosStack.create(
            StackConfig(kubeconfig, SCHEDULER_NAMES[PHALANX], "bench-startup", run_dir, log_level="INFO", layout=layout)
        )
        self.launched_at = 0.0
        self.load_at_launch: list[float] = []

    def launch(self) -> None:
        self.load_at_launch = [round(x, 2) for x in os.getloadavg()]
        self.launched_at = time.time()
        super().launch()


def phases(log_of: Callable[[str], Path], launched_at: float) -> dict[str, float | None]:
    """Seconds from the launch to each step in PHASES, from the services' logs (`log_of` a service: its
    process's log; None: not logged)."""
    out: dict[str, float | None] = {}
    for name, service, pattern in PHASES:
        out[name] = None
        try:
            lines = log_of(service).read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            m = _LOG_LINE.match(line)
            if m and re.search(pattern, line):
                # The services log local time (logging's default); so does this conversion.
                t = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1000
                out[name] = round(t - launched_at, 3)
                break
    return out


def run(runs: int, progress: Any = print, shape: Shape = SHAPE, layout: str = SEPARATE) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    made: list[_Phalanx] = []

    def make(kubeconfig: str, run_dir: Path) -> _Phalanx:
        sut = _Phalanx(kubeconfig, run_dir, layout)
        made.append(sut)
        return sut

    for i in range(runs):
        with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
            r = run_once(shape, PHALANX, RunOptions(log_dir=Path(tmp), phalanx=make))
            sut = made[-1]
            steps = phases(sut.stack.log_path, sut.launched_at)
        row = {
            "first_binding_s": r["first_binding_s"],
            "launch_to_last_binding_s": r["launch_to_last_binding_s"],
            "phases_s": steps,
            "load_average_at_launch": sut.load_at_launch,
            "other_cpu_s": r["other_cpu_s"],
            "window_s": r["window_s"],
            "scheduler_cpu_s": r["scheduler_cpu_s"],
            "processes": r["processes"],
            "startup_cpu_s": r["startup_cpu_s"],
            "phalanx_cpu_to_first_binding_s": round(sum(r["startup_cpu_s"].values()), 3),
            "machine_busy_to_first_binding_s": r["machine_busy_to_first_binding_s"],
            "correct": r["correctness"]["ok"],
        }
        out.append(row)
        progress(
            f"  run {i + 1}/{runs}: first binding {row['first_binding_s']}s, last {row['launch_to_last_binding_s']}s "
            f"(load {sut.load_at_launch[0] if sut.load_at_launch else '?'} at launch, others "
            f"{row['other_cpu_s']} CPU s in the run){'' if row['correct'] else ' NOT CORRECT'}"
        )
    return out


def _median(values: list[Any]) -> float | None:
    xs = [v for v in values if v is not None]
    return round(statistics.median(xs), 3) if xs else None


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "runs": len(rows),
        "first_binding_s": _median([r["first_binding_s"] for r in rows]),
        "first_binding_s_min_max": [
            min((r["first_binding_s"] for r in rows if r["first_binding_s"] is not None), default=None),
            max((r["first_binding_s"] for r in rows if r["first_binding_s"] is not None), default=None),
        ],
        "launch_to_last_binding_s": _median([r["launch_to_last_binding_s"] for r in rows]),
        "phases_s": {name: _median([r["phases_s"].get(name) for r in rows]) for name, _, _ in PHASES},
        "phalanx_cpu_to_first_binding_s": _median([r["phalanx_cpu_to_first_binding_s"] for r in rows]),
        "startup_cpu_s": {name: _median([r["startup_cpu_s"].get(name) for r in rows]) for name in PROCESSES},
        "others_cpu_to_first_binding_s": _median(
            [
                None
                if r["machine_busy_to_first_binding_s"] is None
                else round(r["machine_busy_to_first_binding_s"] - r["phalanx_cpu_to_first_binding_s"], 2)
                for r in rows
            ]
        ),
        "load_average_at_launch": _median(
            [r["load_average_at_launch"][0] for r in rows if r["load_average_at_launch"]]
        ),
        "other_cpu_s": _median([r["other_cpu_s"] for r in rows]),
        "all_correct": all(r["correct"] for r in rows),
    }


def _fmt(v: Any, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def table(doc: dict[str, Any], shape: Shape = SHAPE) -> str:
    labels = list(doc["sets"])
    sets = [doc["sets"][k] for k in labels]
    lines = [
        "phalanx bench-startup: launch -> first binding of Phalanx as deployed on a fresh kube-apiserver",
        f"workload: {shape.describe()}, all created before the launch",
        "launch: redis-server (password) started, then the queue, binder and scheduler (three processes, or one "
        "phalanx-combined process where a label says combined; mutual TLS, leader election on), from the first "
        "process started; first binding: seen by a watch of the pods",
        "medians of the runs; phases from the services' INFO log lines (seconds from the launch); CPU sampled every",
        "50 ms until the first binding (the rest of the machine: kube-apiserver, etcd, this harness, other users)",
        "",
    ]
    for label, s in zip(labels, sets):
        m = s["machine"]
        lines.append(
            f"{label}: commit {str(m.get('git_commit'))[:12]}{' (dirty)' if m.get('git_dirty') else ''}, "
            f"{m.get('date')}, {m.get('cpu_count')} cores ({m.get('cpu_model')}), Python {m.get('python')}"
            + (f", layout {m['layout']}" if m.get("layout") else "")
            + (f"; {s['note']}" if s.get("note") else "")
        )
    lines.append("")
    width = max([12, *(len(k) for k in labels)])
    head = f"{'':34}" + "".join(f"{k:>{width + 2}}" for k in labels)
    lines.append(head)
    rows: list[tuple[str, list[str]]] = [
        ("runs", [str(s["summary"]["runs"]) for s in sets]),
        ("launch -> first binding, s", [_fmt(s["summary"]["first_binding_s"]) for s in sets]),
        (
            "  (min - max)",
            [
                f"{_fmt(s['summary']['first_binding_s_min_max'][0])}-{_fmt(s['summary']['first_binding_s_min_max'][1])}"
                for s in sets
            ],
        ),
        ("launch -> last binding, s", [_fmt(s["summary"]["launch_to_last_binding_s"]) for s in sets]),
    ]
    for name, _, _ in PHASES:
        rows.append((f"  {name}", [_fmt(s["summary"]["phases_s"].get(name)) for s in sets]))
    rows.append(
        ("CPU s, launch -> first binding", [_fmt(s["summary"].get("phalanx_cpu_to_first_binding_s")) for s in sets])
    )
    for name in PROCESSES:
        rows.append((f"  {name}", [_fmt((s["summary"].get("startup_cpu_s") or {}).get(name)) for s in sets]))
    rows.append(
        (
            "  the rest of the machine",
            [_fmt(s["summary"].get("others_cpu_to_first_binding_s")) for s in sets],
        )
    )
    rows += [
        ("load average at launch (1 min)", [_fmt(s["summary"]["load_average_at_launch"]) for s in sets]),
        ("other processes' CPU s in a run", [_fmt(s["summary"]["other_cpu_s"]) for s in sets]),
        ("every run correct", ["yes" if s["summary"]["all_correct"] else "NO" for s in sets]),
    ]
    for name, cells in rows:
        lines.append(f"{name:34}" + "".join(f"{c:>{width + 2}}" for c in cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m phalanx.bench.startup", description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5, help="runs (median reported; default 5)")
    p.add_argument("--label", default="now", help="this set's name in the results (default: now)")
    p.add_argument("--out", default="bench", help="directory of startup.json and startup.txt (default bench)")
    p.add_argument(
        "--append",
        action="store_true",
        help="add the runs to the label's earlier ones instead of replacing them (to alternate two trees)",
    )
    p.add_argument(
        "--shape",
        choices=sorted(SHAPES),
        default="startup",
        help="startup: 50 nodes, 100 gangs of 3 (DIR/startup.*; the default); burst: bench-k8s's gang burst, "
        "500 nodes, 1,000 gangs of 3 (DIR/startup-burst.*)",
    )
    p.add_argument(
        "--layout",
        choices=LAYOUTS,
        default=SEPARATE,
        help="Phalanx's processes: services (the default) or combined (one phalanx-combined process)",
    )
    args = p.parse_args(argv)
    from phalanx.bench.extra import extra_missing
    from phalanx.testing.apiserver import APISERVER_MISSING_REASON, apiserver_available

    if (missing := extra_missing()) is not None:
        print(f"bench-startup: {missing}", file=sys.stderr)
        return 2
    if not apiserver_available():
        print(f"bench-startup: {APISERVER_MISSING_REASON}", file=sys.stderr)
        return 2
    shape = SHAPES[args.shape]
    results = LabelledResults(Path(args.out), "startup" if shape is SHAPE else "startup-burst")
    info = machine()
    info["layout"] = args.layout
    print(f"bench-startup '{args.label}': {args.runs} runs of {shape.name} (load {info['load_average_at_start']})")
    rows = run(args.runs, progress=lambda line: print(line, flush=True), shape=shape, layout=args.layout)
    info["finished"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    info["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    earlier = results.get(args.label) if args.append else None
    if earlier:
        rows = earlier["runs"] + rows
        info = {**earlier["machine"], "finished": info["finished"], "load_average_at_end": info["load_average_at_end"]}
    entry = {"machine": info, "summary": summarize(rows), "runs": rows}
    print(results.save(args.label, entry, lambda doc: table(doc, shape)))
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
