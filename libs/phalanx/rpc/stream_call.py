"""Request/response calls carried over one long-lived bidirectional gRPC stream.

Python gRPC spends most of a unary call's time setting the call up; on an open stream a round trip
costs a fraction of that (measured here: 0.26 ms against 0.55-0.9 ms). The hot paths (the scheduler's
pops and binds, the simulator's steps) use this; everything else stays unary.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

import grpc

Req = TypeVar("Req")
Resp = TypeVar("Resp")
_CLOSE = object()


def _ended(responses: object) -> bool:
    done = getattr(responses, "done", None)  # a gRPC call object; a plain iterator (tests) never ends early
    return bool(done()) if callable(done) else False


class StreamCaller(Generic[Req, Resp]):
    """`call(request)` sends on the stream and waits for the matching response. A stream that breaks
    during a call raises the RpcError once (the request may or may not have been handled) and is reopened
    on the next call; one the server ended between calls is reopened before sending (the servers are
    stateless per message)."""

    def __init__(self, open_stream: Callable[[Iterator[Req]], Iterator[Resp]]) -> None:
        self._open = open_stream
        self._lock = threading.Lock()
        self._requests: queue.SimpleQueue[object] | None = None
        self._responses: Iterator[Resp] | None = None

    def _ensure_open(self) -> tuple["queue.SimpleQueue[object]", Iterator[Resp]]:
        if self._responses is not None and _ended(self._responses):
            # The server ended the stream while it was idle (it restarted, or a certificate was renewed):
            # open a new one rather than fail a request that was never sent.
            self._reset()
        if self._requests is None or self._responses is None:
            requests: queue.SimpleQueue[object] = queue.SimpleQueue()

            def feed() -> Iterator[Req]:
                while True:
                    item = requests.get()
                    if item is _CLOSE:
                        return
                    yield item  # type: ignore[misc]

            self._requests, self._responses = requests, self._open(feed())
        return self._requests, self._responses

    def call(self, request: Req) -> Resp:
        with self._lock:
            requests, responses = self._ensure_open()
            requests.put(request)
            try:
                return next(responses)
            except grpc.RpcError:
                self._reset()
                raise
            except StopIteration:
                self._reset()
                raise grpc.RpcError("the stream was closed by the server") from None

    def _reset(self) -> None:
        if self._requests is not None:
            self._requests.put(_CLOSE)
        self._requests = self._responses = None

    def close(self) -> None:
        with self._lock:
            self._reset()


def serve_stream(
    handle: Callable[[Req, grpc.ServicerContext], Resp],
) -> Callable[[Iterator[Req], grpc.ServicerContext], Iterator[Resp]]:
    """Server side: answers each message of the stream with the unary handler."""

    def stream(requests: Iterator[Req], context: grpc.ServicerContext) -> Iterator[Resp]:
        for request in requests:
            yield handle(request, context)

    return stream
