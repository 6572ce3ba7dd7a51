"""phalanx-combined: the queue, the binder and the scheduler in one process.

Usage: phalanx-combined queue [queue flags] -- binder [binder flags] -- scheduler [scheduler flags]

Each section is parsed by that service's own flags (`phalanx-queue --help`, ...), so a section reads as the
service's command line would, and the environment's PHALANX_* defaults apply to all three (give per-service
settings such as --listen and --tls-dir as flags). The three serve their own ports with mutual TLS, as three
processes do (health, metrics, and any caller from outside); the scheduler calls its own queue and binder
directly (their handlers on its threads: no TLS, HTTP/2 or serialization between them; phalanx/rpc/local.py),
and the binder's view of pods and nodes follows the scheduler's watch of the API server instead of watching
the same objects itself (when both sections name the same API server; ClusterView.follow).
What one process saves: two interpreters (their imports, heaps, and the CPU each spends keeping itself alive),
those calls' transport, and a second list, stream and decoding of every pod and node. Measured in
bench/issue25-ab.txt sections 29 to 31 and bench/k8s-combined.txt.

What it does not change: the scheduler alone schedules and writes the queue's pods (from its watch of the
API server), the binder binds under the Redis mutex, and the state of record stays in Redis and the API
server. A crash of the process is a crash of all three at once; what each recovers on the restart is what it
recovers alone (the scheduler's rebuild refills the empty queue from the API server, the binder rolls
forward any batch it had started). Under leader election each replica runs its own queue and binder and its
scheduler calls only those (they serve before it starts; --queue and --binder only name them): a standby's
queue stays empty until it leads.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from types import ModuleType

from phalanx.config import setup_logging
from phalanx.gc_tuning import freeze_heap
from phalanx.lifecycle import exit_with_parent
from phalanx.rpc.server import ServiceServer, serve_until_signal
from phalanx.telemetry.tracing import setup_tracing

SECTIONS = ("queue", "binder", "scheduler")
SEPARATOR = "--"
USAGE = "phalanx-combined queue [queue flags] -- binder [binder flags] -- scheduler [scheduler flags]"


class UsageError(ValueError):
    pass


def split_sections(argv: Sequence[str]) -> dict[str, list[str]]:
    """The three services' command lines, each section starting with its service's name and the sections
    separated by `--`; each service once, in any order."""
    sections: dict[str, list[str]] = {}
    chunks: list[list[str]] = [[]]
    for word in argv:
        if word == SEPARATOR:
            chunks.append([])
        else:
            chunks[-1].append(word)
    for chunk in chunks:
        if not chunk:
            raise UsageError(f"an empty section (two `{SEPARATOR}` in a row, or one at an end); usage: {USAGE}")
        name, *flags = chunk
        if name not in SECTIONS:
            raise UsageError(
                f"a section starts with {name!r}; each starts with the service it configures "
                f"({', '.join(SECTIONS)}); usage: {USAGE}"
            )
        if name in sections:
            raise UsageError(f"the {name} section is given twice")
        sections[name] = flags
    missing = [name for name in SECTIONS if name not in sections]
    if missing:
        raise UsageError(f"no {' and no '.join(missing)} section; all three services run here; usage: {USAGE}")
    return sections


def parse(argv: Sequence[str]) -> dict[str, argparse.Namespace]:
    """Each section through its service's parser (argparse's own message and exit status 2 for a bad flag,
    with the service named in the program name)."""
    if list(argv) in (["-h"], ["--help"]):
        print(f"usage: {USAGE}\n\n{__doc__}")
        raise SystemExit(0)
    try:
        sections = split_sections(argv)
    except UsageError as exc:
        print(f"phalanx-combined: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    mains = service_mains()
    return {name: mains[name].parser().parse_args(sections[name]) for name in SECTIONS}


def service_mains() -> dict[str, ModuleType]:
    """The three services' __main__ modules (imported once: their imports are what the process shares)."""
    from phalanx_binder import __main__ as binder_main
    from phalanx_queue import __main__ as queue_main
    from phalanx_scheduler import __main__ as scheduler_main

    return {"queue": queue_main, "binder": binder_main, "scheduler": scheduler_main}


def most_verbose(levels: Sequence[str]) -> str:
    """One process has one root logger: the most verbose level any section asks for (a name logging does
    not know counts as INFO here; setup_logging then refuses it, as a service alone would)."""

    def number(level: str) -> int:
        value = logging.getLevelName(level.upper())
        return value if isinstance(value, int) else logging.INFO

    return min(levels, key=number)


def shares_cluster_view(binder: argparse.Namespace, scheduler: argparse.Namespace) -> bool:
    """Whether the binder's view of pods and nodes follows the scheduler's cluster feed rather than watching
    the same objects again: both on the same API server, and the scheduler with a feed (the wall clock)."""
    return (
        binder.backend == scheduler.backend == "kubernetes"
        and scheduler.clock == "real"
        and (binder.kubeconfig or "") == (scheduler.kubeconfig or "")
    )


def main(argv: list[str] | None = None) -> None:
    args = parse(sys.argv[1:] if argv is None else argv)
    exit_with_parent()
    setup_logging(most_verbose([a.log_level for a in args.values()]))
    setup_tracing("phalanx")
    mains = service_mains()
    queue_main, binder_main, scheduler_main = mains["queue"], mains["binder"], mains["scheduler"]
    # In the order a three-process start ends up in: the scheduler waits for the other two to serve.
    started: list[ServiceServer] = []
    try:
        queue = queue_main.start(args["queue"])
        started.append(queue)
        shared = shares_cluster_view(args["binder"], args["scheduler"])
        binder = binder_main.start(args["binder"], own_view=not shared)
        started.append(binder)
        # The scheduler calls this process's queue and binder directly (phalanx.rpc.local), not over the
        # loopback: their gRPC servers still serve health, metrics and any other caller.
        view = getattr(getattr(binder.servicer, "backend", None), "view", None) if shared else None
        in_process = scheduler_main.InProcess(queue.servicer, binder.servicer, cluster_view=view)
        scheduler = scheduler_main.start(args["scheduler"], in_process)
    except BaseException:
        for server in reversed(started):  # their threads would otherwise hold the exit
            server.stop(0)
        raise
    freeze_heap()  # started: what it holds now lives as long as the process
    # The scheduler's duties stop first (its Lease released, its loop halted), then the servers: the
    # scheduler's, the binder it calls (in-flight binds finish), the queue last.
    serve_until_signal(scheduler.server, *reversed(started), on_stop=scheduler.on_stop)
    scheduler.exit_if_lost()


if __name__ == "__main__":
    main()
