"""The `phalanx` command: simulate workloads on the embedded cluster, import traces, explain waiting gangs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from phalanx.arguments import duration_arg
from phalanx.report.summary import summary_lines
from phalanx.sim.driver import SimOptions
from phalanx.sim.run import Endpoints, simulate
from phalanx.sim.workload import load_workload
from phalanx.testing.layouts import LAYOUTS, SEPARATE
from phalanx.version import package_version


def _add_simulate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate",
        help="replay Kubernetes manifests on the embedded cluster",
        description="Replays Nodes, Pods, PodGroups and ConfigMaps through the queue, scheduler and "
        "binder on a virtual clock, and reports what was bound when.",
    )
    p.add_argument(
        "-f",
        "--file",
        dest="files",
        action="append",
        required=True,
        metavar="FILE",
        help="multi-document YAML of Kubernetes objects (repeatable)",
    )
    p.add_argument(
        "--until",
        type=duration_arg,
        default=None,
        metavar="DURATION",
        help="stop at this virtual time (e.g. 120s, 2h); default: when nothing more can happen",
    )
    p.add_argument(
        "--mode",
        choices=["gang", "pod"],
        default="gang",
        help="gang: all-or-nothing gangs; pod: ignore gangs, as kube-scheduler alone would",
    )
    p.add_argument("--output", "-o", metavar="REPORT.json", help="write the JSON report here")
    p.add_argument("--html", metavar="REPORT.html", help="write a self-contained HTML page with tables and plots")
    p.add_argument("--png", metavar="REPORT.png", help="write the allocation-over-time plot as a PNG")
    p.add_argument(
        "--default-wait", type=duration_arg, default=600.0, help="wait of gangs that declare none (default 600s)"
    )
    p.add_argument(
        "--gang-retry-backoff",
        type=duration_arg,
        default=None,
        metavar="DURATION",
        help="how long a gang whose wait ran out waits before it is tried again, for the forms that retry "
        "(all but Koordinator's; default: the scheduler's, 10s)",
    )
    p.add_argument("--profile", help="scheduling profile YAML (filters, score weights)")
    p.add_argument("--redis-url", help="use this Redis and these running services instead of starting them")
    p.add_argument("--redis-prefix", default="phalanx")
    p.add_argument("--queue", help="address of a running queue service (with --redis-url)")
    p.add_argument("--scheduler", help="address of a running scheduler service (with --redis-url)")
    p.add_argument(
        "--layout",
        choices=LAYOUTS,
        default=SEPARATE,
        help="the embedded stack's processes: the queue, binder and scheduler each its own (default), or "
        "combined: the three in one phalanx-combined process",
    )
    p.add_argument(
        "--progress",
        choices=["auto", "always", "never"],
        default="auto",
        help="progress line on stderr (auto: only on a terminal)",
    )
    p.set_defaults(func=_run_simulate)


def _run_simulate(args: argparse.Namespace) -> int:
    external = [args.redis_url, args.queue, args.scheduler]
    if any(external) and not all(external):
        print("phalanx simulate: --redis-url, --queue and --scheduler go together", file=sys.stderr)
        return 2
    from phalanx.report.outputs import OutputError, check_can_render, check_writable, write_report_files

    try:
        check_writable(args.output, args.html, args.png)  # before the run, not after 30 s of it
        check_can_render(html=bool(args.html), png=bool(args.png))
    except OutputError as exc:
        print(f"phalanx simulate: {exc}", file=sys.stderr)
        return 2
    workload = load_workload(args.files)
    if not workload.objects:
        for e in workload.errors:
            print(f"phalanx simulate: {e}", file=sys.stderr)
        print("phalanx simulate: nothing to simulate", file=sys.stderr)
        return 1
    progress = args.progress == "always" or (args.progress == "auto" and sys.stderr.isatty())
    options = SimOptions(
        mode=args.mode,
        until=args.until,
        default_wait=args.default_wait,
        gang_retry_backoff=args.gang_retry_backoff,
        progress=progress,
    )
    endpoints = Endpoints(args.redis_url, args.queue, args.scheduler, args.redis_prefix) if args.redis_url else None
    report = simulate(workload, options, endpoints, profile=args.profile, layout=args.layout)
    # Where the nodes and pods came from: `phalanx explain --report` reads them again for capacity.
    report["workload"] = [str(Path(f).resolve()) for f in args.files]
    for line in summary_lines(report):
        print(line, file=sys.stderr)
    title = f"phalanx simulate: {', '.join(Path(f).name for f in args.files)} ({args.mode} mode)"
    try:
        write_report_files(report, title, args.output, args.html, args.png)
    except OutputError as exc:
        print(f"phalanx simulate: {exc}", file=sys.stderr)
        return 2
    return 0


def _add_compare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="put two simulation reports side by side")
    p.add_argument("reports", nargs=2, metavar="REPORT.json")
    p.add_argument("--labels", nargs=2, metavar=("A", "B"), help="column titles (default: the file names)")
    p.add_argument("--html", metavar="COMPARE.html", help="also write both runs side by side as an HTML page")
    p.set_defaults(func=_run_compare)


def _run_compare(args: argparse.Namespace) -> int:
    from phalanx.report.compare import compare_table

    loaded = []
    for path in args.reports:
        try:
            data = json.loads(Path(path).read_text())
            data["summary"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"phalanx compare: {path}: not a simulation report ({exc})", file=sys.stderr)
            return 2
        loaded.append(data)
    labels = args.labels or [Path(p).stem for p in args.reports]
    print(compare_table(loaded[0], loaded[1], labels[0], labels[1]))
    if args.html:
        from phalanx.report.outputs import OutputError, check_can_render, write_html

        try:
            check_can_render(html=True)
            from phalanx.report.html_report import render_compare_html

            write_html(render_compare_html(loaded[0], loaded[1], labels[0], labels[1]), args.html)
        except OutputError as exc:
            print(f"phalanx compare: {exc}", file=sys.stderr)
            return 2
    return 0


def _add_replay_bench(sub: argparse._SubParsersAction) -> None:
    # A description is printed as written (argparse %-formats only help= strings), so "%" stays single here.
    p = sub.add_parser(
        "replay-bench",
        help="replay the openb GPU trace: speed, and the FGD paper's experiment",
        description="Replays the Alibaba openb trace through the services (whole and its first "
        "25%/50%, for speed) and runs the FGD experiment (GPU allocation at 90-130% "
        "arrived demand) for several seeds; prints a table and writes JSON.",
    )
    p.add_argument(
        "--traces",
        help="folder holding openb_node_list_gpu_node.csv and openb_pod_list_default.csv "
        "(default: ../shared/traces/alibaba-gpu-v2023 next to the repository)",
    )
    p.add_argument(
        "--seeds", type=int, default=10, help="FGD experiment seeds per trace variant (default 10, as the paper)"
    )
    p.add_argument("--quick", action="store_true", help="a quarter of the trace, one short FGD run (smoke test)")
    p.add_argument("--output", "-o", default="bench/replay.json", help="JSON results (default bench/replay.json)")
    p.add_argument("--plot", help="PNG of GPU allocation against arrived demand per policy (needs the report extra)")
    p.set_defaults(func=_run_replay_bench)


def _run_replay_bench(args: argparse.Namespace) -> int:
    from phalanx.bench.extra import extra_missing

    if (missing := extra_missing()) is not None:
        print(f"phalanx replay-bench: {missing}", file=sys.stderr)
        return 2
    from phalanx.bench import replay

    traces = Path(args.traces) if args.traces else replay.default_traces()
    try:
        results = replay.run(traces, args.seeds, args.quick, Path(args.output) if args.output else None)
    except FileNotFoundError as exc:
        print(f"phalanx replay-bench: {exc}", file=sys.stderr)
        return 2
    print(replay.table(results))
    if args.plot:
        replay.plot(results, Path(args.plot))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="phalanx", description="Phalanx: all-or-nothing gang scheduling")
    parser.add_argument("--version", action="version", version=f"phalanx {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_simulate(sub)
    _add_compare(sub)
    _add_replay_bench(sub)
    from phalanx.trace.cli import add_trace_commands

    add_trace_commands(sub)
    from phalanx.bench.cli import add_bench_command

    add_bench_command(sub)
    from phalanx.chaos.cli import add_chaos_command

    add_chaos_command(sub)
    from phalanx.security.cli import add_certs_command

    add_certs_command(sub)
    from phalanx.bench.k8s.cli import add_bench_k8s_command

    add_bench_k8s_command(sub)
    from phalanx.explain.cli import add_explain_command

    add_explain_command(sub)
    from phalanx.bench.starvation import add_parser as add_starvation_bench

    add_starvation_bench(sub)
    from phalanx.bench.preemption import add_parser as add_preemption_bench

    add_preemption_bench(sub)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    sys.exit(args.func(args))


if __name__ == "__main__":
    main()
