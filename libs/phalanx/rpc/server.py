"""Common service bootstrap: gRPC server, health checking, tracing, graceful shutdown on SIGTERM."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from phalanx.config import usage_error
from phalanx.lifecycle import wait_for_stop_signal
from phalanx.rpc import call_stats
from phalanx.rpc.health import HealthMonitor
from phalanx.rpc.interceptors import TracingServerInterceptor
from phalanx.security.authz import AuthorizationInterceptor, policy_for
from phalanx.security.tls import PLAINTEXT, Security, channel_credentials, is_loopback, server_credentials
from phalanx.telemetry.tracing import tracing_enabled

T = TypeVar("T")

log = logging.getLogger(__name__)

STOP_GRACE = 5.0  # seconds in-flight calls get to finish after a signal

# A request carries at most one gang's pods (10,000 at most, validation.MAX_ITEMS) or one batch of cluster
# events. Measured: an AddRequest of 10,000 pods (gang and sim annotations, five resources, a selector, a
# toleration, a trace parent) is 5.4 MiB. 16 MiB leaves three times that while bounding what one call can
# make a service allocate (gRPC refuses a larger message before parsing it: RESOURCE_EXHAUSTED). Answers
# (a ListGangs of a big cluster) may be larger.
MAX_REQUEST_BYTES = 16 * 1024 * 1024
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_REQUEST_BYTES),
    ("grpc.max_receive_message_length", MAX_RESPONSE_BYTES),
    # A restarted peer is back within seconds; gRPC's default reconnect backoff grows to 120 s.
    ("grpc.max_reconnect_backoff_ms", 5000),
]
SERVER_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
    ("grpc.max_send_message_length", MAX_RESPONSE_BYTES),
]


class ServiceServer:
    """A started gRPC server with the health service; `port` is the bound port (useful with port 0).

    With TLS (`security` holds certificate files) every call needs a client certificate from the
    installation's CA and passes the authorization table (phalanx.security.authz); the health service is
    then also served in plaintext on `health_listen`, alone, for kubelet probes, which cannot do TLS.
    Plaintext is accepted on loopback addresses only."""

    def __init__(
        self,
        name: str,
        listen: str,
        register: Callable[[grpc.Server], None],
        *,
        security: Security,
        health_listen: str = "",
        workers: int = 32,
        kubernetes: bool = False,
    ) -> None:
        """`kubernetes`: the service runs against the Kubernetes API server, whose callers' table is stricter
        (phalanx.security.authz.KUBERNETES_POLICY)."""
        self.name = name
        if security.plaintext and not is_loopback(listen):
            raise ValueError(
                f"{name}: --listen {listen}: plaintext gRPC is served on loopback addresses only "
                "(127.0.0.1, ::1); give certificates with --tls-dir for any other address"
            )
        interceptors: list[grpc.ServerInterceptor] = (
            [] if security.plaintext else [AuthorizationInterceptor(policy_for(kubernetes))]
        )
        if tracing_enabled():
            interceptors.append(TracingServerInterceptor())
        interceptors += call_stats.interceptors_from_env(name)  # PHALANX_RPC_STATS_DIR: count calls (bench)
        # An open stream holds one of these threads for its whole life (a scheduler keeps two open to the
        # queue and three to the binder, and a replica that led once keeps its own): with too few, unary
        # calls would wait behind idle streams. Threads are started only as calls need them.
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name),
            interceptors=interceptors,
            options=SERVER_OPTIONS,
        )
        register(self.server)
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        # Loops and dependency checks register here before start(); see phalanx.rpc.health.
        self.monitor = HealthMonitor(self.health, f"phalanx.v1.{name.capitalize()}")
        self.stopping = threading.Event()  # set by stop(): background loops of the service end with it
        # The service's servicer, for a caller in the same process (the combined layout; phalanx.rpc.local).
        self.servicer: object | None = None
        self._cleanups: list[Callable[[], None]] = []
        self._drains: list[Callable[[], None]] = []
        if security.files is None:
            self.port = _bound_port(lambda: self.server.add_insecure_port(listen), "--listen", listen)
        else:
            credentials = server_credentials(security.files)
            self.port = _bound_port(lambda: self.server.add_secure_port(listen, credentials), "--listen", listen)
        self.address = f"{_dial_host(listen)}:{self.port}"
        self.health_server: grpc.Server | None = None
        self.health_address = ""
        if health_listen:
            self.health_server = grpc.server(
                futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix=f"{name}-health"),
                options=[("grpc.max_receive_message_length", 4096)],
            )
            health_pb2_grpc.add_HealthServicer_to_server(self.health, self.health_server)
            health_server = self.health_server
            port = _bound_port(lambda: health_server.add_insecure_port(health_listen), "--health-listen", health_listen)
            self.health_address = f"{_dial_host(health_listen)}:{port}"

    def start(self) -> "ServiceServer":
        self.server.start()
        if self.health_server is not None:
            self.health_server.start()
        self.monitor.start()
        log.info("%s serving on %s", self.name, self.address)
        return self

    def stop(self, grace: float = STOP_GRACE) -> None:
        self.stopping.set()
        self.monitor.stop()
        self.health.enter_graceful_shutdown()
        if self.health_server is not None:
            self.health_server.stop(0)
        for drain in self._drains:
            drain()
        self.server.stop(grace).wait()
        for cleanup in self._cleanups:
            try:
                cleanup()
            except Exception as exc:  # stopping goes on: the process is ending anyway
                log.warning("%s: cleanup on stop failed: %s", self.name, exc)

    def add_drain(self, fn: Callable[[], None]) -> None:
        """Runs `fn` as the stop begins, before in-flight calls get their grace: it ends calls that would
        otherwise wait out the grace (the queue's long polls). The interpreter's exit joins the server's
        threads, so a handler still waiting would keep the process alive after the stop."""
        self._drains.append(fn)

    def add_cleanup(self, fn: Callable[[], None]) -> None:
        """Runs `fn` after the server stopped (threads of a backend, connections)."""
        self._cleanups.append(fn)


class ListenError(Exception):
    """An address the service was told to listen on and cannot: the message names the flag and the address."""


def _bound_port(add_port: Callable[[], int], flag: str, address: str) -> int:
    """grpc raises RuntimeError (older releases returned 0) when it cannot bind, with no reason given; the
    usual ones are said instead."""
    try:
        port = add_port()
    except RuntimeError:
        port = 0
    if port == 0:
        raise ListenError(
            f"{flag} {address}: cannot listen there (the port is taken, or the host is not an address of this machine)"
        )
    return port


def built_or_exit(service: str, build: Callable[[], T]) -> T:
    """build() of a service's gRPC server; a --listen or --health-listen address it cannot bind ends the
    service with one line naming the flag and the address (as a busy --metrics-listen does)."""
    try:
        return build()
    except ListenError as exc:
        usage_error(service, str(exc))


def _dial_host(listen: str) -> str:
    host = listen.rsplit(":", 1)[0]
    return "127.0.0.1" if host in ("0.0.0.0", "[::]", "") else host


def serve_until_signal(*servers: ServiceServer, on_stop: Callable[[], None] | None = None) -> None:
    """Blocks until SIGTERM or SIGINT, then runs `on_stop` and stops `servers` in the order given, each
    letting its in-flight calls finish. Several servers share one process in the combined layout
    (phalanx_combined): the scheduler's first, then the binder it calls, then the queue."""
    names = "+".join(s.name for s in servers)
    signum = wait_for_stop_signal()
    log.info("%s: signal %d, shutting down gracefully", names, signum)
    # Each stop may use its grace in turn; the bound grows with them (a kubelet's default 30 s allows three).
    bound = STOP_GRACE * len(servers) + 5.0
    threading.Thread(target=_exit_anyway, args=(names, bound), daemon=True).start()
    if on_stop is not None:
        on_stop()
    for server in servers:
        server.stop(STOP_GRACE)


def _exit_anyway(name: str, seconds: float) -> None:
    """Ends the process `seconds` after the signal should anything still run then (a handler that does not
    end blocks the interpreter's exit, which joins the server's threads): a stop is bounded, as the
    orchestrator's kill after its grace period would bound it."""
    time.sleep(seconds)
    log.error("%s: still running %.0f s after the signal; exiting without waiting further", name, seconds)
    os._exit(1)


def dial(address: str, security: Security, peer: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
    """A bare channel with `options`: plaintext with PLAINTEXT, else this process's certificate presented
    and the server's checked against `peer` (its identity, as its name whatever the address)."""
    if security.files is None:
        return grpc.insecure_channel(address, options=list(options))
    return grpc.secure_channel(
        address, channel_credentials(security.files), options=[*options, ("grpc.ssl_target_name_override", peer)]
    )


def channel(address: str, security: Security, peer: str) -> grpc.Channel:
    """The services' channel to the one whose certificate names `peer` (see dial), with the message size
    limits and tracing."""
    from phalanx.rpc.interceptors import TracingClientInterceptor

    plain = dial(address, security, peer, CHANNEL_OPTIONS)
    # With tracing off (OTEL_SDK_DISABLED=true), skip the interceptor's per-call cost altogether.
    return grpc.intercept_channel(plain, TracingClientInterceptor()) if tracing_enabled() else plain


def wait_healthy(address: str, timeout: float = 20.0, security: Security = PLAINTEXT, peer: str = "") -> None:
    """Waits until the service at `address` reports SERVING (over TLS as `security` says, to `peer`)."""
    deadline = time.monotonic() + timeout
    # A service that is still starting refuses the first connection; gRPC's default reconnect backoff (1 s,
    # growing) would then hold every later check back, so retry the connection at the polling pace.
    fast_retry = [
        ("grpc.initial_reconnect_backoff_ms", 50),
        ("grpc.min_reconnect_backoff_ms", 50),
        ("grpc.max_reconnect_backoff_ms", 250),
    ]
    with dial(address, security, peer, fast_retry) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        while True:
            try:
                resp = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1.0)
                if resp.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"service at {address} not healthy after {timeout:g}s")
            time.sleep(0.05)
