"""HTTP/1.1 pipelining to the API server: the requests waiting at one moment go out in one TLS write, and
their answers are read back in order.

Why: a write through the kubernetes client (urllib3, http.client) costs its caller 0.45-0.6 ms of CPU on
this project's 2-core VM, most of it in the TLS write of the headers, the TLS write of the body and the TLS
read of the answer (system calls and the loopback's TCP work, charged to the sender); the same requests
pipelined 50 at a time cost 0.09 ms each (hack/README.md: request cost). The binder makes 2-3 writes per
bound pod (the binding, its Event, a share of its PodGroup's status), so this is most of its CPU.

Go's net/http server (kube-apiserver's) reads a connection's requests one after the other and answers them
in order, so pipelining needs nothing from the server. A batch holds what callers handed in while the
previous batch was on the wire: under load it grows, idle it is one request (no added wait).

Failure: a connection that breaks or times out fails the requests it had not answered with an OSError
(`transient` for the binder, which retries). A request unanswered because the connection was found closed
before any answer of its batch came is sent once more on a new connection: the server had not answered it,
and every write the binder makes is safe to repeat (a binding repeated is a 409 the binder reads back, an
Event's name is fixed when it is made, a merge patch is idempotent).
"""

from __future__ import annotations

import logging
import queue
import socket
import ssl
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

JSON = "application/json"
MAX_BATCH = 64  # requests in one write at most: ~100 ms of the server's serial work
# A service-account token is rotated an hour or so before it expires, and a kubeconfig's exec credential is
# refreshed by its hook once expired: a second's delay in noticing either is harmless.
TOKEN_RECHECK_S = 1.0
_STOP = object()


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # with its query, already quoted
    body: bytes | None = None
    content_type: str = JSON


class Reply:
    """An answer, shaped like the urllib3 response `KubeApi` returns (status, reason, data, headers, read,
    release_conn)."""

    __slots__ = ("status", "reason", "data", "headers")

    def __init__(self, status: int, reason: str, data: bytes, headers: dict[str, str]) -> None:
        self.status = status
        self.reason = reason
        self.data = data
        self.headers = headers

    def read(self) -> bytes:
        return self.data

    def release_conn(self) -> None:
        """Nothing to give back: the pipeline owns its connections."""


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
    """`connections` sender threads, each with one keep-alive connection to the API server of
    `configuration` (a kube.connection.KubeConnection: host, TLS files, verify_ssl, tls_server_name, and
    its Authorization, asked of it again at a batch once `token_recheck` seconds have passed, so a
    refreshed token is used within that time; asking can cost: through the kubernetes client's loader the
    refresh hook copies the whole configuration again, host and proxy lookup included)."""

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
    ) -> None:
        why = supported(configuration)
        if why:
            raise ValueError(f"cannot pipeline to the API server: {why}")
        self.configuration = configuration
        self.timeout = timeout
        self.max_batch = max(1, max_batch)
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
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._pending = 0
        self._idle = threading.Condition()
        self.batches = self.requests = 0  # counters for tests and benchmarks
        self._threads = [
            threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True) for i in range(max(1, connections))
        ]
        for t in self._threads:
            t.start()

    # -- callers -------------------------------------------------------------------------------------------
    def submit(self, request: Request) -> Future[Reply]:
        fut: Future[Reply] = Future()
        with self._idle:
            self._pending += 1
        fut.add_done_callback(self._done)
        self._queue.put((request, fut, 0))
        return fut

    def call(self, request: Request) -> Reply:
        """Sends `request` and waits for its answer (the connection's timeout bounds the wait)."""
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
        for _ in self._threads:
            self._queue.put(_STOP)
        for t in self._threads:
            t.join(5)

    def _done(self, _fut: Future[Reply]) -> None:
        with self._idle:
            self._pending -= 1
            if not self._pending:
                self._idle.notify_all()

    # -- the sender ----------------------------------------------------------------------------------------
    def _run(self) -> None:
        conn: _Connection | None = None
        while True:
            first = self._queue.get()
            if first is _STOP:
                if conn is not None:
                    conn.close()
                return
            batch = [first]
            stop = False
            limit = self._batch_limit()
            while len(batch) < limit:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stop = True
                    break
                batch.append(item)
            batch = [(r, f, n) for r, f, n in batch if f.set_running_or_notify_cancel()]
            while batch:
                if conn is None or conn.dropped():
                    if conn is not None:
                        conn.close()
                    try:
                        conn = self._connect()
                    except OSError as exc:
                        for _, fut, _n in batch:
                            fut.set_exception(exc)
                        break
                batch, conn = self._send(conn, batch)
            if stop:
                self._queue.put(_STOP)  # for the next sender (each takes one)
                if conn is not None:
                    conn.close()
                return

    def _batch_limit(self) -> int:
        """How many requests this sender takes in one write. Spread: what is waiting, shared out over the
        connections (the first sender to wake takes its share and leaves the rest to the others), at most
        max_batch; so a gang's few bindings go out on as many connections, answered side by side instead of
        one after the other, while a burst still goes max_batch to a write."""
        if not self.spread:
            return self.max_batch
        waiting = 1 + self._queue.qsize()
        return max(1, min(self.max_batch, -(-waiting // len(self._threads))))

    def _send(self, conn: _Connection, batch: list[Any]) -> tuple[list[Any], _Connection | None]:
        """Sends `batch` on `conn`; returns what is to be sent again (on a new connection) and the connection
        still usable (None if it is not)."""
        self.batches += 1
        self.requests += len(batch)
        answered = 0
        try:
            auth = self._authorization()
            conn.sock.sendall(b"".join(self._encode(r, auth) for r, _, _ in batch))
            for _, fut, _n in batch:
                reply, keep = conn.read_reply()
                answered += 1
                fut.set_result(reply)
                if not keep:  # "Connection: close": what follows was not read by the server
                    conn.close()
                    return self._again(batch[answered:], None), None
            return [], conn
        except _Closed as exc:
            conn.close()
            if answered == 0:  # closed before any answer: the server took none of them
                return self._again(batch, exc), None
            self._fail(batch[answered:], exc)
            return [], None
        except OSError as exc:
            conn.close()
            self._fail(batch[answered:], exc)
            return [], None
        except Exception as exc:  # a garbled answer: the connection is out of step
            conn.close()
            self._fail(batch[answered:], OSError(f"unreadable answer from the API server: {exc}"))
            return [], None

    @staticmethod
    def _again(items: list[Any], exc: Exception | None) -> list[Any]:
        out = []
        for req, fut, tries in items:
            if tries >= 1:
                fut.set_exception(exc or _Closed("the API server closed the connection"))
            else:
                out.append((req, fut, tries + 1))
        return out

    @staticmethod
    def _fail(items: list[Any], exc: Exception) -> None:
        for _, fut, _n in items:
            fut.set_exception(exc)

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
        if now >= self._auth_due:  # two senders may both ask at the turn: harmless
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

    def _connect(self) -> _Connection:
        sock = socket.create_connection((self._host, self._port), timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._context is not None:
            name = getattr(self.configuration, "tls_server_name", None) or self._host
            sock = self._context.wrap_socket(sock, server_hostname=name)
        return _Connection(sock, self.timeout)


class _Connection:
    """One keep-alive connection and what has been read from it but not yet parsed."""

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        self.sock = sock
        self.timeout = timeout
        self.buf = bytearray()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def dropped(self) -> bool:
        """Closed by the server while idle (its idle timeout): readable with nothing to read."""
        if self.buf:
            return True  # bytes nobody asked for: out of step
        import select

        try:
            readable, _, _ = select.select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return True
        if not readable:
            return False
        # Readable: the end of the connection, or TLS's own records (a TLS 1.3 session ticket), which a
        # non-blocking read consumes without returning data.
        self.sock.setblocking(False)
        try:
            self.sock.recv(1)
        except (ssl.SSLWantReadError, BlockingIOError):
            return False
        except OSError:
            return True
        finally:
            self.sock.settimeout(self.timeout)
        return True  # the end of the connection (b"") or bytes nobody asked for

    def _fill(self) -> None:
        chunk = self.sock.recv(262144)
        if not chunk:
            raise _Closed("the API server closed the connection")
        self.buf += chunk

    def _line(self, start: int) -> int:
        while (end := self.buf.find(b"\r\n", start)) < 0:
            self._fill()
        return end

    def read_reply(self) -> tuple[Reply, bool]:
        """The next answer, and whether the connection stays open after it."""
        while (head_end := self.buf.find(b"\r\n\r\n")) < 0:
            self._fill()
        head = bytes(self.buf[:head_end]).decode("latin-1").split("\r\n")
        del self.buf[: head_end + 4]
        version, _, rest = head[0].partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/1."):
            raise ValueError(f"not an HTTP/1.x status line: {head[0][:80]!r}")
        headers: dict[str, str] = {}
        for line in head[1:]:
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        status = int(code)
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = self._chunked()
        elif "content-length" in headers:
            body = self._exactly(int(headers["content-length"]))
        elif status in (204, 304) or 100 <= status < 200:
            body = b""
        else:  # no length: the body runs to the end of the connection
            body = self._to_end()
            return Reply(status, reason, body, headers), False
        keep = headers.get("connection", "").lower() != "close" and version != "HTTP/1.0"
        return Reply(status, reason, body, headers), keep

    def _exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def _chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            end = self._line(0)
            size = int(bytes(self.buf[:end]).split(b";", 1)[0].strip() or b"0", 16)
            del self.buf[: end + 2]
            if size == 0:
                while (end := self._line(0)) != 0:  # trailers, then the empty line
                    del self.buf[: end + 2]
                del self.buf[:2]
                return b"".join(parts)
            parts.append(self._exactly(size))
            self._exactly(2)  # the chunk's CRLF

    def _to_end(self) -> bytes:
        try:
            while True:
                self._fill()
        except _Closed:
            pass
        out = bytes(self.buf)
        self.buf.clear()
        return out
