"""`phalanx chaos`: kill trials per target (or a soak), the table, and the results as JSON and text."""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from phalanx.arguments import duration_arg
from phalanx.testing.layouts import LAYOUTS, SEPARATE

DEFAULT_OUTPUT = Path("bench/chaos.json")
DEFAULT_SOAK_OUTPUT = Path("bench/soak.json")


def add_chaos_command(sub: argparse._SubParsersAction) -> None:
    from phalanx.chaos.trials import SENTINEL_TARGETS, TARGETS

    p = sub.add_parser(
        "chaos",
        help="kill Phalanx's processes under load against a real kube-apiserver and check invariants",
        description="Runs trials against a local etcd + kube-apiserver: Redis and the three services as separate "
        "processes, about 100 gangs per trial, one process SIGKILLed (or exiting at a kill point) in "
        "the busy phase and restarted; checks that no gang stays partially bound, no node is "
        "over-committed, every gang binds, and Redis equals the API server at the end.",
    )
    p.add_argument(
        "--targets",
        nargs="+",
        metavar="TARGET[:N]",
        default=list(TARGETS),
        help=f"what to kill, optionally with its own trial count (default: all of {', '.join(TARGETS)}; also "
        f"{', '.join(SENTINEL_TARGETS)}: Redis as a primary, 2 replicas and 3 Sentinels, its primary killed or "
        "frozen)",
    )
    p.add_argument("--trials-per-target", type=int, default=25, metavar="N", help="trials per target (default 25)")
    p.add_argument("--seed", type=int, default=1, help="seed of the run: every trial's seed derives from it")
    p.add_argument(
        "--trial-seed",
        type=int,
        metavar="SEED",
        help="run every trial with exactly this seed (re-runs a trial from a report)",
    )
    p.add_argument("--gangs", type=int, default=100, help="gangs per trial (default 100, about 700 pods)")
    p.add_argument(
        "--time-limit", type=duration_arg, default=120.0, help="per trial, from the first pod (default 120s)"
    )
    p.add_argument(
        "--soak",
        type=duration_arg,
        metavar="DURATION",
        help="instead of kill trials: no kills, gangs arriving and ending for DURATION (e.g. 30m)",
    )
    p.add_argument(
        "--output",
        "-o",
        metavar="FILE.json",
        help="results as JSON, and the table next to it as .txt (default bench/chaos.json, "
        "or bench/soak.json with --soak)",
    )
    p.add_argument("--run-dir", metavar="DIR", help="keep the processes' logs here (default: a temp directory)")
    p.add_argument("--log-level", default="INFO", help="the services' log level (default INFO)")
    p.add_argument(
        "--layout",
        choices=LAYOUTS,
        default=SEPARATE,
        help="kill trials: the services as separate processes (default), or combined: the three in one "
        "phalanx-combined process, which any target among them kills whole",
    )
    p.set_defaults(func=run_chaos)


def parse_targets(specs: list[str], default_count: int) -> list[tuple[str, int]]:
    from phalanx.chaos.trials import ALL_TARGETS

    out = []
    for spec in specs:
        name, _, count = spec.partition(":")
        if name not in ALL_TARGETS:
            raise ValueError(f"unknown target {name!r} (one of {', '.join(ALL_TARGETS)})")
        if count and (not count.isdigit() or int(count) < 1):
            raise ValueError(f"{spec!r}: the count after ':' must be a positive number")
        out.append((name, int(count) if count else default_count))
    return out


def trial_order(targets: list[tuple[str, int]]) -> list[str]:
    """Round robin over the targets, so an interrupted run has covered each of them."""
    left = dict(targets)
    out: list[str] = []
    while any(left.values()):
        for name, _ in targets:
            if left[name]:
                out.append(name)
                left[name] -= 1
    return out


def _interrupt_on_sigterm() -> None:
    """SIGTERM (and SIGINT even where a background shell ignores it) unwinds like Ctrl-C, so the stack,
    the trial's objects and the API server are cleaned up."""

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)


def run_chaos(args: argparse.Namespace) -> int:
    from phalanx.testing.apiserver import APISERVER_MISSING_REASON, apiserver_available

    _interrupt_on_sigterm()

    if not apiserver_available():
        print(f"phalanx chaos: {APISERVER_MISSING_REASON} (make tools)", file=sys.stderr)
        return 2
    run_root = Path(args.run_dir) if args.run_dir else Path(tempfile.mkdtemp(prefix="phalanx-chaos-"))
    run_root.mkdir(parents=True, exist_ok=True)
    if args.soak is not None:
        return _run_soak(args, run_root)
    try:
        targets = parse_targets(args.targets, args.trials_per_target)
    except ValueError as exc:
        print(f"phalanx chaos: {exc}", file=sys.stderr)
        return 2
    return _run_trials(args, targets, run_root)


