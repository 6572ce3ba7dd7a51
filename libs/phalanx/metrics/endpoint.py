"""The /metrics HTTP port of a service: plain HTTP, read-only, Prometheus text (or OpenMetrics) format.

It serves nothing but the registry's current values (GET or HEAD; prometheus_client answers any other
method with 405), so no TLS or authorization is asked of the scraper; the Helm chart's NetworkPolicy
(metrics.from) limits who can reach it.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import disable_created_metrics, start_http_server
from prometheus_client.registry import CollectorRegistry

log = logging.getLogger(__name__)

DISABLED = ("", "off", "none", "false", "0")

# Counters would each get a `_created` series (prometheus_client's default); kube-scheduler has none.
disable_created_metrics()


class MetricsListenError(ValueError):
    pass


def parse_listen(listen: str) -> tuple[str, int] | None:
    """'host:port' (an IPv6 host in brackets) -> (host, port); None when metrics are off."""
    raw = listen.strip()
    if raw.lower() in DISABLED:
        return None
    host, sep, port = raw.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise MetricsListenError(f"expected host:port (e.g. 0.0.0.0:9091), or off, got {listen!r}")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


@dataclass
class MetricsEndpoint:
    server: WSGIServer
    thread: threading.Thread
    address: str  # host:port it serves on (the port chosen when 0 was asked)
    registry: CollectorRegistry  # scrape-time collectors of objects made later register here

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5.0)


def serve_metrics(listen: str, registry: CollectorRegistry) -> MetricsEndpoint | None:
    """Serves `registry` on `listen` from a daemon thread; None when `listen` turns metrics off. Raises
    MetricsListenError (naming the address) when it is malformed or cannot be bound."""
    parsed = parse_listen(listen)
    if parsed is None:
        return None
    host, port = parsed
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise MetricsListenError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    bound = server.server_address[1]
    shown = f"[{host}]" if ":" in host else host
    endpoint = MetricsEndpoint(server, thread, f"{shown}:{bound}", registry)
    log.info("metrics on http://%s/metrics", endpoint.address)
    return endpoint
