"""`phalanx bench-k8s`: its command line; runs the suite (runner.py) and writes the table and the JSON.

`--render` prints the table of an earlier run's JSON again (after a change of format) and runs nothing;
`--profile-summary` prints what `--profile` recorded (profile.py) and runs nothing either.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

from phalanx.bench.k8s.report import derive_cpu_per_pod, header, summarize, table
from phalanx.bench.k8s.runner import RunOptions, run_suite
from phalanx.bench.k8s.schedulers import PhalanxUnderTest, peer_binary_path, peer_config, peer_versions
from phalanx.bench.k8s.workloads import PEER, PHALANX, Shape, workloads
from phalanx.testing.layouts import LAYOUTS, SEPARATE


def versions(peer_binary: Path | None) -> dict[str, Any]:
    from phalanx.testing.k8s_binaries import find_k8s_bin_dir, pinned_k8s_version

    out: dict[str, Any] = {"kube_apiserver": pinned_k8s_version() or ""}
    bin_dir = find_k8s_bin_dir()
    if bin_dir is not None:
        try:
            out["kube_apiserver"] = subprocess.run(
                [str(bin_dir / "kube-apiserver"), "--version"], capture_output=True, text=True, timeout=20
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    out["peer"] = {**peer_versions(), "binary": str(peer_binary) if peer_binary else None}
    if peer_binary is not None:
        try:
            out["peer"]["version"] = subprocess.run(
                [str(peer_binary), "--version"], capture_output=True, text=True, timeout=20
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        from importlib.metadata import version

        out["phalanx"] = version("phalanx")
    except Exception:
        out["phalanx"] = ""
    return out


def main(args: Any) -> int:
    from phalanx.bench.report import machine
    from phalanx.testing.apiserver import APISERVER_MISSING_REASON, apiserver_available

    if args.profile_summary:
        from phalanx.bench.k8s.profile import summary_main

        return summary_main(args.profile_summary, args.pods, args.top)
    if args.render:  # the table again from a JSON this command wrote (e.g. after a format change)
        doc = json.loads(Path(args.render).read_text())
        by_name = {
            w["name"]: Shape(**{k: w[k] for k in Shape.__dataclass_fields__ if k in w}) for w in doc["workloads"]
        }
        derive_cpu_per_pod(doc["runs"])
        doc["summary"] = summarize(doc["runs"])
        text = header(doc) + table(doc["summary"], by_name)
        print(text)
        if args.table:
            Path(args.table).write_text(text + "\n")
        if args.output:
            Path(args.output).write_text(json.dumps(doc, indent=2) + "\n")
        return 0
    from phalanx.bench.extra import extra_missing

    if (missing := extra_missing()) is not None:
        print(f"phalanx bench-k8s: {missing}", file=sys.stderr)
        return 2
    shapes = workloads(quick=args.quick, large=args.large)
    if args.only:
        shapes = [s for s in shapes if any(o in s.name for o in args.only)]
    if args.list:
        for s in shapes:
            print(f"{s.name:26} {s.describe()}")
        return 0
    if not shapes:
        print("phalanx bench-k8s: no workload selected", file=sys.stderr)
        return 2
    if not apiserver_available():
        print(f"phalanx bench-k8s: {APISERVER_MISSING_REASON}", file=sys.stderr)
        return 2
    repeats = 1 if args.quick and args.repeats is None else (args.repeats or 3)
    schedulers = [s.strip() for s in args.schedulers.split(",") if s.strip()]
    peer_binary = Path(args.peer_binary) if args.peer_binary else peer_binary_path()
    peer_skipped = ""
    if PEER in schedulers and (peer_binary is None or not os.access(peer_binary, os.X_OK)):
        peer_skipped = (
            "peer-scheduler binary not found (build it with hack/build-peer-scheduler.sh, "
            "or set PHALANX_PEER_SCHEDULER)"
        )
        print(f"phalanx bench-k8s: SKIPPING the peer half: {peer_skipped}", file=sys.stderr)
        schedulers = [s for s in schedulers if s != PEER]
    if not schedulers:
        print("phalanx bench-k8s: no scheduler to run", file=sys.stderr)
        return 2

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    info = machine()
    progress(
        f"phalanx bench-k8s: {len(shapes)} workload(s) x {', '.join(schedulers)} x {repeats} repeat(s) on "
        f"{info['cpu_count']} cores ({info['cpu_model']})"
    )
    opts = RunOptions(
        peer_binary=peer_binary,
        log_dir=Path(args.log_dir) if args.log_dir else None,
        profile_dir=Path(args.profile) if args.profile else None,
        phalanx=partial(PhalanxUnderTest, layout=args.phalanx_layout),
    )
    if opts.log_dir is not None:
        opts.log_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    runs = run_suite(shapes, schedulers, repeats, opts, progress)
    summary = summarize(runs)
    doc = {
        "machine": info,
        "versions": versions(peer_binary if PEER in schedulers else None),
        "quick": bool(args.quick),
        "repeats": repeats,
        "schedulers": schedulers,
        "phalanx_layout": args.phalanx_layout,
        "peer_ran": PEER in schedulers,
        "peer_skipped_reason": peer_skipped,
        "peer_config": peer_config("<kubeconfig>"),
        "workloads": [{**asdict(s), "pods": s.pods, "describe": s.describe()} for s in shapes],
        "seconds": round(time.monotonic() - started, 1),
        "summary": summary,
        "runs": runs,
    }
    text = header(doc) + table(summary, {s.name: s for s in shapes})
    print(text)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(doc, indent=2) + "\n")
    if args.table:
        Path(args.table).parent.mkdir(parents=True, exist_ok=True)
        Path(args.table).write_text(text + "\n")
    bad = [
        f"{r['workload']}/{r['scheduler']}#{r['repeat']}" for r in runs if "error" in r or not r["correctness"]["ok"]
    ]
    if bad:
        progress(f"phalanx bench-k8s: correctness failed in {', '.join(bad)}")
    return 1 if bad and args.strict else 0


def add_bench_k8s_command(sub: Any) -> None:
    p = sub.add_parser(
        "bench-k8s",
        help="Phalanx vs kube-scheduler + Coscheduling on a real kube-apiserver",
        description="For each workload and scheduler (alternating), on a fresh etcd + kube-apiserver: fake "
        "nodes, all PodGroups and pods created first, then the scheduler launched; measures time to "
        "the first and last binding, status lag, API requests per pod, CPU and memory, and checks "
        "that no gang is partial and no node over-committed. Needs `make tools`; the peer needs "
        "hack/build-peer-scheduler.sh (skipped, and said so, when it is missing).",
    )
    p.add_argument(
        "--repeats", type=int, default=None, metavar="N", help="runs per workload and scheduler (default 3; quick: 1)"
    )
    p.add_argument("--quick", action="store_true", help="small shapes, 1 repeat (CI smoke)")
    p.add_argument(
        "--large", action="store_true", help="also the 5,000-node variants (10,000 gangs of 3; 2,000 plain pods)"
    )
    p.add_argument(
        "--only", action="append", metavar="NAME", help="only workloads whose name contains NAME (repeatable)"
    )
    p.add_argument("--schedulers", default=f"{PHALANX},{PEER}", help="comma-separated: phalanx, peer (default both)")
    p.add_argument(
        "--phalanx-layout",
        choices=LAYOUTS,
        default=SEPARATE,
        help="Phalanx's processes: services (queue, binder and scheduler each its own, as the chart's default) "
        "or combined (the three in one phalanx-combined process); default services",
    )
    p.add_argument(
        "--peer-binary", metavar="PATH", help="the peer scheduler (default: hack/build-peer-scheduler.sh's cache)"
    )
    p.add_argument("--output", "-o", metavar="FILE.json", help="write runs, medians and ratios as JSON")
    p.add_argument("--table", metavar="FILE.txt", help="write the printed table here")
    p.add_argument("--log-dir", metavar="DIR", help="keep each run's scheduler logs and configs here")
    p.add_argument(
        "--profile",
        metavar="DIR",
        help="py-spy (--gil, 100 Hz) each Phalanx Python process of every run into DIR/<run>-<process>.txt",
    )
    p.add_argument(
        "--profile-summary",
        nargs="+",
        metavar="FILE",
        help="top functions (self and inclusive) of --profile files, in CPU us per bound pod; runs nothing",
    )
    p.add_argument("--pods", type=int, default=None, help="--profile-summary: pods bound (default: the run's meta)")
    p.add_argument("--top", type=int, default=15, help="--profile-summary: functions listed (default 15)")
    p.add_argument("--strict", action="store_true", help="exit 1 if any run fails a correctness check")
    p.add_argument("--list", action="store_true", help="list the workloads and exit")
    p.add_argument(
        "--render",
        metavar="FILE.json",
        help="print (and --table/--output) the summary of an earlier run's JSON again; runs nothing",
    )
    p.set_defaults(func=main)
