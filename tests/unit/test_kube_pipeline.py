"""kube/pipeline.py against a small HTTP/1.1 server on a real socket: answers in order, batches formed while
connections are busy, chunked and Connection: close answers, a connection closed before answering (sent
again once), one closed mid-batch (the unanswered fail), and the bearer token asked for again once its
recheck time has passed."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from waiting import wait_for

from phalanx.kube.api import KubeApi
from phalanx.kube.connection import KubeConnection
from phalanx.kube.pipeline import Pipeline, Request, supported

Answer = Callable[[int, bytes], bytes | None]  # (request number, request bytes) -> raw answer, None: close


def plain(status: int, body: bytes, extra: str = "") -> bytes:
    return f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


class Server:
    """Reads requests (Content-Length bodies) one after another per connection and answers each in order."""

    def __init__(self, answer: Answer, wrap: ssl.SSLContext | None = None) -> None:
        self.answer = answer
        self.wrap = wrap  # a server-side TLS context: connections are TLS
        self.open: list[socket.socket] = []  # the connections accepted
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.requests: list[bytes] = []
        self.reads: list[int] = []  # requests found complete in each read: > 1 is a pipelined batch
        self.received: list[tuple[float, bytes]] = []  # when each request was read, and its request line
        self.connections = 0
        self.lock = threading.Lock()
        self.gate = threading.Event()
        self.gate.set()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.wrap is not None:
                try:
                    conn = self.wrap.wrap_socket(conn, server_side=True)
                except OSError:
                    conn.close()
                    continue
            with self.lock:
                self.connections += 1
                self.open.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except ConnectionResetError:  # the client dropped the connection (the tests that close one)
                    return
                if not data:
                    return
                buf += data
                done = []
                while (end := buf.find(b"\r\n\r\n")) >= 0:
                    head = buf[:end].decode()
                    length = 0
                    for line in head.split("\r\n")[1:]:
                        k, _, v = line.partition(":")
                        if k.strip().lower() == "content-length":
                            length = int(v)
                    if len(buf) < end + 4 + length:
                        break
                    done.append(buf[: end + 4 + length])
                    buf = buf[end + 4 + length :]
                if done:
                    self.reads.append(len(done))
                    now = time.monotonic()
                    with self.lock:
                        self.received += [(now, req.split(b"\r\n", 1)[0]) for req in done]
                self.gate.wait(10)
                for req in done:
                    with self.lock:
                        self.requests.append(req)
                        n = len(self.requests)
                    out = self.answer(n, req)
                    if out is None:
                        conn.shutdown(socket.SHUT_RDWR)
                        return
                    conn.sendall(out)

    def config(self, token: list[str] | None = None) -> Any:
        tokens = token or ["Bearer t0"]

        return KubeConnection(f"http://127.0.0.1:{self.port}", authorization=lambda: tokens[0])


def echo(n: int, req: bytes) -> bytes:
    return plain(201, req.split(b"\r\n", 1)[0])


def test_answers_come_back_to_their_requests_in_order_and_batch_while_busy() -> None:
    server = Server(echo)
    server.gate.clear()  # the server sits on its first read: what follows queues, then goes as one write
    pipe = Pipeline(server.config(), connections=1, timeout=5)
    try:
        futures = [pipe.submit(Request("POST", f"/p/{i}", b"{}")) for i in range(20)]
        server.gate.set()
        replies = [f.result(5) for f in futures]
        assert [r.data for r in replies] == [f"POST /p/{i} HTTP/1.1".encode() for i in range(20)]
        assert all(r.status == 201 for r in replies)
        assert max(server.reads) > 1 and pipe.batches < 20  # several requests went in one write
        assert server.connections == 1
        assert pipe.flush(1)
    finally:
        pipe.close()


def test_chunked_and_connection_close_answers() -> None:
    def answer(n: int, req: bytes) -> bytes:
        if n == 1:
            return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nT: 1\r\n\r\n"
        if n == 2:
            return plain(200, b"bye", "Connection: close\r\n")
        return plain(200, b"again")

    server = Server(answer)
    server.gate.clear()
    pipe = Pipeline(server.config(), connections=1, timeout=5)
    try:
        futures = [pipe.submit(Request("GET", f"/{i}")) for i in range(3)]
        server.gate.set()
        assert [f.result(5).data for f in futures] == [b"abcde", b"bye", b"again"]
        assert server.connections == 2  # the third went again on a new connection after "close"
    finally:
        pipe.close()


def test_a_connection_closed_before_any_answer_is_retried_once_and_one_closed_mid_batch_fails_the_rest() -> None:
    closed: set[bytes] = set()

    def answer(n: int, req: bytes) -> bytes | None:
        line = req.split(b"\r\n", 1)[0]
        if (b"/a " in line or b"/b1 " in line) and line not in closed:  # the first time each is seen
            closed.add(line)
            return None
        return plain(201, line.split(b" ")[1])

    server = Server(answer)
    pipe = Pipeline(server.config(), connections=1, timeout=5)
    try:
        assert pipe.submit(Request("POST", "/a", b"1")).result(5).data == b"/a"  # closed unanswered: sent again
        assert server.connections == 2
        server.gate.clear()
        hold = pipe.submit(Request("POST", "/hold", b"1"))  # the sender waits for this answer...
        futures = [pipe.submit(Request("POST", f"/b{i}", b"1")) for i in range(3)]  # ...while these queue
        server.gate.set()
        assert hold.result(5).data == b"/hold"
        assert futures[0].result(5).data == b"/b0"
        for f in futures[1:]:  # closed after an answer of the batch: the rest may have been taken; not resent
            with pytest.raises(OSError):
                f.result(5)
    finally:
        pipe.close()


def test_a_refreshed_token_is_sent_once_the_recheck_time_has_passed() -> None:
    server = Server(echo)
    tokens = ["Bearer first"]
    pipe = Pipeline(server.config(tokens), connections=1, timeout=5, token_recheck=0.0)
    try:
        pipe.submit(Request("POST", "/x", b"{}")).result(5)
        tokens[0] = "Bearer refreshed"
        pipe.submit(Request("POST", "/y", b"{}")).result(5)
        assert b"Authorization: Bearer first" in server.requests[0]
        assert b"Authorization: Bearer refreshed" in server.requests[1]
        assert b"Content-Length: 2\r\n" in server.requests[1] and server.requests[1].endswith(b"\r\n\r\n{}")
    finally:
        pipe.close()


def test_the_token_is_asked_for_at_most_once_per_recheck_interval() -> None:
    """Asking the connection for the token can run the client's refresh hook (its loader's kubeconfigs: the whole
    configuration copied again): not at every batch."""
    server = Server(echo)
    asked = []
    config = server.config()
    ask = config.authorization
    config.authorization = lambda: asked.append(1) or ask()  # type: ignore[method-assign]  # counts the asks
    pipe = Pipeline(config, connections=1, timeout=5, token_recheck=60.0)
    try:
        for i in range(5):
            pipe.submit(Request("POST", f"/x{i}", b"{}")).result(5)
        assert len(asked) == 1
        assert all(b"Authorization: Bearer t0" in r for r in server.requests)
    finally:
        pipe.close()


def test_kube_api_raises_the_clients_exception_for_a_refusal_through_the_pipeline() -> None:
    from phalanx.kube.errors import ApiError

    server = Server(lambda n, req: plain(409, b'{"message":"already bound"}'))
    pipe = Pipeline(server.config(), connections=1, timeout=5)
    api = KubeApi(server.config(), pipe)
    try:
        with pytest.raises(ApiError) as err:
            api.create_namespaced_pod_binding("p", "ns", {"target": {"name": "n"}})
        assert err.value.status == 409 and "already bound" in str(err.value.body)
        assert server.requests[0].startswith(b"POST /api/v1/namespaces/ns/pods/p/binding HTTP/1.1")
    finally:
        pipe.close()


def test_a_proxy_is_not_pipelined() -> None:
    assert "proxy" in supported(SimpleNamespace(host="https://k:6443", proxy="http://proxy:3128"))
    assert supported(SimpleNamespace(host="https://k:6443", proxy=None)) == ""
    with pytest.raises(ValueError, match="proxy"):
        Pipeline(SimpleNamespace(host="https://k:6443", proxy="http://p:1"))


def _bind_three(server: Server) -> list[Any]:
    from phalanx.backends.kubernetes import KubernetesBackend
    from phalanx.model.binding import Assignment

    backend = KubernetesBackend(server.config(), component="phalanx")
    try:
        return backend._bind_batch([Assignment(pod_key=f"ns/p{i}", uid=f"u{i}", node="n1") for i in range(3)])
    finally:
        backend.close()


def test_a_gangs_bindings_go_at_once_unless_a_kill_between_pods_is_armed() -> None:
    """A gang's bindings are sent together; with PHALANX_FAULT at binder.between_pods each waits for the
    previous one's answer, so the kill falls between two bindings made, as the fault tests require."""
    from phalanx import faults

    def slow_binding(n: int, req: bytes) -> bytes:
        if b"/binding " in req.split(b"\r\n", 1)[0]:
            time.sleep(0.1)  # the API server's write
        return plain(201, b"{}")

    def binding_reads(server: Server) -> list[float]:
        return [t for t, line in server.received if b"/binding " in line]

    server = Server(slow_binding)
    assert _bind_three(server) == [None, None, None]
    together = binding_reads(server)
    assert max(together) - min(together) < 0.09  # all three on the wire before the first answer

    faults.configure({faults.FAULT_ENV: "binder.between_pods:99"})
    try:
        server = Server(slow_binding)
        assert _bind_three(server) == [None, None, None]
    finally:
        faults.configure({})
    apart = binding_reads(server)
    assert len(apart) == 3 and all(b - a >= 0.1 for a, b in zip(apart, apart[1:]))  # each after an answer


