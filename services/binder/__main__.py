"""phalanx-binder: binds satisfied gangs as one batch, under a mutex shared with ordinary binds."""

from __future__ import annotations

import argparse
import logging
import socket
import threading
from collections.abc import Callable

from phalanx.backends.base import ClusterBackend
from phalanx.backends.simulated import SimulatedBackend
from phalanx.binding.batch_binder import BatchBinder
from phalanx.binding.lock import FencedLock
from phalanx.clock import Clock
from phalanx.config import (
    bind_wait,
    bind_wait_args,
    check_kubeconfig,
    common_parser,
    env_flag,
    health_listen_of,
    kubeconfig_arg,
    redis_args,
    redis_client,
    security_of,
    serve_metrics_of,
    setup_logging,
)
from phalanx.gc_tuning import freeze_heap, pause_until_frozen
from phalanx.lifecycle import exit_with_parent
from phalanx.model.keys import DEFAULT_SCHEDULER_NAME
from phalanx.rpc.health import Heartbeat, redis_check
from phalanx.rpc.server import ServiceServer, built_or_exit, serve_until_signal
from phalanx.state.durability import ReplicaWait
from phalanx.state.keys import Keys
from phalanx.state.store import StateStore
from phalanx.telemetry.tracing import setup_tracing
from phalanx.v1 import binder_pb2_grpc
from phalanx_binder.servicer import BinderServicer

log = logging.getLogger("phalanx_binder")

# The longest the collector stays off while the first lists come in (should they never finish).
FIRST_LIST_PAUSE_LIMIT = 60.0


def build(
    args: argparse.Namespace, after_first_list: Callable[[], object] | None = None, *, own_view: bool = True
) -> ServiceServer:
    """The binder and its server. `after_first_list`: in Kubernetes mode, called once the cluster view's
    first lists are in (main freezes the heap there and resumes collection). `own_view` False: the view
    follows the scheduler's feed in this process instead of watching (the combined process)."""
    client = redis_client(args)
    keys = Keys(args.redis_prefix)
    backend: ClusterBackend
    if args.backend == "simulated":
        backend = SimulatedBackend(client, keys)
    else:
        from phalanx.backends.kubernetes import KubernetesBackend  # imported only when used

        backend = KubernetesBackend.from_args(args, after_first_list, own_view=own_view)
    replicas, wait_timeout = bind_wait(args)
    durability = ReplicaWait(client, keys.bind_durable, replicas, wait_timeout) if replicas else None
    binder = BatchBinder(
        StateStore(client, keys),
        backend,
        FencedLock(client, keys, args.lock_lease, owner=binder_identity(args)),
        durability,
    )
    clock = Clock(args.clock == "virtual")
    servicer = BinderServicer(binder, backend, clock)
    server = ServiceServer(
        "binder",
        args.listen,
        lambda s: binder_pb2_grpc.add_BinderServicer_to_server(servicer, s),
        security=security_of(args),
        health_listen=health_listen_of(args, "binder"),
        kubernetes=args.backend == "kubernetes",
    )
    server.servicer = servicer
    server.monitor.add_check("redis", redis_check(client))
    close = getattr(backend, "close", None)
    if close is not None:
        server.add_cleanup(close)  # the Kubernetes backend's watch and report threads
    if not backend.transactional and args.finish_interval > 0:
        beat = server.monitor.add_heartbeat(Heartbeat("roll-forward", max(60.0, 10 * args.finish_interval)))
        finisher = RollForward(binder, clock, args.finish_interval, beat, server.stopping)
        threading.Thread(target=finisher.run, name="roll-forward", daemon=True).start()
    return server


def binder_identity(args: argparse.Namespace) -> str:
    """Stable across restarts of this binder, distinct between replicas: the pod's name (the chart sets
    PHALANX_BINDER_IDENTITY from metadata.name), else this host and the port it listens on."""
    return args.identity or f"{socket.gethostname()}:{args.listen.rsplit(':', 1)[-1]}"