def _header(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    from phalanx.bench.report import machine

    return {"machine": machine(), "seed": args.seed, **extra}


def _paths(args: argparse.Namespace, default: Path) -> tuple[Path, Path]:
    json_path = Path(args.output) if args.output else default
    return json_path, json_path.with_suffix(".txt")


def _run_trials(args: argparse.Namespace, targets: list[tuple[str, int]], run_root: Path) -> int:
    from phalanx.chaos import invariants as inv
    from phalanx.chaos.cluster import start_apiserver
    from phalanx.chaos.report import progress_line, write
    from phalanx.chaos.trials import SENTINEL_TARGETS, TrialOptions, TrialResult, run_trial
    from phalanx.chaos.workload import WorkloadShape

    order = trial_order(targets)
    seeds = random.Random(args.seed)
    options = TrialOptions(
        shape=replace(WorkloadShape(), gangs=args.gangs),
        time_limit=args.time_limit,
        log_level=args.log_level,
        layout=args.layout,
    )
    json_path, text_path = _paths(args, DEFAULT_OUTPUT)
    header = _header(args, targets=dict(targets), options=asdict(options))
    if any(t in SENTINEL_TARGETS for t, _ in targets):
        from phalanx.chaos.bind_wait import measure

        cost = measure()  # the binder's WAIT on the same machine, before the trials load it
        print(f"phalanx chaos: {cost.text()}", file=sys.stderr, flush=True)
        header["bind_wait_cost"] = cost.as_dict()
        header["notes"] = [
            cost.text(),
            "kill to binding: from the SIGKILL or SIGSTOP of the Redis primary to the first binding seen after it "
            "(reads every 0.5 s); Sentinel down-after-milliseconds 1000, failover-timeout 3000; the services' "
            "--redis-socket-timeout 2; the old primary comes back (restarted as a replica, or thawed) once a "
            "replica is promoted.",
        ]
    print(
        f"phalanx chaos: {len(order)} trials ({', '.join(f'{t} x{n}' for t, n in targets)}); logs in {run_root}",
        file=sys.stderr,
        flush=True,
    )
    results: list[TrialResult] = []
    server = start_apiserver()
    began = time.monotonic()
    try:
        for i, target in enumerate(order):
            seed = args.trial_seed if args.trial_seed is not None else seeds.randrange(1, 2**31)
            try:
                result = run_trial(server, i, target, seed, options, run_root)
            except Exception as exc:  # a trial that cannot even start is reported, and the run goes on
                result = TrialResult(
                    f"t{i:03d}",
                    target,
                    seed,
                    [inv.Violation("trial-error", target, f"the trial could not run: {exc}")],
                    args.gangs,
                    0,
                    0,
                    0.0,
                    False,
                    run_dir=str(run_root / f"t{i:03d}-{target}"),
                )
            results.append(result)
            print(progress_line(i + 1, len(order), result), flush=True)
            write(results, header, json_path, text_path)  # kept as it goes: an interrupted run keeps its trials
    except KeyboardInterrupt:
        print("phalanx chaos: interrupted; the trials so far are kept", file=sys.stderr)
    finally:
        server.stop()
    if not results:
        return 1
    text = write(results, header, json_path, text_path)
    print()
    print(text, end="")
    print(
        f"({len(results)} trials in {(time.monotonic() - began) / 60:.1f} min; {json_path}, {text_path}; "
        f"logs in {run_root})"
    )
    return 1 if any(r.violations for r in results) else 0


def _run_soak(args: argparse.Namespace, run_root: Path) -> int:
    from phalanx.chaos.cluster import start_apiserver
    from phalanx.chaos.soak import SoakOptions, run_soak, soak_text

    options = SoakOptions(
        duration=args.soak, log_level=args.log_level, seed=args.seed, sample_seconds=min(30.0, max(5.0, args.soak / 20))
    )
    json_path, text_path = _paths(args, DEFAULT_SOAK_OUTPUT)
    print(f"phalanx chaos --soak: {args.soak:g}s of arrivals; logs in {run_root}", file=sys.stderr, flush=True)

    def progress(s: dict[str, Any]) -> None:
        rss = " ".join(f"{k} {v:.0f}" for k, v in sorted(s["rss_mib"].items()))
        print(
            f"  {s['t']:>6.0f}s gangs created {s['gangs_created']} bound {s['gangs_bound']} active "
            f"{s['gangs_active']}; Redis keys {s['redis_keys']}; RSS MiB {rss}",
            flush=True,
        )

    server = start_apiserver()
    try:
        result = run_soak(server, options, run_root / "soak", progress)
    finally:
        server.stop()
    text = soak_text(result)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(
        json.dumps({**_header(args, options=asdict(options)), **asdict(result)}, indent=2, default=str) + "\n"
    )
    from phalanx.bench.report import machine

    m = machine()
    text_path.write_text(
        f"phalanx chaos --soak {args.soak:g}s on {m['cpu_count']} cores ({m['cpu_model']}), "
        f"commit {m['git_commit'][:12]}{' (dirty)' if m['git_dirty'] else ''}, {m['date']}\n\n{text}"
    )
    print(text, end="")
    print(f"({json_path}, {text_path}; logs in {run_root})")
    return 1 if result.violations or result.pending_fit_gangs else 0
