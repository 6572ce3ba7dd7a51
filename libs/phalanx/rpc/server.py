"""Common service bootstrap: gRPC server, health checking, tracing, graceful shutdown on SIGTERM."""

from __future__ import annotations

import logging
import signal
import threading
from concurrent import futures
from typing import Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from phalanx.rpc import call_stats
from phalanx.rpc.health import HealthMonitor
from phalanx.rpc.interceptors import TracingServerInterceptor
from phalanx.telemetry.tracing import tracing_enabled

log = logging.getLogger(__name__)

# Messages carry whole gangs (10,000 pods at most in one call), well above gRPC's 4 MiB default. Measured:
# an AddRequest of 10,000 pods (gang and sim annotations, five resources, a selector, a toleration, a trace
# parent) is 5.4 MiB, and 15.4 MiB with a 1 KB last-applied-configuration annotation on every pod; 64 MiB
# keeps four times that headroom while bounding what one call can make a service allocate.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # A restarted peer is back within seconds; gRPC's default reconnect backoff grows to 120 s.
    ("grpc.max_reconnect_backoff_ms", 5000),
]


class ServiceServer:
    """A started gRPC server with the health service; `port` is the bound port (useful with port 0)."""

    def __init__(self, name: str, listen: str, register: Callable[[grpc.Server], None], workers: int = 8) -> None:
        self.name = name
        interceptors = [TracingServerInterceptor()] if tracing_enabled() else []
        interceptors += call_stats.interceptors_from_env(name)  # PHALANX_RPC_STATS_DIR: count calls (bench)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name),
                                  interceptors=interceptors, options=CHANNEL_OPTIONS)
        register(self.server)
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        # Loops and dependency checks register here before start(); see phalanx.rpc.health.
        self.monitor = HealthMonitor(self.health, f"phalanx.v1.{name.capitalize()}")
        self.stopping = threading.Event()  # set by stop(): background loops of the service end with it
        self.port = self.server.add_insecure_port(listen)
        if self.port == 0:
            raise RuntimeError(f"{name}: cannot listen on {listen}")
        host = listen.rsplit(":", 1)[0]
        self.address = f"{'127.0.0.1' if host in ('0.0.0.0', '[::]', '') else host}:{self.port}"

    def start(self) -> "ServiceServer":
        self.server.start()
        self.monitor.start()
        log.info("%s serving on %s", self.name, self.address)
        return self

    def stop(self, grace: float = 5.0) -> None:
        self.stopping.set()
        self.monitor.stop()
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()


def serve_until_signal(server: ServiceServer, on_stop: Callable[[], None] | None = None) -> None:
    """Blocks until SIGTERM or SIGINT, then lets in-flight calls finish before exiting."""
    stopped = threading.Event()

    def handle(signum: int, _frame: object) -> None:
        log.info("%s: signal %d, shutting down gracefully", server.name, signum)
        stopped.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    stopped.wait()
    if on_stop is not None:
        on_stop()
    server.stop()


def channel(address: str) -> grpc.Channel:
    from phalanx.rpc.interceptors import TracingClientInterceptor

    plain = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
    # With tracing off (OTEL_SDK_DISABLED=true), skip the interceptor's per-call cost altogether.
    return grpc.intercept_channel(plain, TracingClientInterceptor()) if tracing_enabled() else plain


def wait_healthy(address: str, timeout: float = 20.0) -> None:
    """Waits until the service at `address` reports SERVING."""
    import time

    deadline = time.monotonic() + timeout
    # A service that is still starting refuses the first connection; gRPC's default reconnect backoff (1 s,
    # growing) would then hold every later check back, so retry the connection at the polling pace.
    fast_retry = [("grpc.initial_reconnect_backoff_ms", 50), ("grpc.min_reconnect_backoff_ms", 50),
                  ("grpc.max_reconnect_backoff_ms", 250)]
    with grpc.insecure_channel(address, options=fast_retry) as ch:
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
