"""Counts the gRPC messages a service receives, per method, for the benchmark (off unless asked for).

With PHALANX_RPC_STATS_DIR set, a service's server counts every unary call and every request message of
a stream (a message on an open stream is one request/response round trip, as a unary call is), and on
SIGUSR1 writes `<dir>/<service>.json` = {"seq": n, "pid": ..., "calls": {method: count}}; `seq` grows by
one per dump, so a reader can tell a fresh dump from a stale one. Health checks are counted under their
own method name and left out of totals by the reader. Cost when on: one locked increment per message.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc

ENV_DIR = "PHALANX_RPC_STATS_DIR"
HEALTH_PREFIX = "/grpc.health.v1.Health/"


class CallCounter(grpc.ServerInterceptor):
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def _bump(self, method: str) -> None:
        with self._lock:
            self.counts[method] = self.counts.get(method, 0) + 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        handler = continuation(details)
        if handler is None:
            return None
        method = details.method
        if handler.unary_unary is not None:
            inner_uu = handler.unary_unary

            def unary(request: Any, context: grpc.ServicerContext) -> Any:
                self._bump(method)
                return inner_uu(request, context)

            return handler._replace(unary_unary=unary)
        if handler.stream_stream is not None:
            inner_ss = handler.stream_stream

            def stream(requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
                def counted() -> Iterator[Any]:
                    for r in requests:
                        self._bump(method)
                        yield r

                return inner_ss(counted(), context)

            return handler._replace(stream_stream=stream)
        return handler  # unary-stream / stream-unary: none in Phalanx's hot paths


def interceptors_from_env(service: str) -> list[grpc.ServerInterceptor]:
    """[] unless PHALANX_RPC_STATS_DIR is set; then a counter that dumps on SIGUSR1."""
    directory = os.environ.get(ENV_DIR, "")
    if not directory:
        return []
    counter = CallCounter()
    path = Path(directory) / f"{service}.json"
    seq = [0]

    def dump(_signum: int = 0, _frame: object = None) -> None:
        seq[0] += 1
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"seq": seq[0], "pid": os.getpid(), "calls": counter.snapshot()}))
        os.replace(tmp, path)

    try:
        signal.signal(signal.SIGUSR1, dump)
    except ValueError:  # not the main thread (an in-process test server): counting without dumps
        pass
    return [counter]


def total_calls(calls: dict[str, int]) -> int:
    return sum(n for m, n in calls.items() if not m.startswith(HEALTH_PREFIX))
