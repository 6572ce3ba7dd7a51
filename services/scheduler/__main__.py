"""phalanx-scheduler: filters and scores pods, accumulates gangs in Redis, hands satisfied gangs to the binder.

Several replicas may run (--leader-elect, on by default against Kubernetes): they elect a leader on a Lease
(libs/phalanx/cluster/leader.py, leadership.py); only the leader runs the cluster feed and the scheduling
loop (libs/phalanx/cluster/duties.py), and its writes to Redis carry its fencing term. A standby serves
health and waits; it takes over when the leader's Lease expires (or is released), and a leader that loses
its Lease exits.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import grpc

from phalanx.clock import Clock
from phalanx.cluster import leadership as leader_election
from phalanx.cluster.duties import SchedulingDuties
from phalanx.cluster.leader import (
    DEFAULT_LEASE_DURATION,
    DEFAULT_RENEW_DEADLINE,
    DEFAULT_RETRY_PERIOD,
    ElectionConfig,
    new_identity,
    pod_name,
    pod_namespace,
)
from phalanx.cluster.loop import SchedulingLoop
from phalanx.config import (
    bool_arg,
    common_parser,
    env_flag,
    health_listen_of,
    kubeconfig_arg,
    opt_bool,
    redis_args,
    redis_client,
    redis_unreachable,
    security_of,
    serve_metrics_of,
    setup_logging,
    usage_error,
)
from phalanx.framework.framework import Framework
from phalanx.framework.profile import ProfileError
from phalanx.lifecycle import exit_with_parent
from phalanx.metrics.collectors import GangCollector, LeaderCollector
from phalanx.model.keys import DEFAULT_SCHEDULER_NAME
from phalanx.plugins.registry import load_in_tree_framework
from phalanx.rpc.clients import BinderClient, QueueClient
from phalanx.rpc.health import redis_check
from phalanx.rpc.server import ServiceServer, serve_until_signal, wait_healthy
from phalanx.scheduling.pod_source import PoppedPodCheck
from phalanx.scheduling.scheduler import GangScheduler, SchedulerSettings
from phalanx.security import tls
from phalanx.security.tls import Security
from phalanx.state.keys import Keys
from phalanx.state.store import StateStore
from phalanx.telemetry.failures import rpc_failure
from phalanx.telemetry.tracing import setup_tracing
from phalanx.v1 import scheduler_pb2_grpc
from phalanx_scheduler.servicer import SchedulerServicer

if TYPE_CHECKING:
    from phalanx.cluster.feed import ClusterFeed

log = logging.getLogger("phalanx_scheduler")

# The queue lends popped pods to a consumer (name, incarnation). Replicas under leader election share one
# name, so the first pop of a new leader (a new incarnation of it) takes back at once whatever the
# previous leader still had on loan.
SHARED_CONSUMER = "phalanx-scheduler"


def election_enabled(args: argparse.Namespace) -> bool:
    """--leader-elect, by default on against Kubernetes on the wall clock (the deployed configuration)."""
    if args.leader_elect is not None:
        return bool(args.leader_elect)
    return bool(args.backend == "kubernetes" and args.clock == "real")


def build(
    args: argparse.Namespace, *, standby: bool = False, dependencies: Dependencies | None = None
) -> tuple[ServiceServer, SchedulerServicer]:
    """The scheduler and its server. `standby`: a replica under leader election, which must not touch the
    state before it leads: no recover() (which would also hand the leader's in-flight pods back to the
    queue); Leadership does it on takeover. `dependencies`: the queue and the binder, already being waited
    for (main); a standby then returns without waiting for them (main waits, while the replica campaigns).
    Without it, build waits for both."""
    framework = framework_of(args.profile)  # a bad profile ends the service before it waits for anything
    retry_backoff = retry_backoff_of(args.gang_retry_backoff)  # so does a bad backoff
    clock = Clock(args.clock == "virtual")
    security = security_of(args)
    store = StateStore(redis_client(args), Keys(args.redis_prefix))
    if dependencies is None or not standby:
        (dependencies or Dependencies(args, security).start()).wait()
    consumer = SHARED_CONSUMER if election_enabled(args) else ""
    queue, binder = QueueClient(args.queue, security, consumer=consumer), BinderClient(args.binder, security)
    settings = SchedulerSettings(
        default_wait_seconds=args.default_wait,
        pop_batch=args.pop_batch,
        profile=args.scheduler_name,
        starvation_bound_seconds=args.starvation_bound,
        preemption=args.preemption == "on",
        gang_retry_backoff_seconds=retry_backoff,
    )
    scheduler = GangScheduler(store, queue, binder, framework, settings)
    if args.backend == "kubernetes":  # the API server is the only source of a pod's spec (its feed attaches)
        scheduler.popped_check = PoppedPodCheck()
    if not standby:
        try:
            scheduler.recover(clock.now(0.0))
        except grpc.RpcError as exc:  # the queue went away since it answered its health check
            cannot_start(f"--queue {args.queue}: the queue did not answer: {rpc_failure(exc)}")
        except Exception as exc:
            unreachable = redis_unreachable(exc, store.redis)
            if not unreachable:
                raise
            cannot_start(f"{'--redis-sentinels' if args.redis_sentinels else '--redis-url'}: {unreachable}")
    # In Kubernetes mode the API server's watch is the only source of cluster state: the RPCs that feed
    # it (the simulator's) are refused.
    loop = SchedulingLoop(scheduler, queue, clock)
    servicer = SchedulerServicer(scheduler, loop, clock, simulated=args.backend != "kubernetes")
    server = ServiceServer(
        "scheduler",
        args.listen,
        lambda s: scheduler_pb2_grpc.add_SchedulerServicer_to_server(servicer, s),
        security=security,
        health_listen=health_listen_of(args, "scheduler"),
        kubernetes=args.backend == "kubernetes",
    )
    server.monitor.add_check("redis", redis_check(store.redis))
    server.monitor.add_check("scheduling", servicer.loop.step_error)
    return server, servicer


def framework_of(path: str | None) -> Framework:
    """The profile's framework; a profile that cannot be used ends the service with one line naming the
    file and the field (exit status 2)."""
    try:
        return load_in_tree_framework(path)
    except ProfileError as exc:
        usage_error("scheduler", f"--profile {exc.path}: {exc.where()}")


def retry_backoff_of(raw: str) -> float:
    """--gang-retry-backoff: seconds, 0 or more (0: a timed-out gang is tried again at once); anything else
    ends the service with one line naming the flag and its variable (exit status 2)."""
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        usage_error(
            "scheduler",
            f"--gang-retry-backoff (env PHALANX_GANG_RETRY_BACKOFF): {raw!r} is not a number of seconds, 0 or more",
        )
    return seconds


class Dependencies:
    """The queue and the binder, waited for from start() on a thread each (concurrently with each other and
    with whatever the scheduler does meanwhile: building itself, loading its kubeconfig, campaigning for the
    Lease); `wait` ends the scheduler with one line naming the first that never served."""

    def __init__(self, args: argparse.Namespace, security: Security) -> None:
        self.services = [
            (args.queue, "--queue", "queue", tls.QUEUE),
            (args.binder, "--binder", "binder", tls.BINDER),
        ]
        self.timeout = args.dependency_timeout
        self.security = security
        self.failures: dict[str, str] = {}
        self._threads: list[threading.Thread] = []

    def start(self) -> Dependencies:
        for address, flag, what, peer in self.services:
            t = threading.Thread(
                target=self._wait_one, args=(address, flag, what, peer), name=f"wait-{what}", daemon=True
            )
            t.start()
            self._threads.append(t)
        return self

    def _wait_one(self, address: str, flag: str, what: str, peer: str) -> None:
        try:
            wait_healthy(address, timeout=self.timeout, security=self.security, peer=peer)
        except TimeoutError:
            self.failures[what] = (
                f"{flag} {address}: the {what} is not serving (no healthy answer within {self.timeout:g}s; "
                "--dependency-timeout)"
            )

    def ready(self) -> bool:
        """Blocks until both serve (True) or one gave up (False)."""
        for t in self._threads:
            t.join()
        return not self.failures

    @property
    def failure(self) -> str:
        """The first that never served, in the order they are named (the queue, then the binder)."""
        return next((self.failures[what] for _, _, what, _ in self.services if what in self.failures), "")

    def wait(self) -> None:
        if not self.ready():
            cannot_start(self.failure)


def cannot_start(reason: str) -> NoReturn:
    raise SystemExit(f"phalanx-scheduler: {reason}")


def parser() -> argparse.ArgumentParser:
    p = common_parser("scheduler", __doc__ or "")
    redis_args(p)
    env_flag(p, "--queue", "PHALANX_QUEUE_ADDR", "127.0.0.1:50051", "queue service")
    env_flag(p, "--binder", "PHALANX_BINDER_ADDR", "127.0.0.1:50053", "binder service")
    env_flag(
        p,
        "--profile",
        "PHALANX_PROFILE",
        "",
        "scheduling profile YAML",
        parse=lambda raw: raw or None,
        shown="empty: the built-in profile",
    )
    env_flag(
        p,
        "--default-wait",
        "PHALANX_DEFAULT_WAIT",
        "600",
        "seconds a gang waits for its minimum when it declares no waiting time",
        parse=float,
        type=float,
    )
    env_flag(
        p,
        "--gang-retry-backoff",
        "PHALANX_GANG_RETRY_BACKOFF",
        "10",
        "seconds a gang whose wait ran out waits before it is tried again, for the forms that retry "
        "(scheduler-plugins, Volcano and Workload API PodGroups, lightweight, kube-batch, delayed-binding, "
        "ConfigMap; Coscheduling's podGroupBackoffSeconds); Koordinator's forms never retry",
    )
    env_flag(
        p,
        "--starvation-bound",
        "PHALANX_STARVATION_BOUND",
        "0",
        "seconds a gang may wait for its minimum before nodes are reserved (drained) for it; 0: no reservations",
        parse=float,
        type=float,
    )
    env_flag(
        p,
        "--preemption",
        "PHALANX_PREEMPTION",
        "on",
        "gang preemption: a gang that does not fit evicts lower-priority gangs (whole) or pods; off: never",
        choices=["on", "off"],
    )
    env_flag(
        p, "--pop-batch", "PHALANX_POP_BATCH", "256", "pods popped from the queue at most per pop", parse=int, type=int
    )
    p.add_argument(
        "--dependency-timeout",
        type=float,
        default=60.0,
        help="seconds to wait at start for the queue and the binder to serve before giving up",
    )
    env_flag(
        p,
        "--backend",
        "PHALANX_BACKEND",
        "kubernetes",
        "kubernetes: watch the cluster (with --clock real) and feed it to the scheduler; simulated: cluster "
        "events arrive through the Scheduler API",
        choices=["simulated", "kubernetes"],
    )
    kubeconfig_arg(p)
    env_flag(
        p,
        "--reconcile-interval",
        "PHALANX_RECONCILE_INTERVAL",
        "10",
        "seconds between comparisons of the scheduler's view, Redis and the API server, which repair any drift",
        parse=float,
        type=float,
    )
    env_flag(
        p,
        "--liveness-timeout",
        "PHALANX_LIVENESS_TIMEOUT",
        "120",
        "seconds the scheduling loop may go without an iteration before liveness fails",
        parse=float,
        type=float,
    )
    env_flag(
        p,
        "--scheduler-name",
        "PHALANX_SCHEDULER_NAME",
        DEFAULT_SCHEDULER_NAME,
        "the spec.schedulerName of the pods Phalanx schedules",
    )
    g = p.add_argument_group(
        "leader election",
        "several replicas: one leads (schedules), the others wait (kube-scheduler's flags and defaults)",
    )
    env_flag(
        g,
        "--leader-elect",
        "PHALANX_LEADER_ELECT",
        "",
        "elect a leader on a coordination.k8s.io Lease before scheduling",
        parse=opt_bool,
        shown="true with --backend kubernetes and --clock real, else false",
        type=bool_arg,
        nargs="?",
        const=True,
    )
    env_flag(
        g,
        "--leader-elect-lease-name",
        "PHALANX_LEADER_ELECT_LEASE_NAME",
        "",
        "the Lease's name",
        shown="<scheduler-name>-scheduler, i.e. phalanx-scheduler",
    )
    env_flag(
        g,
        "--leader-elect-namespace",
        "PHALANX_LEADER_ELECT_NAMESPACE",
        "",
        "the Lease's namespace",
        shown="POD_NAMESPACE, else the service account's namespace, else default",
    )
    env_flag(
        g,
        "--leader-elect-identity",
        "PHALANX_LEADER_ELECT_IDENTITY",
        "",
        "this replica's name in the Lease (a random suffix per process is appended); replicas need distinct names",
        shown="POD_NAME, else the host name",
    )
    env_flag(
        g,
        "--leader-elect-lease-duration",
        "PHALANX_LEADER_ELECT_LEASE_DURATION",
        f"{DEFAULT_LEASE_DURATION:g}",
        "seconds a standby waits, after the Lease last changed, before taking it over",
        parse=float,
        type=float,
    )
    env_flag(
        g,
        "--leader-elect-renew-deadline",
        "PHALANX_LEADER_ELECT_RENEW_DEADLINE",
        f"{DEFAULT_RENEW_DEADLINE:g}",
        "seconds the leader keeps trying to renew before it gives up leadership (and exits)",
        parse=float,
        type=float,
    )
    env_flag(
        g,
        "--leader-elect-retry-period",
        "PHALANX_LEADER_ELECT_RETRY_PERIOD",
        f"{DEFAULT_RETRY_PERIOD:g}",
        "seconds between attempts to acquire or renew the Lease",
        parse=float,
        type=float,
    )
    return p


def start_feed(
    args: argparse.Namespace, servicer: SchedulerServicer, server: ServiceServer | None = None
) -> ClusterFeed | None:
    """Kubernetes mode on the wall clock: watch the cluster, after recover() has loaded Redis."""
    if args.backend != "kubernetes" or args.clock != "real":
        return None
    from phalanx.cluster.feed import ClusterFeed, collections
    from phalanx.kube.client import api_client

    scheduler = servicer.scheduler
    feed = ClusterFeed(
        scheduler,
        servicer.loop.lock,
        scheduler.queue,
        scheduler.binder,
        collections(api_client(args.kubeconfig)),
        scheduler_name=args.scheduler_name,
        reconcile_interval=args.reconcile_interval,
    )
    if server is not None:
        server.monitor.add_check("cluster feed", feed.not_synced)
    if scheduler.popped_check is not None:
        scheduler.popped_check.source = feed
    return feed.start()


def duties_of(args: argparse.Namespace, servicer: SchedulerServicer, server: ServiceServer) -> SchedulingDuties:
    """What this replica runs when it schedules: the cluster feed (Kubernetes mode) and the loop (wall clock)."""
    return SchedulingDuties(
        servicer.loop,
        server.monitor,
        start_feed=lambda: start_feed(args, servicer, server),
        run_loop=args.clock == "real",
        liveness_timeout=args.liveness_timeout,
        sync_timeout=args.dependency_timeout,
    )


class Leadership(leader_election.Leadership):
    """The library's leader election wired from this service's flags (main(), and the tests that run replicas
    as main() does)."""

    def __init__(
        self,
        args: argparse.Namespace,
        server: ServiceServer,
        servicer: SchedulerServicer,
        *,
        api_client: Any = None,
        on_lost: Callable[[str], None] | None = None,
        dependencies: Dependencies | None = None,
    ) -> None:
        from phalanx.kube.client import api_client as make_api_client

        config = election_config(args)
        api = api_client if api_client is not None else make_api_client(args.kubeconfig)
        super().__init__(
            api,
            config,
            servicer.loop,
            server.monitor,
            lambda: duties_of(args, servicer, server),
            on_lost=on_lost,
            ready=dependencies.ready if dependencies is not None else None,
        )
        servicer.standby = self.standby_reason  # a standby's ListGangs says so instead of an empty list


def election_config(args: argparse.Namespace) -> ElectionConfig:
    config = ElectionConfig(
        namespace=args.leader_elect_namespace or pod_namespace(),
        name=args.leader_elect_lease_name or f"{args.scheduler_name}-scheduler",
        identity=new_identity(args.leader_elect_identity or pod_name()),
        lease_duration=args.leader_elect_lease_duration,
        renew_deadline=args.leader_elect_renew_deadline,
        retry_period=args.leader_elect_retry_period,
    )
    try:
        config.validate()
    except ValueError as exc:
        raise SystemExit(f"--leader-elect-*: {exc}") from None
    return config


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    exit_with_parent()
    setup_logging(args.log_level)
    setup_tracing("phalanx-scheduler")
    elect = election_enabled(args)
    if elect:
        election_config(args)  # bad flags fail before anything starts
    metrics = serve_metrics_of(args, "scheduler")
    dependencies = Dependencies(args, security_of(args)).start()
    server, servicer = build(args, standby=elect, dependencies=dependencies)
    if metrics is not None:
        metrics.registry.register(GangCollector(lambda: servicer.scheduler.gangs, servicer.lock))
        server.add_cleanup(metrics.stop)
    if elect:

        def on_lost(reason: str) -> None:  # through the graceful path: in-flight calls finish, then exit 1
            os.kill(os.getpid(), signal.SIGTERM)

        # The replica campaigns (loads its kubeconfig, asks for the Lease, claims the term) while the queue
        # and the binder start; it recovers and schedules once they serve, and serves health then, as before.
        leadership = Leadership(args, server, servicer, on_lost=on_lost, dependencies=dependencies).start()
        from phalanx.cluster import feed  # noqa: F401  # what a takeover imports, while this thread waits

        if not dependencies.ready():
            leadership.stop()  # releases the Lease if it was won
            cannot_start(dependencies.failure)
        server.start()
        if metrics is not None:
            metrics.registry.register(LeaderCollector(leadership.config.name, leadership.is_leader))
        serve_until_signal(server, on_stop=leadership.stop)
        if leadership.lost:
            raise SystemExit(f"phalanx-scheduler: leadership lost ({leadership.lost}); exiting to restart as a standby")
        return
    server.start()
    duties = duties_of(args, servicer, server)
    duties.start_feed()
    duties.wait_synced()
    duties.start_loop()
    serve_until_signal(server, on_stop=duties.halt)


if __name__ == "__main__":
    main()
