"""phalanx-scheduler: filters and scores pods, accumulates gangs in Redis, hands satisfied gangs to the binder."""

from __future__ import annotations

import argparse
import logging
import threading
from typing import TYPE_CHECKING

from phalanx.clock import Clock
from phalanx.config import common_parser, env, health_listen_of, redis_args, redis_client, security_of, setup_logging
from phalanx.framework.framework import Framework
from phalanx.framework.profile import load_profile
from phalanx.lifecycle import exit_with_parent
from phalanx.model.keys import DEFAULT_SCHEDULER_NAME
from phalanx.rpc.clients import BinderClient, QueueClient
from phalanx.rpc.health import Heartbeat, redis_check
from phalanx.rpc.server import ServiceServer, serve_until_signal, wait_healthy
from phalanx.scheduling.scheduler import GangScheduler, SchedulerSettings
from phalanx.security import tls
from phalanx.state.keys import Keys
from phalanx.state.store import StateStore
from phalanx.telemetry.tracing import setup_tracing
from phalanx.v1 import scheduler_pb2_grpc
from phalanx_scheduler.servicer import SchedulerServicer

if TYPE_CHECKING:
    from phalanx.cluster.feed import ClusterFeed

log = logging.getLogger("phalanx_scheduler")


def build(args: argparse.Namespace) -> tuple[ServiceServer, SchedulerServicer]:
    clock = Clock(args.clock == "virtual")
    security = security_of(args)
    store = StateStore(redis_client(args), Keys(args.redis_prefix))
    wait_healthy(args.queue, timeout=args.dependency_timeout, security=security, peer=tls.QUEUE)
    wait_healthy(args.binder, timeout=args.dependency_timeout, security=security, peer=tls.BINDER)
    queue, binder = QueueClient(args.queue, security), BinderClient(args.binder, security)
    settings = SchedulerSettings(default_wait_seconds=args.default_wait, pop_batch=args.pop_batch)
    scheduler = GangScheduler(store, queue, binder, Framework(load_profile(args.profile)), settings)
    scheduler.recover(clock.now(0.0))
    # In Kubernetes mode the API server's watch is the only source of cluster state: the RPCs that feed
    # it (the simulator's) are refused.
    servicer = SchedulerServicer(scheduler, queue, clock, simulated=args.backend != "kubernetes")
    server = ServiceServer("scheduler", args.listen,
                           lambda s: scheduler_pb2_grpc.add_SchedulerServicer_to_server(servicer, s),
                           security=security, health_listen=health_listen_of(args, "scheduler"))
    server.monitor.add_check("redis", redis_check(store.redis))
    server.monitor.add_check("scheduling", servicer.step_error)
    return server, servicer


def parser() -> argparse.ArgumentParser:
    p = common_parser("scheduler", __doc__ or "")
    redis_args(p)
    p.add_argument("--queue", default=env("QUEUE_ADDR", "127.0.0.1:50051"), help="queue service (env PHALANX_QUEUE_ADDR)")
    p.add_argument("--binder", default=env("BINDER_ADDR", "127.0.0.1:50053"),
                   help="binder service (env PHALANX_BINDER_ADDR)")
    p.add_argument("--profile", default=env("PROFILE", "") or None, help="scheduling profile YAML (env PHALANX_PROFILE)")
    p.add_argument("--default-wait", type=float, default=float(env("DEFAULT_WAIT", "600")),
                   help="seconds a gang waits for its minimum when it declares no waiting time")
    p.add_argument("--pop-batch", type=int, default=int(env("POP_BATCH", "256")))
    p.add_argument("--dependency-timeout", type=float, default=60.0)
    p.add_argument("--backend", choices=["simulated", "kubernetes"], default=env("BACKEND", "kubernetes"),
                   help="kubernetes: watch the cluster (with --clock real) and feed it to the scheduler; simulated: "
                        "cluster events arrive through the Scheduler API (env PHALANX_BACKEND)")
    p.add_argument("--kubeconfig", default=env("KUBECONFIG", ""), help="empty: in-cluster configuration")
    p.add_argument("--reconcile-interval", type=float, default=float(env("RECONCILE_INTERVAL", "10")),
                   help="seconds between comparisons of the scheduler's view, Redis and the API server, which "
                        "repair any drift (env PHALANX_RECONCILE_INTERVAL)")
    p.add_argument("--liveness-timeout", type=float, default=float(env("LIVENESS_TIMEOUT", "120")),
                   help="seconds the scheduling loop may go without an iteration before liveness fails "
                        "(env PHALANX_LIVENESS_TIMEOUT)")
    p.add_argument("--scheduler-name", default=env("SCHEDULER_NAME", DEFAULT_SCHEDULER_NAME),
                   help="the spec.schedulerName of the pods Phalanx schedules (env PHALANX_SCHEDULER_NAME)")
    return p


def start_feed(args: argparse.Namespace, servicer: SchedulerServicer,
               server: ServiceServer | None = None) -> ClusterFeed | None:
    """Kubernetes mode on the wall clock: watch the cluster, after recover() has loaded Redis."""
    if args.backend != "kubernetes" or args.clock != "real":
        return None
    from phalanx.cluster.client import api_client
    from phalanx.cluster.feed import ClusterFeed, collections

    scheduler = servicer.scheduler
    feed = ClusterFeed(scheduler, servicer.lock, servicer.queue, scheduler.binder,  # type: ignore[arg-type]
                       collections(api_client(args.kubeconfig)), scheduler_name=args.scheduler_name,
                       reconcile_interval=args.reconcile_interval)
    if server is not None:
        server.monitor.add_check("cluster feed", lambda: "" if feed.synced.is_set() else "not synced yet")
    return feed.start()


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    exit_with_parent()
    setup_logging(args.log_level)
    setup_tracing("phalanx-scheduler")
    server, servicer = build(args)
    server.start()
    stop = threading.Event()
    feed = start_feed(args, servicer, server)
    if feed is not None and not feed.wait_synced(args.dependency_timeout):  # the rebuild comes before scheduling
        log.warning("the cluster feed has not synced after %gs; scheduling anyway", args.dependency_timeout)
    if args.clock == "real":
        beat = server.monitor.add_heartbeat(Heartbeat("scheduling", args.liveness_timeout))
        threading.Thread(target=servicer.run_forever, args=(stop,), kwargs={"beat": beat}, name="schedule-loop",
                         daemon=True).start()

    def on_stop() -> None:
        stop.set()
        if feed is not None:
            feed.stop()

    serve_until_signal(server, on_stop=on_stop)


if __name__ == "__main__":
    main()