def test_a_pods_scheduled_event_goes_out_with_its_binding_answer_not_after_the_pods_before_it() -> None:
    """The `Scheduled` Event of a pod bound at the first try leaves as its answer is read. Here the pod
    before it in the batch is refused once (500) and its retry answered slowly: the Events of the other two
    do not wait for that retry, as they did when the binder's loop sent each Event on reaching its pod."""
    tries: list[float] = []

    def answer(n: int, req: bytes) -> bytes:
        if b"/pods/p0/binding " in req.split(b"\r\n", 1)[0]:
            tries.append(time.monotonic())
            if len(tries) == 1:
                return plain(500, b'{"kind":"Status","message":"etcd is busy"}')
            time.sleep(0.5)  # the retry's answer
        return plain(201, b"{}")

    server = Server(answer)
    assert _bind_three(server) == [None, None, None]
    assert len(tries) == 2
    events = sorted(t for t, line in server.received if line.startswith(b"POST /api/v1/namespaces/ns/events "))
    assert len(events) == 3  # one per pod, p0's after its retry made the binding
    assert events[1] < tries[1] + 0.3  # p1's and p2's: before p0's retry was answered
    assert events[2] >= tries[1] + 0.5  # p0's: once its binding was made


def test_events_spread_over_16_connections_at_most_4_to_a_batch() -> None:
    """The API server answers one connection's requests in order: an Event at the back of a long batch waits
    for every one before it. With the server holding its answers, 80 Events go out on 16 connections, never
    more than 4 in one write (8 connections of 8 put a pod's Event 180-370 ms behind its binding)."""
    from phalanx.backends.kubernetes import KubernetesBackend

    server = Server(lambda n, req: plain(201, b"{}"))
    server.gate.clear()  # every connection's first batch waits for its answers
    backend = KubernetesBackend(server.config(), component="phalanx")
    try:
        for i in range(80):
            backend._event({"apiVersion": "v1", "kind": "Pod", "namespace": "ns", "name": f"p{i}"}, "Scheduled", "")
        wait_for(lambda: server.connections >= 16, 5, "16 connections opened", interval=0.01)
        time.sleep(0.1)
        assert server.connections == 16
        server.gate.set()
        assert backend.events_api.pipeline is not None and backend.events_api.pipeline.flush(5)
        assert sum(server.reads) == 80 and max(server.reads) <= 4
    finally:
        server.gate.set()
        backend.close()


