"""`phalanx trace ...`: turn workloads into multi-document YAML for `phalanx simulate -f FILE`.

  phalanx trace import openb --nodes NODES.csv --pods PODS.csv [--gang-size N | --gang-rule RULE]
                             [--max-gang-size N] [--arrival trace|rate:R|fgd:SEED[:FACTOR]]
                             [--skip-fractional] [--namespace NS] [-o workload.yaml]
  phalanx trace synthetic --nodes COUNTxSHAPE... --gangs SIZExGPUS[...][@W]... [--count N]
                          [--rate GANGS_PER_MINUTE] [--arrivals fixed|poisson] [--duration D|LO-HI|none]
                          [--seed S] [--namespace NS] [-o workload.yaml]

The main CLI calls `add_trace_commands(subparsers)` and then `args.func(args)`, which returns the exit
code: 0, or 2 after printing `phalanx trace: <message>` for bad input (never a traceback).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from phalanx.trace import openb, synthetic
from phalanx.trace.writer import TraceError, Workload, WorkloadStats, write_workload_file

EXIT_BAD_INPUT = 2


def add_trace_commands(subparsers: argparse._SubParsersAction) -> None:
    trace = subparsers.add_parser(
        "trace",
        help="generate simulator workloads from traces or a synthetic mix",
        description="Generate multi-document YAML (Nodes and Pods) for `phalanx simulate -f FILE`.",
    )
    commands = trace.add_subparsers(dest="trace_command", metavar="{import,synthetic}", required=True)
    importer = commands.add_parser(
        "import", help="import a published trace", description="Import a published cluster trace."
    )
    formats = importer.add_subparsers(dest="trace_format", metavar="{openb}", required=True)
    _add_openb(formats)
    _add_synthetic(commands)


def _add_openb(formats: argparse._SubParsersAction) -> None:
    parser = formats.add_parser(
        "openb",
        help="the Alibaba GPU trace (cluster-trace-gpu-v2023) used by the FGD paper",
        description=_doc(openb.__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--nodes", required=True, type=Path, metavar="NODES.csv", help="node list: sn,cpu_milli,memory_mib,gpu,model"
    )
    parser.add_argument(
        "--pods",
        required=True,
        type=Path,
        metavar="PODS.csv",
        help="pod list: name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...,creation_time,"
        "deletion_time,scheduled_time]",
    )
    gangs = parser.add_mutually_exclusive_group()
    gangs.add_argument(
        "--gang-size",
        type=int,
        metavar="N",
        help="same as --gang-rule size:N: every N consecutive GPU pods of one shape form a gang",
    )
    gangs.add_argument(
        "--gang-rule",
        default="none",
        metavar="RULE",
        help="none (default) | size:N | window:SECONDS (multi-GPU pods of one shape arriving "
        "within SECONDS of the gang's first pod)",
    )
    parser.add_argument(
        "--max-gang-size",
        type=int,
        default=openb.DEFAULT_MAX_GANG_SIZE,
        metavar="N",
        help="largest gang the window rule forms (default %(default)s)",
    )
    parser.add_argument(
        "--arrival",
        default="trace",
        metavar="MODE",
        help="trace (default: creation_time) | rate:R (R pods/s in trace order) | "
        "fgd:SEED[:FACTOR] (FGD paper: sample until FACTOR x cluster GPUs, default 1.3, "
        "1 s apart, never leaving)",
    )
    parser.add_argument(
        "--skip-fractional",
        action="store_true",
        help="leave out pods sharing a GPU (0 < gpu_milli < 1000) instead of refusing the trace",
    )
    parser.add_argument("--namespace", default="default", metavar="NS", help="namespace of the pods (default: default)")
    parser.add_argument("-o", "--output", default="-", metavar="FILE", help="output YAML file (default: stdout)")
    parser.set_defaults(func=run_import_openb)


def _add_synthetic(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "synthetic",
        help="generate a what-if cluster and gang stream",
        description=_doc(synthetic.__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--nodes",
        action="append",
        default=[],
        required=True,
        metavar="COUNTxSHAPE",
        help="e.g. 100x8gpu,64cpu,512Gi[,model=A100][,pods=110]; repeatable",
    )
    parser.add_argument(
        "--gangs",
        action="append",
        default=[],
        required=True,
        metavar="SIZExGPUS",
        help="gang kind SIZExGPUS_PER_POD[,<X>cpu][,<memory>][,model=A|B][@WEIGHT], "
        "e.g. 8x1@3; repeatable, drawn by weight",
    )
    parser.add_argument("--count", type=int, default=100, metavar="N", help="number of gangs (default 100)")
    parser.add_argument("--rate", default="1", metavar="GANGS_PER_MINUTE", help="gang arrival rate (default 1)")
    parser.add_argument(
        "--arrivals",
        choices=("fixed", "poisson"),
        default="fixed",
        help="fixed spacing (default) or Poisson arrivals drawn with --seed",
    )
    parser.add_argument(
        "--duration",
        default="30m",
        metavar="D",
        help="run time of each gang: 30m, 1h30m, 90s, a range 10m-2h sampled per gang, or none (default 30m)",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--namespace", default="default", metavar="NS", help="namespace of the pods (default: default)")
    parser.add_argument("-o", "--output", default="-", metavar="FILE", help="output YAML file (default: stdout)")
    parser.set_defaults(func=run_synthetic)


def _doc(doc: str | None) -> str:
    return (doc or "").strip()


# ---------------------------------------------------------------- commands


def run_import_openb(args: argparse.Namespace) -> int:
    def build() -> tuple[Workload, str]:
        rule = f"size:{args.gang_size}" if args.gang_size is not None else args.gang_rule
        options = openb.ImportOptions(
            arrival=openb.parse_arrival(args.arrival),
            gang_rule=openb.parse_gang_rule(rule, args.max_gang_size),
            skip_fractional=args.skip_fractional,
            namespace=args.namespace,
        )
        result = openb.import_openb(args.nodes, args.pods, options)
        return result.workload, f"{result.skipped_fractional} fractional-GPU pods skipped"

    return _run(build, args.output)


def run_synthetic(args: argparse.Namespace) -> int:
    def build() -> tuple[Workload, str]:
        options = synthetic.SyntheticOptions(
            nodes=tuple(synthetic.parse_node_group(text) for text in args.nodes),
            gangs=tuple(synthetic.parse_gang_kind(text) for text in args.gangs),
            count=args.count,
            rate_per_minute=synthetic.parse_rate(args.rate),
            poisson=args.arrivals == "poisson",
            duration=synthetic.parse_duration(args.duration),
            seed=args.seed,
            namespace=args.namespace,
        )
        return synthetic.generate(options), f"seed {args.seed}"

    return _run(build, args.output)


def _run(build: Callable[[], tuple[Workload, str]], output: str, stdout: TextIO | None = None) -> int:
    started = time.perf_counter()
    try:
        workload, extra = build()
        stats = write_workload_file(workload, output, stdout or sys.stdout)
    except TraceError as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"cannot write {output}: {exc.strerror or exc}")
    print(
        f"phalanx trace: {summary(stats, extra)} -> {'stdout' if output == '-' else output} "
        f"in {time.perf_counter() - started:.2f}s",
        file=sys.stderr,
    )
    return 0


def summary(stats: WorkloadStats, extra: str) -> str:
    return (
        f"{stats.nodes} nodes ({stats.node_gpus} GPUs), {stats.pods} pods ({stats.pod_gpus} GPUs requested), "
        f"{stats.gangs} gangs ({stats.gang_pods} pods), {extra}"
    )


def _fail(message: str) -> int:
    print(f"phalanx trace: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT
