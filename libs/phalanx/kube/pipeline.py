"""HTTP/1.1 pipelining to the API server: the requests waiting at one moment go out in one TLS write, and
their answers are read back in order.

Why: a write through the kubernetes client (urllib3, http.client) costs its caller 0.45-0.6 ms of CPU on
this project's 2-core VM, most of it in the TLS write of the headers, the TLS write of the body and the TLS
read of the answer (system calls and the loopback's TCP work, charged to the sender); the same requests
pipelined 50 at a time cost 0.09 ms each (hack/README.md: request cost). The binder makes 2-3 writes per
bound pod (the binding, its Event, a share of its PodGroup's status), so this is most of its CPU.

Go's net/http server (kube-apiserver's) reads a connection's requests one after the other and answers them
in order, so pipelining needs nothing from the server. A connection takes a batch when its previous batch is
answered, and the batch holds what callers handed in meanwhile: under load it grows, idle it is one request
(no added wait). Every connection is driven by one thread (kube/io_loop.py), shared by the pipelines of a
backend.

Failure: a connection that breaks or times out fails the requests it had not answered with an OSError
(`transient` for the binder, which retries). A request unanswered because the connection was found closed
(or broke on the write) before any answer of its batch came is sent once more on a new connection: the
server had not answered it, and every write the binder makes is safe to repeat (a binding repeated is a 409
the binder reads back, an Event's name is fixed when it is made, a merge patch is idempotent).
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from phalanx.kube.http_reply import Reply, take_reply
from phalanx.kube.io_loop import Channel, IoLoop

__all__ = ["JSON", "MAX_BATCH", "Pipeline", "Reply", "Request", "supported"]

JSON = "application/json"
MAX_BATCH = 64  # requests in one write at most: ~100 ms of the server's serial work
# A service-account token is rotated an hour or so before it expires, and a kubeconfig's exec credential is
# refreshed by its hook once expired: a second's delay in noticing either is harmless.
TOKEN_RECHECK_S = 1.0

Item = tuple["Request", "Future[Reply]", int]  # the request, its caller's future, times sent again


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # with its query, already quoted
    body: bytes | None = None
    content_type: str = JSON


class _Closed(OSError):
    """The server closed the connection before answering."""


def supported(configuration: Any) -> str:
    """Why `configuration` cannot be pipelined ("" if it can): a proxy is not spoken here."""
    if getattr(configuration, "proxy", None):
        return "an HTTP proxy is configured"
    scheme = urlsplit(str(configuration.host)).scheme
    if scheme not in ("http", "https"):
        return f"unknown scheme {scheme!r} in {configuration.host}"
    return ""


class Pipeline:
    """Up to `connections` keep-alive connections to the API server of `configuration` (a
    kube.connection.KubeConnection: host, TLS files, verify_ssl, tls_server_name, and its Authorization, asked
    of it again at a batch once `token_recheck` seconds have passed, so a refreshed token is used within that
    time; asking can cost: through the kubernetes client's loader the refresh hook copies the whole
    configuration again, host and proxy lookup included), driven by `loop` (one of its own if None)."""

    def __init__(
        self,
        configuration: Any,
        *,
        connections: int = 4,
        max_batch: int = MAX_BATCH,
        timeout: float = 15.0,
        name: str = "k8s-pipe",
        token_recheck: float = TOKEN_RECHECK_S,
        spread: bool = False,
        loop: IoLoop | None = None,
    ) -> None:
        why = supported(configuration)
        if why:
            raise ValueError(f"cannot pipeline to the API server: {why}")
        self.configuration = configuration
        self.name = name
        self.timeout = timeout
        self.max_batch = max(1, max_batch)
        self.connections = max(1, connections)
        self.spread = spread
        self.token_recheck = token_recheck
        self._auth = b""
        self._auth_due = float("-inf")  # monotonic time the token is asked for again
        url = urlsplit(str(configuration.host))
        self._tls = url.scheme == "https"
        self._host = url.hostname or "localhost"
        self._port = url.port or (443 if self._tls else 80)
        self._prefix = url.path.rstrip("/")
        self._host_header = url.netloc.encode()
        self._context = self._ssl_context() if self._tls else None
        self._queue: deque[Item] = deque()
        self._channels: list[Channel] = []
        self._busy = 0  # channels with a batch not yet answered (the loop's thread keeps it)
        self._closed = False
        self._pending = 0
        self._idle = threading.Condition()
        self.batches = self.requests = 0  # counters for tests and benchmarks
        self._own_loop = loop is None
        self._loop = loop or IoLoop(f"{name}-io")
        self._loop.add(self)

    # -- callers -------------------------------------------------------------------------------------------
    def submit(self, request: Request) -> Future[Reply]:
        fut: Future[Reply] = Future()
        if self._closed:
            fut.set_exception(OSError(f"{self.name}: the API pipeline is closed"))
            return fut
        with self._idle:
            self._pending += 1
        fut.add_done_callback(self._done)
        self._queue.append((request, fut, 0))
        loop = self._loop
        # A wake-up only when the loop sleeps and a connection could take this now; otherwise the loop sees
        # it at its next turn (it is awake, or a connection freeing up wakes it).
        if loop.sleeping and self._busy < self.connections and not loop.on_loop():
            loop.wake()
        return fut

    def call(self, request: Request) -> Reply:
        """Sends `request` and waits for its answer (the connection's timeout bounds the wait)."""
        if self._loop.on_loop():
            raise RuntimeError(f"{self.name}: a blocking call on the API I/O loop's own thread would never return")
        return self.submit(request).result(timeout=self.timeout * 2 + 5)

    def flush(self, timeout: float = 10.0) -> bool:
        """Waits until every request submitted so far is answered or failed."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def close(self) -> None:
        """Sends what was handed in (up to 5 s), then closes the connections."""
        self._closed = True
        self.flush(5.0)
        done = threading.Event()

        def shut() -> None:
            self._loop.remove(self)
            for ch in list(self._channels):
                self._drop(ch)
            self._fail(list(self._queue), OSError(f"{self.name}: the API pipeline is closed"))
            self._queue.clear()
            done.set()

        self._loop.call(shut)
        done.wait(5.0)
        if self._own_loop:
            self._loop.stop()

    def _done(self, _fut: Future[Reply]) -> None:
        with self._idle:
            self._pending -= 1
            if not self._pending:
                self._idle.notify_all()

    # -- the loop's side (kube/io_loop.py Lane) ------------------------------------------------------------
    def sendable(self) -> bool:
        return bool(self._queue) and self._busy < self.connections

    def waiting(self) -> bool:
        return self._busy > 0

    def dispatch(self) -> None:
        while self._queue:
            ch = next((c for c in self._channels if not c.inflight), None)
            if ch is None:
                if len(self._channels) >= self.connections:
                    return  # every connection busy: the queue waits for an answer
                ch = self._open()
                if ch is None:
                    continue  # could not connect: that batch has failed
            batch = self._take(self._batch_limit())
            if batch:
                self._write(ch, batch)

    def ready(self, ch: Channel, writable: bool) -> None:
        if writable or ch.out:
            self._flush_out(ch)
            if ch.closed:
                return
        try:
            eof = ch.read_some()
        except OSError as exc:
            self._broken(ch, exc)
            return
        try:
            while ch.inflight and (got := take_reply(ch.buf, eof=eof)) is not None:
                reply, keep = got
                _req, fut, _n = ch.inflight.popleft()
                ch.answered += 1
                fut.set_result(reply)
                if not keep:  # "Connection: close": what follows was not read by the server
                    self._again(list(ch.inflight), None)
                    ch.inflight.clear()
                    self._drop(ch)
                    return
        except Exception as exc:  # a garbled answer: the connection is out of step
            self._fail(list(ch.inflight), OSError(f"unreadable answer from the API server: {exc}"))
            ch.inflight.clear()
            self._drop(ch)
            return
        if eof or (ch.buf and not ch.inflight):  # ended, or bytes nobody asked for (out of step)
            if ch.inflight:
                self._broken(ch, _Closed("the API server closed the connection"))
            else:
                self._drop(ch)
            return
        if ch.inflight:
            ch.deadline = time.monotonic() + self.timeout  # the answers are coming: the wait starts again
        else:
            ch.deadline = float("inf")
            self._busy -= 1

    def expire(self, now: float) -> None:
        for ch in [c for c in self._channels if c.inflight and c.deadline <= now]:
            self._fail(list(ch.inflight), TimeoutError(f"no answer from the API server in {self.timeout:g} s"))
            ch.inflight.clear()
            self._drop(ch)

    # -- on the loop's thread ------------------------------------------------------------------------------
    def _batch_limit(self) -> int:
        """How many requests a connection takes in one write. Spread: what is waiting, shared out over the
        connections, at most max_batch; so a gang's few bindings go out on as many connections, answered side
        by side instead of one after the other, while a burst still goes max_batch to a write."""
        if not self.spread:
            return self.max_batch
        return max(1, min(self.max_batch, -(-len(self._queue) // self.connections)))

    def _take(self, limit: int) -> list[Item]:
        batch: list[Item] = []
        while self._queue and len(batch) < limit:
            item = self._queue.popleft()
            if item[2] or item[1].set_running_or_notify_cancel():  # one sent again is running already
                batch.append(item)
        return batch

    def _write(self, ch: Channel, batch: list[Item]) -> None:
        self.batches += 1
        self.requests += len(batch)
        try:
            auth = self._authorization()
        except Exception as exc:  # the credential hook failed: these requests cannot be sent
            self._fail(batch, OSError(f"no credentials for the API server: {exc}"))
            return
        ch.out += b"".join(self._encode(r, auth) for r, _, _ in batch)
        ch.inflight.extend(batch)
        ch.answered = 0
        ch.deadline = time.monotonic() + self.timeout
        self._busy += 1
        self._flush_out(ch)

    def _flush_out(self, ch: Channel) -> None:
        try:
            ch.write_some()
        except OSError as exc:
            self._broken(ch, exc)
            return
        self._loop.want_write(ch, bool(ch.out))

    def _broken(self, ch: Channel, exc: OSError) -> None:
        """The connection failed: a batch none of whose answers came is sent again once (the server answered
        none of it), the rest of a batch partly answered fails (the server may have taken it)."""
        items = list(ch.inflight)
        ch.inflight.clear()
        if ch.answered == 0:
            self._again(items, exc)
        else:
            self._fail(items, exc)
        self._drop(ch)

    def _again(self, items: list[Item], exc: Exception | None) -> None:
        retry = []
        for req, fut, tries in items:
            if tries >= 1:
                fut.set_exception(exc or _Closed("the API server closed the connection"))
            else:
                retry.append((req, fut, tries + 1))
        self._queue.extendleft(reversed(retry))  # first in the queue, as they were first sent

    @staticmethod
    def _fail(items: list[Item], exc: Exception) -> None:
        for _, fut, _n in items:
            if not fut.done():
                fut.set_exception(exc)

    def _drop(self, ch: Channel) -> None:
        if ch in self._channels:
            self._channels.remove(ch)
            if ch.deadline != float("inf"):  # a deadline: counted busy (its inflight may be cleared already)
                self._busy -= 1
        ch.deadline = float("inf")
        self._loop.forget(ch)

    def _open(self) -> Channel | None:
        """A new connection, or None with the next batch failed (the reason it could not connect)."""
        try:
            ch = Channel(self._connect(), self)
        except OSError as exc:
            self._fail(self._take(self._batch_limit()), exc)
            return None
        self._channels.append(ch)
        self._loop.watch(ch)
        return ch

    def _encode(self, r: Request, auth: bytes) -> bytes:
        lines = [
            f"{r.method} {self._prefix}{r.path} HTTP/1.1".encode(),
            b"Host: " + self._host_header,
            b"Accept: application/json",
            b"User-Agent: phalanx",
        ]
        if auth:
            lines.append(b"Authorization: " + auth)
        if r.body is not None:
            lines.append(f"Content-Type: {r.content_type}".encode())
            lines.append(b"Content-Length: %d" % len(r.body))
        elif r.method in ("POST", "PUT", "PATCH"):
            lines.append(b"Content-Length: 0")
        return b"\r\n".join(lines) + b"\r\n\r\n" + (r.body or b"")

    def _authorization(self) -> bytes:
        now = time.monotonic()
        if now >= self._auth_due:
            self._auth = self.configuration.authorization().encode()
            self._auth_due = now + self.token_recheck
        return self._auth

    def _ssl_context(self) -> ssl.SSLContext:
        cfg = self.configuration
        if cfg.verify_ssl:
            ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert or None)
            ctx.check_hostname = bool(getattr(cfg, "assert_hostname", None) is not False)
        else:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if cfg.cert_file:
            ctx.load_cert_chain(cfg.cert_file, cfg.key_file or None)
        ctx.set_alpn_protocols(["http/1.1"])  # never HTTP/2: its framing is not spoken here
        return ctx

    def _connect(self) -> socket.socket:
        """Blocks the loop's thread for the TCP connect and the TLS handshake (bounded by the timeout): once
        per connection, which is kept alive."""
        sock = socket.create_connection((self._host, self._port), timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._context is not None:
            name = getattr(self.configuration, "tls_server_name", None) or self._host
            try:
                sock = self._context.wrap_socket(sock, server_hostname=name)
            except BaseException:
                sock.close()
                raise
        return sock