def test_a_spread_pipeline_sends_a_few_requests_on_as_many_connections_and_still_batches_a_burst() -> None:
    """The bindings' pipeline: a gang's three bindings go out on three connections, one each (the API server
    answers them side by side; in one write it answered them one after the other), while a burst of 100
    still goes several to a write, never more than max_batch."""
    server = Server(lambda n, req: plain(201, b"{}"))
    server.gate.clear()  # answers held: each connection keeps what it was given
    pipe = Pipeline(server.config(), connections=8, max_batch=8, timeout=5, spread=True)
    try:
        futures = [pipe.submit(Request("POST", f"/p/{i}", b"{}")) for i in range(3)]
        wait_for(lambda: sum(server.reads) == 3, 5, "three requests read", interval=0.01)
        assert server.connections == 3 and server.reads == [1, 1, 1]
        server.gate.set()
        assert all(f.result(5).status == 201 for f in futures)

        server.gate.clear()
        server.reads.clear()
        futures = [pipe.submit(Request("POST", f"/q/{i}", b"{}")) for i in range(100)]
        time.sleep(0.2)
        server.gate.set()
        assert all(f.result(5).status == 201 for f in futures)
        assert sum(server.reads) == 100 and 1 < max(server.reads) <= 8
    finally:
        server.gate.set()
        pipe.close()