class RollForward:
    """Finishes bindings a crashed (or fenced-out) binder started: at start-up, then periodically."""

    def __init__(
        self, binder: BatchBinder, clock: Clock, interval: float, beat: Heartbeat, stop: threading.Event
    ) -> None:
        self.binder, self.clock, self.interval, self.beat, self.stop = binder, clock, interval, beat, stop

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.binder.finish_interrupted(self.clock.now())
                self.beat.beat()
            except Exception as exc:  # Redis or the API server is down: the next round tries again
                log.warning("rolling interrupted bindings forward failed: %s", exc)
            self.stop.wait(self.interval)


def parser() -> argparse.ArgumentParser:
    p = common_parser("binder", __doc__ or "")
    redis_args(p)
    bind_wait_args(p)
    env_flag(
        p,
        "--backend",
        "PHALANX_BACKEND",
        "kubernetes",
        "where bindings are written",
        choices=["simulated", "kubernetes"],
    )
    kubeconfig_arg(p)
    env_flag(
        p,
        "--scheduler-name",
        "PHALANX_SCHEDULER_NAME",
        DEFAULT_SCHEDULER_NAME,
        "the spec.schedulerName of the pods Phalanx schedules; the binder binds and reports on no other pod",
    )
    env_flag(
        p,
        "--lock-lease",
        "PHALANX_LOCK_LEASE",
        "30",
        "seconds a binder holds the bind mutex before another may take it over",
        parse=float,
        type=float,
    )
    env_flag(
        p,
        "--identity",
        "PHALANX_BINDER_IDENTITY",
        "",
        "this replica's name, the same after a restart: a restarted binder takes over the bind mutex its "
        "crashed predecessor held",
        shown="host:port",
    )
    env_flag(
        p,
        "--finish-interval",
        "PHALANX_FINISH_INTERVAL",
        "2",
        "seconds between looks for bindings a crashed binder started and did not record, which are then "
        "rolled forward (0: never)",
        parse=float,
        type=float,
    )
    env_flag(
        p,
        "--eviction-grace-seconds",
        "PHALANX_EVICTION_GRACE_SECONDS",
        "-1",
        "the grace period preemption's evictions give their victims (-1: each pod's own terminationGracePeriodSeconds)",
        parse=int,
        type=int,
    )
    env_flag(
        p,
        "--eviction-mode",
        "PHALANX_EVICTION_MODE",
        "api",
        "how preemption removes its victims: the Eviction API (PodDisruptionBudgets enforced by the API "
        "server), or delete after a DisruptionTarget condition, as kube-scheduler does",
        choices=["api", "delete"],
    )
    return p


def start(args: argparse.Namespace, *, own_view: bool = True) -> ServiceServer:
    """The binder built from its flags and serving, its /metrics too (main, and the combined layout, whose
    scheduler's feed feeds the binder's view: `own_view` False)."""
    metrics = serve_metrics_of(args, "binder")
    check_kubeconfig("binder", args)  # read once here; the backend takes the same connection
    # Every pod of ours and every node are listed at start: no collection meanwhile, then the result is
    # frozen and collection resumes (as the scheduler's first list; gc_tuning.pause_until_frozen). A view
    # that follows the scheduler's feed lists nothing: the feed's own pause covers its lists.
    listing = args.backend == "kubernetes" and own_view
    after_first_list = pause_until_frozen(FIRST_LIST_PAUSE_LIMIT) if listing else None
    server = built_or_exit("binder", lambda: build(args, after_first_list, own_view=own_view))
    if metrics is not None:
        server.add_cleanup(metrics.stop)
    return server.start()


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    exit_with_parent()
    setup_logging(args.log_level)
    setup_tracing("phalanx-binder")
    server = start(args)
    freeze_heap()  # started: what it holds now lives as long as the process
    serve_until_signal(server)


if __name__ == "__main__":
    main()
