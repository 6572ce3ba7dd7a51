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
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import grpc

from phalanx.clock import Clock
from phalanx.cluster import leadership as leader_election
from phalanx.cluster.duties import SchedulingDuties
from phalanx.cluster.leader import ElectionConfig, new_identity, pod_name, pod_namespace
from phalanx.cluster.loop import SchedulingLoop
from phalanx.config import (
    check_kubeconfig,
    health_listen_of,
    redis_client,
    redis_unreachable,
    security_of,
    serve_metrics_of,
    setup_logging,
    usage_error,
)
from phalanx.framework.framework import Framework
from phalanx.framework.profile import ProfileError
from phalanx.gc_tuning import freeze_heap, pause_until_frozen
from phalanx.lifecycle import exit_with_parent
from phalanx.metrics.collectors import GangCollector, LeaderCollector
from phalanx.plugins.registry import load_in_tree_framework
from phalanx.rpc.clients import BinderClient, QueueClient
from phalanx.rpc.health import redis_check
from phalanx.rpc.server import ServiceServer, built_or_exit, serve_until_signal, wait_healthy
from phalanx.scheduling.pod_source import PoppedPodCheck
from phalanx.scheduling.scheduler import GangScheduler, SchedulerSettings
from phalanx.security import tls
from phalanx.security.tls import Security
from phalanx.state.keys import Keys
from phalanx.state.store import StateStore
from phalanx.telemetry.failures import rpc_failure
from phalanx.telemetry.tracing import setup_tracing
from phalanx.v1 import scheduler_pb2_grpc
from phalanx_scheduler import flags
from phalanx_scheduler.flags import election_enabled, retry_backoff_of
from phalanx_scheduler.servicer import SchedulerServicer

if TYPE_CHECKING:
    from phalanx.cluster.feed import ClusterFeed
    from phalanx.cluster.sources import Follower

log = logging.getLogger("phalanx_scheduler")

# The queue lends popped pods to a consumer (name, incarnation). Replicas under leader election share one
# name, so the first pop of a new leader (a new incarnation of it) takes back at once whatever the
# previous leader still had on loan.
SHARED_CONSUMER = "phalanx-scheduler"
# The first pop after a lull asks for this many pods, doubling up to --pop-batch (SchedulerSettings.first_pop):
# at start-up the first round of 256 pods took ~80 ms to place before any binding left.
FIRST_POP = 16


@dataclass
class InProcess:
    """The queue's and the binder's servicers when they run in this process (phalanx_combined): the
    scheduler calls their handlers directly (phalanx.rpc.local) instead of over gRPC. `cluster_view`: the
    binder's view of pods and nodes, which the scheduler's feed then feeds (ClusterView.follow) instead of
    the binder watching the same objects itself; None: the binder watches for itself."""

    queue: object
    binder: object
    cluster_view: Follower | None = None


