"""Request/response calls carried over one long-lived bidirectional gRPC stream.

Python gRPC spends most of a unary call's time setting the call up; on an open stream a round trip
costs a fraction of that (measured here: 0.26 ms against 0.55-0.9 ms). The hot paths (the scheduler's
pops, long polls included, its binds, its feed's adds and its status reports; the simulator's steps) use
this; everything else stays unary.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

import grpc

Req = TypeVar("Req")
Resp = TypeVar("Resp")
_CLOSE = object()


class _Deadlines:
    """Cancels stream calls that overrun their deadline, as a unary call's timeout would end it: one thread
    per process looks once a second, so a call pays a dict entry, not a timer of its own (a server that
    hangs, or has no thread left for the stream, must not block the scheduler for good)."""

    TICK = 1.0

    def __init__(self) -> None:
        self._calls: dict[int, tuple[float, object]] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, call: object, seconds: float) -> int:
        token = next(self._ids)
        with self._lock:
            self._calls[token] = (time.monotonic() + seconds, call)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="stream-deadlines", daemon=True)
                self._thread.start()
        return token

    def done(self, token: int) -> None:
        with self._lock:
            self._calls.pop(token, None)

    def _run(self) -> None:
        while True:
            time.sleep(self.TICK)
            now = time.monotonic()
            with self._lock:
                late = [(t, c) for t, (at, c) in self._calls.items() if at <= now]
                for t, _ in late:
                    del self._calls[t]
            for _, call in late:
                cancel = getattr(call, "cancel", None)
                if callable(cancel):
                    cancel()  # the caller's next() raises CANCELLED, and the stream is opened again


_deadlines = _Deadlines()


def _ended(responses: object) -> bool:
    done = getattr(responses, "done", None)  # a gRPC call object; a plain iterator (tests) never ends early
    return bool(done()) if callable(done) else False


class StreamCaller(Generic[Req, Resp]):
    """`call(request)` sends on the stream and waits for the matching response. A stream that breaks
    during a call raises the RpcError once (the request may or may not have been handled) and is reopened
    on the next call; one the server ended between calls is reopened before sending (the servers are
    stateless per message)."""

    def __init__(self, open_stream: Callable[[Iterator[Req]], Iterator[Resp]], timeout: float | None = None) -> None:
        self._open = open_stream
        self.timeout = timeout  # each call's, as a unary call's timeout (None: none)
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

    def call(self, request: Req, timeout: float | None = None) -> Resp:
        """`timeout`: this call's, instead of the caller's default; past it the stream is cancelled (the
        call raises CANCELLED) and opened again by the next call."""
        seconds = timeout if timeout is not None else self.timeout
        with self._lock:
            requests, responses = self._ensure_open()
            token = _deadlines.watch(responses, seconds) if seconds is not None else None
            requests.put(request)
            try:
                return next(responses)
            except grpc.RpcError:
                self._reset()
                raise
            except StopIteration:
                self._reset()
                raise grpc.RpcError("the stream was closed by the server") from None
            finally:
                if token is not None:
                    _deadlines.done(token)

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
