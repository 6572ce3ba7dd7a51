"""phalanx-queue: takes pods in and hands them to the scheduler gang by gang."""

from __future__ import annotations

import argparse

from phalanx.clock import Clock
from phalanx.config import common_parser, env_flag, health_listen_of, security_of, serve_metrics_of, setup_logging
from phalanx.gc_tuning import freeze_heap
from phalanx.lifecycle import exit_with_parent
from phalanx.metrics.collectors import QueueCollector
from phalanx.metrics.endpoint import MetricsEndpoint
from phalanx.model.policies import check_job_queue_policy
from phalanx.queueing.scheduling_queue import QueueSettings, SchedulingQueue
from phalanx.rpc.server import ServiceServer, built_or_exit, serve_until_signal
from phalanx.telemetry.tracing import setup_tracing
from phalanx.v1 import queue_pb2_grpc
from phalanx_queue.servicer import QueueServicer


def build(args: argparse.Namespace, metrics: MetricsEndpoint | None = None) -> ServiceServer:
    settings = QueueSettings(
        initial_backoff=args.initial_backoff,
        max_backoff=args.max_backoff,
        unschedulable_flush=args.unschedulable_flush,
        lease_seconds=args.lease,
        job_queue_policy=args.job_queue_policy,
    )
    servicer = QueueServicer(SchedulingQueue(settings), Clock(args.clock == "virtual"))
    server = ServiceServer(
        "queue",
        args.listen,
        lambda s: queue_pb2_grpc.add_QueueServicer_to_server(servicer, s),
        security=security_of(args),
        health_listen=health_listen_of(args, "queue"),
        kubernetes=args.backend == "kubernetes",
    )
    server.servicer = servicer
    server.add_drain(servicer.queue.close)  # long polls answer empty at once instead of waiting out the grace
    if metrics is not None:
        metrics.registry.register(QueueCollector(servicer.queue))  # pending pods, counted when scraped
        server.add_cleanup(metrics.stop)
    return server


def parser() -> argparse.ArgumentParser:
    p = common_parser("queue", __doc__ or "")
    env_flag(
        p,
        "--initial-backoff",
        "PHALANX_INITIAL_BACKOFF",
        "1",
        "seconds a pod waits before its first retry; each retry doubles it",
        parse=float,
        type=float,
    )
    env_flag(
        p,
        "--max-backoff",
        "PHALANX_MAX_BACKOFF",
        "10",
        "the longest a pod waits between retries, in seconds",
        parse=float,
        type=float,
    )
    env_flag(
        p,
        "--unschedulable-flush",
        "PHALANX_UNSCHEDULABLE_FLUSH",
        "300",
        "retry unschedulable pods after this many seconds without a cluster event (0: never)",
        parse=float,
        type=float,
    )
    env_flag(
        p,
        "--lease",
        "PHALANX_LEASE",
        "60",
        "seconds a scheduler may stay silent before the pods it popped return to the queue (0: never)",
        parse=float,
        type=float,
    )
    env_flag(
        p,
        "--backend",
        "PHALANX_BACKEND",
        "kubernetes",
        "what the scheduler runs against; kubernetes: pods come from the scheduler's watch of the API server "
        "only, so only the scheduler may add them (with mutual TLS); simulated: the simulator may add them too",
        choices=["simulated", "kubernetes"],
    )
    env_flag(
        p,
        "--job-queue-policy",
        "PHALANX_JOB_QUEUE_POLICY",
        "Priority",
        "how jobs naming no phalanx.dev/job-queue-policy are ordered: Priority (priority, then age) or DRF "
        "(within a priority, the tenant holding the smallest dominant share first)",
        parse=_job_queue_policy,
        type=_job_queue_policy,
    )
    return p


def _job_queue_policy(raw: str) -> str:
    try:
        return check_job_queue_policy(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def start(args: argparse.Namespace) -> ServiceServer:
    """The queue built from its flags and serving, its /metrics too (main, and the combined layout)."""
    metrics = serve_metrics_of(args, "queue")
    return built_or_exit("queue", lambda: build(args, metrics)).start()


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    exit_with_parent()
    setup_logging(args.log_level)
    setup_tracing("phalanx-queue")
    server = start(args)
    freeze_heap()  # started: what it holds now lives as long as the process
    serve_until_signal(server)


if __name__ == "__main__":
    main()