def build(
    args: argparse.Namespace,
    *,
    standby: bool = False,
    dependencies: Dependencies | None = None,
    in_process: InProcess | None = None,
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
    queue = QueueClient(args.queue, security, consumer=consumer, servicer=in_process and in_process.queue)
    binder = BinderClient(args.binder, security, servicer=in_process and in_process.binder)
    settings = SchedulerSettings(
        default_wait_seconds=args.default_wait,
        pop_batch=args.pop_batch,
        first_pop=FIRST_POP,
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


class Dependencies:
    """The queue and the binder, waited for from start() on a thread each (concurrently with each other and
    with whatever the scheduler does meanwhile: building itself, loading its kubeconfig, campaigning for the
    Lease); `wait` ends the scheduler with one line naming the first that never served."""

    def __init__(self, args: argparse.Namespace, security: Security, in_process: bool = False) -> None:
        """`in_process`: the queue and the binder run in this process and serve before the scheduler starts
        (phalanx_combined): nothing to wait for, no connection to open."""
        self.services = [
            (args.queue, "--queue", "queue", tls.QUEUE),
            (args.binder, "--binder", "binder", tls.BINDER),
        ]
        if in_process:
            self.services = []
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
    """The service's flags (flags.py), described by this module's docstring."""
    return flags.parser(__doc__ or "")


def start_feed(
    args: argparse.Namespace,
    servicer: SchedulerServicer,
    server: ServiceServer | None = None,
    *,
    gated: bool = False,
    freeze: bool = False,
    follower: Follower | None = None,
) -> ClusterFeed | None:
    """Kubernetes mode on the wall clock: watch the cluster, applied after recover() has loaded Redis (`gated`:
    the lists start now, the caller opens the feed once it has recovered). `freeze`: the service process (not
    a test running it in-process) freezes its heap once the feed has rebuilt (gc_tuning.freeze_heap).
    `follower`: the binder's view in this process, fed by the feed (InProcess.cluster_view)."""
    if args.backend != "kubernetes" or args.clock != "real":
        return None
    from phalanx.cluster.feed import ClusterFeed
    from phalanx.cluster.sources import collections
    from phalanx.kube.connection import connection_of

    scheduler = servicer.scheduler
    # No collection while the first list is decoded and applied; the result is frozen, then collection
    # resumes (gc_tuning.pause_until_frozen; at most --dependency-timeout should the list never end).
    after_rebuild = pause_until_frozen(args.dependency_timeout) if freeze else None
    feed = ClusterFeed(
        scheduler,
        servicer.loop.lock,
        scheduler.queue,
        scheduler.binder,
        collections(connection_of(args)),
        scheduler_name=args.scheduler_name,
        reconcile_interval=args.reconcile_interval,
        linger=args.feed_linger,
        gang_hold=args.gang_hold,
        gated=gated,
        # The cluster as first listed joins what start-up froze (gc_tuning.freeze_heap): full collections
        # then walk only what changed since, not every pod and node the rebuild decoded.
        after_rebuild=after_rebuild,
        follower=follower,
    )
    if server is not None:
        server.monitor.add_check("cluster feed", feed.not_synced)
    if scheduler.popped_check is not None:
        scheduler.popped_check.attach(feed.mirror, feed.synced.is_set)
    return feed.start()


def duties_of(
    args: argparse.Namespace,
    servicer: SchedulerServicer,
    server: ServiceServer,
    *,
    gated: bool = False,
    freeze: bool = False,
    follower: Follower | None = None,
) -> SchedulingDuties:
    """What this replica runs when it schedules: the cluster feed (Kubernetes mode) and the loop (wall clock).
    `gated`: the feed lists at once and applies once opened (SchedulingDuties.open_feed, after recovery)."""
    return SchedulingDuties(
        servicer.loop,
        server.monitor,
        start_feed=lambda: start_feed(args, servicer, server, gated=gated, freeze=freeze, follower=follower),
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
        freeze: bool = False,
        follower: Follower | None = None,
    ) -> None:
        from phalanx.kube.connection import connection_of

        config = election_config(args)
        api = api_client if api_client is not None else connection_of(args)
        super().__init__(
            api,
            config,
            servicer.loop,
            server.monitor,
            lambda: duties_of(args, servicer, server, gated=True, freeze=freeze, follower=follower),
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


@dataclass
class Started:
    """A scheduler serving: what stops its duties (the Lease released, or the feed and loop halted) before
    its server stops, and the replica's Leadership under leader election."""

    server: ServiceServer
    on_stop: Callable[[], None]
    leadership: leader_election.Leadership | None = None

    def exit_if_lost(self) -> None:
        """After the stop: a replica that lost its Lease exits non-zero, to be restarted as a standby."""
        if self.leadership is not None and self.leadership.lost:
            raise SystemExit(
                f"phalanx-scheduler: leadership lost ({self.leadership.lost}); exiting to restart as a standby"
            )


def start(args: argparse.Namespace, in_process: InProcess | None = None) -> Started:
    """The scheduler built from its flags and serving: under leader election a campaigning replica (it
    schedules once it leads), else the feed synced and the loop running (main, and the combined layout,
    which passes its queue's and binder's servicers as `in_process`)."""
    elect = election_enabled(args)
    if elect:
        election_config(args)  # bad flags fail before anything starts
    metrics = serve_metrics_of(args, "scheduler")
    check_kubeconfig("scheduler", args)  # the feed and the Lease load it later, on their threads
    follower = in_process.cluster_view if in_process is not None else None
    dependencies = Dependencies(args, security_of(args), in_process=in_process is not None).start()
    server, servicer = built_or_exit(
        "scheduler", lambda: build(args, standby=elect, dependencies=dependencies, in_process=in_process)
    )
    if metrics is not None:
        metrics.registry.register(GangCollector(lambda: servicer.scheduler.gangs, servicer.lock))
        server.add_cleanup(metrics.stop)
    if elect:

        def on_lost(reason: str) -> None:  # through the graceful path: in-flight calls finish, then exit 1
            os.kill(os.getpid(), signal.SIGTERM)

        # The replica campaigns (loads its kubeconfig, asks for the Lease, claims the term) while the queue
        # and the binder start; it recovers and schedules once they serve, and serves health then, as before.
        leadership = Leadership(
            args, server, servicer, on_lost=on_lost, dependencies=dependencies, freeze=True, follower=follower
        ).start()
        from phalanx.cluster import feed  # noqa: F401  # what a takeover imports, while this thread waits

        if not dependencies.ready():
            leadership.stop()  # releases the Lease if it was won
            cannot_start(dependencies.failure)
        server.start()
        if metrics is not None:
            metrics.registry.register(LeaderCollector(leadership.config.name, leadership.is_leader))
        freeze_heap()  # started: what it holds now lives as long as the process
        return Started(server, leadership.stop, leadership)
    server.start()
    freeze_heap()  # started: what it holds now lives as long as the process
    duties = duties_of(args, servicer, server, freeze=True, follower=follower)
    duties.start_feed()
    duties.wait_synced()
    duties.start_loop()
    return Started(server, duties.halt)


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    exit_with_parent()
    setup_logging(args.log_level)
    setup_tracing("phalanx-scheduler")
    started = start(args)
    serve_until_signal(started.server, on_stop=started.on_stop)
    started.exit_if_lost()


if __name__ == "__main__":
    main()
