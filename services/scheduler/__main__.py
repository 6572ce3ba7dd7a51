"""phalanx-scheduler: filters and scores pods, accumulates gangs in Redis, hands satisfied gangs to the binder.

Several replicas may run (--leader-elect, on by default against Kubernetes): they elect a leader on a Lease
(libs/phalanx/cluster/leader.py); only the leader runs the cluster feed and the scheduling loop, and its
writes to Redis carry its fencing term. A standby serves health and waits; it takes over when the leader's
Lease expires (or is released), and a leader that loses its Lease exits.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import grpc

from phalanx.clock import Clock
from phalanx.cluster.leader import (
    DEFAULT_LEASE_DURATION,
    DEFAULT_RENEW_DEADLINE,
    DEFAULT_RETRY_PERIOD,
    ElectionConfig,
    LeaderElector,
    claim_fencing_term,
    new_identity,
    pod_name,
    pod_namespace,
)
from phalanx.config import (
    bool_arg,
    common_parser,
    env,
    health_listen_of,
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
from phalanx.framework.profile import ProfileError, check_plugin_names, load_profile
from phalanx.lifecycle import exit_with_parent
from phalanx.metrics.collectors import GangCollector, LeaderCollector
from phalanx.model.keys import DEFAULT_SCHEDULER_NAME
from phalanx.plugins import default_registries
from phalanx.rpc.clients import BinderClient, QueueClient
from phalanx.rpc.health import Heartbeat, redis_check
from phalanx.rpc.server import ServiceServer, rpc_failure, serve_until_signal, wait_healthy
from phalanx.scheduling.scheduler import GangScheduler, SchedulerSettings
from phalanx.security import tls
from phalanx.security.tls import Security
from phalanx.state.keys import Keys
from phalanx.state.store import FencedOut, StateStore
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


def build(args: argparse.Namespace, *, standby: bool = False) -> tuple[ServiceServer, SchedulerServicer]:
    """The scheduler and its server. `standby`: a replica under leader election, which must not touch the
    state before it leads: no recover() (which would also hand the leader's in-flight pods back to the
    queue); Leadership does it on takeover."""
    framework = framework_of(args.profile)  # a bad profile ends the service before it waits for anything
    clock = Clock(args.clock == "virtual")
    security = security_of(args)
    store = StateStore(redis_client(args), Keys(args.redis_prefix))
    wait_for(args.queue, "--queue", "queue", args.dependency_timeout, security, tls.QUEUE)
    wait_for(args.binder, "--binder", "binder", args.dependency_timeout, security, tls.BINDER)
    consumer = SHARED_CONSUMER if election_enabled(args) else ""
    queue, binder = QueueClient(args.queue, security, consumer=consumer), BinderClient(args.binder, security)
    settings = SchedulerSettings(default_wait_seconds=args.default_wait, pop_batch=args.pop_batch,
                                 profile=args.scheduler_name)
    scheduler = GangScheduler(store, queue, binder, framework, settings)
    if not standby:
        try:
            scheduler.recover(clock.now(0.0))
        except grpc.RpcError as exc:  # the queue went away since it answered its health check
            cannot_start(f"--queue {args.queue}: the queue did not answer: {rpc_failure(exc)}")
        except Exception as exc:
            unreachable = redis_unreachable(exc, store.redis)
            if not unreachable:
                raise
            cannot_start(f"--redis-url: {unreachable}")
    # In Kubernetes mode the API server's watch is the only source of cluster state: the RPCs that feed
    # it (the simulator's) are refused.
    servicer = SchedulerServicer(scheduler, queue, clock, simulated=args.backend != "kubernetes")
    server = ServiceServer("scheduler", args.listen,
                           lambda s: scheduler_pb2_grpc.add_SchedulerServicer_to_server(servicer, s),
                           security=security, health_listen=health_listen_of(args, "scheduler"))
    server.monitor.add_check("redis", redis_check(store.redis))
    server.monitor.add_check("scheduling", servicer.step_error)
    return server, servicer


def framework_of(path: str | None) -> Framework:
    """The profile's framework; a profile that cannot be used ends the service with one line naming the
    file and the field (exit status 2)."""
    filters, scores = default_registries()
    try:
        profile = load_profile(path)
        check_plugin_names(profile, path or "", filters.names(), scores.names())
    except ProfileError as exc:
        usage_error("scheduler", f"--profile {exc.path}: {exc.where()}")
    return Framework(profile, (filters, scores))


def wait_for(address: str, flag: str, what: str, timeout: float, security: Security, peer: str) -> None:
    """Waits for a service the scheduler needs; ends the scheduler with one line naming it if it never serves."""
    try:
        wait_healthy(address, timeout=timeout, security=security, peer=peer)
    except TimeoutError:
        cannot_start(f"{flag} {address}: the {what} is not serving (no healthy answer within {timeout:g}s; "
                     "--dependency-timeout)")


def cannot_start(reason: str) -> NoReturn:
    raise SystemExit(f"phalanx-scheduler: {reason}")


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
    p.add_argument("--dependency-timeout", type=float, default=60.0,
                   help="seconds to wait at start for the queue and the binder to serve before giving up")
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
    g = p.add_argument_group("leader election", "several replicas: one leads (schedules), the others wait "
                             "(kube-scheduler's flags and defaults)")
    g.add_argument("--leader-elect", type=bool_arg, nargs="?", const=True, default=opt_bool(env("LEADER_ELECT", "")),
                   help="elect a leader on a coordination.k8s.io Lease before scheduling; default: true with "
                        "--backend kubernetes and --clock real (env PHALANX_LEADER_ELECT)")
    g.add_argument("--leader-elect-lease-name", default=env("LEADER_ELECT_LEASE_NAME", ""),
                   help="the Lease's name; default: <scheduler-name>-scheduler, i.e. phalanx-scheduler "
                        "(env PHALANX_LEADER_ELECT_LEASE_NAME)")
    g.add_argument("--leader-elect-namespace", default=env("LEADER_ELECT_NAMESPACE", ""),
                   help="the Lease's namespace; default: POD_NAMESPACE, else the service account's namespace, "
                        "else default (env PHALANX_LEADER_ELECT_NAMESPACE)")
    g.add_argument("--leader-elect-identity", default=env("LEADER_ELECT_IDENTITY", ""),
                   help="this replica's name in the Lease (a random suffix per process is appended); default: "
                        "POD_NAME, else the host name. Replicas need distinct names (env PHALANX_LEADER_ELECT_IDENTITY)")
    g.add_argument("--leader-elect-lease-duration", type=float,
                   default=float(env("LEADER_ELECT_LEASE_DURATION", str(DEFAULT_LEASE_DURATION))),
                   help="seconds a standby waits, after the Lease last changed, before taking it over")
    g.add_argument("--leader-elect-renew-deadline", type=float,
                   default=float(env("LEADER_ELECT_RENEW_DEADLINE", str(DEFAULT_RENEW_DEADLINE))),
                   help="seconds the leader keeps trying to renew before it gives up leadership (and exits)")
    g.add_argument("--leader-elect-retry-period", type=float,
                   default=float(env("LEADER_ELECT_RETRY_PERIOD", str(DEFAULT_RETRY_PERIOD))),
                   help="seconds between attempts to acquire or renew the Lease")
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


class Scheduling:
    """What the scheduling replica runs: the cluster feed (Kubernetes mode) and the scheduling loop (wall
    clock)."""

    def __init__(self, args: argparse.Namespace, servicer: SchedulerServicer, server: ServiceServer) -> None:
        self.args = args
        self.servicer = servicer
        self.server = server
        self.feed: ClusterFeed | None = None
        self.stop_event = threading.Event()
        self.loop: threading.Thread | None = None

    def start_feed(self) -> None:
        self.feed = start_feed(self.args, self.servicer, self.server)

    def wait_synced(self, keep_waiting: Callable[[], bool] = lambda: True) -> None:
        """The rebuild comes before scheduling: waits for the feed's first batch (at most
        --dependency-timeout, and only while `keep_waiting()`)."""
        if self.feed is None:
            return
        deadline = time.monotonic() + self.args.dependency_timeout
        while not self.feed.wait_synced(0.2):
            if not keep_waiting():
                return
            if time.monotonic() > deadline:
                log.warning("the cluster feed has not synced after %gs; scheduling anyway", self.args.dependency_timeout)
                return

    def start_loop(self) -> None:
        if self.args.clock != "real" or self.stop_event.is_set():
            return
        beat = self.server.monitor.add_heartbeat(Heartbeat("scheduling", self.args.liveness_timeout))
        self.loop = threading.Thread(target=self.servicer.run_forever, args=(self.stop_event,), kwargs={"beat": beat},
                                     name="schedule-loop", daemon=True)
        self.loop.start()

    def signal_stop(self) -> None:
        """Stops the loop and the feed at their next check, without waiting (safe on their own threads)."""
        self.stop_event.set()
        if self.feed is not None:
            self.feed.stop_event.set()

    def halt(self, timeout: float = 10.0) -> None:
        """Stops both and waits for them (not from their own threads)."""
        self.signal_stop()
        if self.feed is not None:
            self.feed.stop()
        if self.loop is not None:
            self.loop.join(timeout)


class Leadership:
    """One replica under leader election: standby (serving health) until it wins the Lease; then it claims
    the fencing term in Redis, rebuilds its memory from Redis (recover), starts the cluster feed (a full
    list of the API server) and, once it has synced, the scheduling loop. Losing the Lease, or a write
    refused as fenced out, stops the loop and the feed at once and calls `on_lost(reason)` (main: the process
    exits, as kube-scheduler does, and restarts as a standby). A graceful `stop` releases the Lease."""

    def __init__(self, args: argparse.Namespace, server: ServiceServer, servicer: SchedulerServicer, *,
                 api_client: Any = None, on_lost: Callable[[str], None] | None = None) -> None:
        from kubernetes import client

        from phalanx.cluster.client import api_client as make_api_client

        self.args = args
        self.server = server
        self.servicer = servicer
        self.store = servicer.scheduler.store
        self.on_lost = on_lost
        self.config = election_config(args)
        api = client.CoordinationV1Api(api_client if api_client is not None else make_api_client(args.kubeconfig))
        beat = server.monitor.add_heartbeat(Heartbeat("leader election", max(60.0, 4 * self.config.lease_duration)))
        self.elector = LeaderElector(api, self.config, on_started_leading=self._lead,
                                     on_stopped_leading=self._lose, on_tick=beat.beat)
        self.store.on_fenced = lambda exc: self._lose(str(exc))  # "fenced out: ..."
        self._stop = threading.Event()  # ends the elector's loop
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.scheduling: Scheduling | None = None
        self.closed = False  # stopping or lost: nothing starts any more
        self.lost = ""
        self.scheduling_since: float | None = None  # monotonic time the loop started (takeover measurements)
        servicer.standby = self.standby_reason  # a standby's ListGangs says so instead of an empty list

    @property
    def identity(self) -> str:
        return self.config.identity

    def start(self) -> Leadership:
        self._thread = self.elector.start(self._stop)
        return self

    def is_leader(self) -> bool:
        return self.elector.is_leader() and not self.closed

    def standby_reason(self) -> str:
        return "" if self.is_leader() else f"scheduler replica {self.identity} is a standby; the leader holds the gangs"

    # -- taking over -------------------------------------------------------------------------------------
    def _lead(self, term: int) -> None:
        claimed = self._retry(lambda: claim_fencing_term(self.elector, self.store), "claiming the fencing term")
        if claimed is None:
            return
        self.store.term = claimed
        log.info("leader election: %s took over with fencing term %d; recovering from Redis", self.identity, claimed)
        if self._retry(self._recover, "recovering from Redis") is None:
            return
        with self._lock:
            if self.closed:
                return
            self.scheduling = scheduling = Scheduling(self.args, self.servicer, self.server)
            scheduling.start_feed()
        scheduling.wait_synced(lambda: not self.closed)
        with self._lock:
            if self.closed:
                return
            scheduling.start_loop()
            self.scheduling_since = time.monotonic()
        log.info("leader election: %s is scheduling", self.identity)

    def _recover(self) -> bool:
        with self.servicer.lock:
            self.servicer.scheduler.recover(self.servicer.clock.now())
        return True

    def _retry(self, fn: Callable[[], Any], what: str) -> Any:
        """fn() until it succeeds; None once leadership is lost or the replica stops."""
        while not self.closed:
            try:
                return fn()
            except FencedOut as exc:
                self._lose(str(exc))
                return None
            except Exception as exc:
                if not self.elector.leading.is_set():
                    return None
                log.warning("leader election: %s failed (%s); retrying", what, str(exc).splitlines()[0][:200] or exc)
                self._stop.wait(1.0)
        return None

    # -- giving up -----------------------------------------------------------------------------------------
    def _lose(self, reason: str) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self.lost = reason or "leadership lost"
            self.store.depose(self.lost)  # every later write fails here, before Redis
            scheduling = self.scheduling
        self._stop.set()
        if scheduling is not None:
            scheduling.signal_stop()
        log.error("leader election: %s steps down: %s", self.identity, self.lost)
        threading.Thread(target=self._finish_loss, args=(scheduling,), name="step-down", daemon=True).start()

    def _finish_loss(self, scheduling: Scheduling | None) -> None:
        if scheduling is not None:
            scheduling.halt()
        if self.on_lost is not None:
            self.on_lost(self.lost)

    def stop(self) -> None:
        """A graceful stop (SIGTERM): scheduling stops first, then the Lease is released so a standby takes
        over within a retry period."""
        with self._lock:
            already = self.closed
            self.closed = True
            scheduling = self.scheduling
        self._stop.set()
        if scheduling is not None:
            scheduling.halt()  # the step under way finishes
        self.store.depose(self.lost or "shut down")
        if self._thread is not None:
            self._thread.join(self.config.renew_deadline)
        if not already:
            self.elector.release()

    def abandon(self) -> None:
        """Stops everything without releasing the Lease: what a crashed replica leaves behind (tests)."""
        with self._lock:
            self.closed = True
            self.store.depose("abandoned")
            scheduling = self.scheduling
        self._stop.set()
        if scheduling is not None:
            scheduling.halt()


def election_config(args: argparse.Namespace) -> ElectionConfig:
    config = ElectionConfig(
        namespace=args.leader_elect_namespace or pod_namespace(),
        name=args.leader_elect_lease_name or f"{args.scheduler_name}-scheduler",
        identity=new_identity(args.leader_elect_identity or pod_name()),
        lease_duration=args.leader_elect_lease_duration, renew_deadline=args.leader_elect_renew_deadline,
        retry_period=args.leader_elect_retry_period)
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
    server, servicer = build(args, standby=elect)
    if metrics is not None:
        metrics.registry.register(GangCollector(lambda: servicer.scheduler.gangs, servicer.lock))
        server.add_cleanup(metrics.stop)
    server.start()
    if elect:
        def on_lost(reason: str) -> None:  # through the graceful path: in-flight calls finish, then exit 1
            os.kill(os.getpid(), signal.SIGTERM)

        leadership = Leadership(args, server, servicer, on_lost=on_lost).start()
        if metrics is not None:
            metrics.registry.register(LeaderCollector(leadership.config.name, leadership.is_leader))
        serve_until_signal(server, on_stop=leadership.stop)
        if leadership.lost:
            raise SystemExit(f"phalanx-scheduler: leadership lost ({leadership.lost}); exiting to restart as a standby")
        return
    scheduling = Scheduling(args, servicer, server)
    scheduling.start_feed()
    scheduling.wait_synced()
    scheduling.start_loop()
    serve_until_signal(server, on_stop=scheduling.halt)


if __name__ == "__main__":
    main()
