"""kube/io_loop.py and kube/http_reply.py: one thread drives every pipelined connection, answers are parsed
from whatever has arrived (a byte at a time, a TLS record split over reads), a connection the server dropped
while idle is noticed before it is written to, a silent server's requests time out without holding up the
other pipelines, and a blocking call from the loop's own thread is refused rather than hanging."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from test_kube_pipeline import Server, echo, plain
from waiting import wait_for

from phalanx.kube.connection import KubeConnection
from phalanx.kube.http_reply import take_reply
from phalanx.kube.io_loop import IoLoop
from phalanx.kube.pipeline import Pipeline, Request

# -- the parser ------------------------------------------------------------------------------------------


def test_an_answer_arriving_a_byte_at_a_time_is_taken_only_once_whole() -> None:
    raw = plain(201, b'{"kind":"Binding"}') + plain(409, b"taken")
    buf = bytearray()
    taken = []
    for i in range(len(raw)):
        buf += raw[i : i + 1]
        while (got := take_reply(buf)) is not None:
            taken.append((got[0].status, got[0].data, got[1]))
    assert taken == [(201, b'{"kind":"Binding"}', True), (409, b"taken", True)]
    assert not buf


def test_chunked_no_length_and_garbled_answers() -> None:
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nT: 1\r\n\r\n"
    for cut in range(len(chunked)):  # every split of it: incomplete until the last byte
        assert take_reply(bytearray(chunked[:cut])) is None
    got = take_reply(bytearray(chunked))
    assert got is not None and got[0].data == b"abcde"

    to_end = bytearray(b"HTTP/1.1 200 OK\r\n\r\nall of it")
    assert take_reply(to_end) is None  # no length: the body runs until the connection ends
    got = take_reply(to_end, eof=True)
    assert got is not None and got[0].data == b"all of it" and got[1] is False

    with pytest.raises(ValueError, match="HTTP/1.x"):
        take_reply(bytearray(b"SSH-2.0-OpenSSH\r\n\r\n"))


# -- the loop --------------------------------------------------------------------------------------------


def test_one_thread_drives_the_bindings_events_and_status_writes_of_a_backend() -> None:
    """Before, each connection had a sender thread of its own (8 + 4 + 16 in the binder), each woken and put
    to sleep twice a request."""
    from phalanx.backends.kubernetes import KubernetesBackend
    from phalanx.model.binding import Assignment

    server = Server(lambda n, req: plain(201, b"{}"))
    server.gate.clear()  # answers held: each batch keeps its connection busy, so more are opened
    backend = KubernetesBackend(server.config(), component="phalanx")
    try:
        for i in range(40):
            backend._event({"apiVersion": "v1", "kind": "Pod", "namespace": "ns", "name": f"e{i}"}, "Scheduled", "")
        wait_for(lambda: server.connections >= 10, 5, "the Events' connections opened", interval=0.01)
        server.gate.set()
        assert (
            backend._bind_batch([Assignment(pod_key=f"ns/p{i}", uid=f"u{i}", node="n1") for i in range(3)])
            == [None] * 3
        )
        assert backend.flush(5)
        names = [t.name for t in threading.enumerate()]
        assert [n for n in names if n.startswith(("k8s-bind-", "k8s-write-", "k8s-event-"))] == []
        assert names.count("k8s-io") == 1
        assert server.connections >= 13  # 10+ for the Events, 3 for the gang's bindings
    finally:
        server.gate.set()
        backend.close()
    assert "k8s-io" not in [t.name for t in threading.enumerate()]  # closed with the backend


def test_an_idle_connection_the_server_closed_is_noticed_and_not_written_to() -> None:
    """The API server closes idle connections: the loop reads the end as it comes, so the next request goes
    on a new connection and is not spent on the dead one (which would use its one resend)."""
    server = Server(lambda n, req: plain(201, b"first" if n == 1 else b"later"))
    pipe = Pipeline(server.config(), connections=1, timeout=5)
    try:
        assert pipe.submit(Request("POST", "/a", b"1")).result(5).data == b"first"
        channel = pipe._channels[0]
        channel_sock = channel.sock
        # The server ends the idle connection (as its idle timeout would).
        wait_for(lambda: server.connections == 1, 5, "connected")
        _close_server_side(server)
        wait_for(lambda: channel.closed, 5, "the end of the idle connection read by the loop", interval=0.01)
        assert channel_sock.fileno() == -1
        assert pipe.submit(Request("POST", "/b", b"1")).result(5).data == b"later"
        assert server.connections == 2
        assert server.requests[-1].startswith(b"POST /b ")
    finally:
        pipe.close()


def _close_server_side(server: Server) -> None:
    """Ends every connection the test server holds, from its side."""
    for conn in list(server.open):
        try:
            conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def test_a_silent_server_times_out_its_requests_while_another_pipeline_on_the_loop_is_answered() -> None:
    silent = Server(echo)
    silent.gate.clear()  # never answers
    lively = Server(echo)
    loop = IoLoop("test-io")
    slow = Pipeline(silent.config(), connections=1, timeout=0.5, loop=loop)
    fast = Pipeline(lively.config(), connections=1, timeout=5, loop=loop)
    try:
        stuck = slow.submit(Request("POST", "/never", b"1"))
        started = time.monotonic()
        for i in range(20):  # answered while the other connection waits
            assert fast.submit(Request("POST", f"/q{i}", b"1")).result(2).status == 201
        with pytest.raises(TimeoutError):
            stuck.result(5)
        assert 0.4 <= time.monotonic() - started < 3
    finally:
        silent.gate.set()
        slow.close()
        fast.close()
        loop.stop()


def test_a_blocking_call_from_the_loops_own_thread_is_refused_not_hung() -> None:
    server = Server(echo)
    pipe = Pipeline(server.config(), connections=1, timeout=5)
    seen: list[BaseException | None] = []

    def from_callback(_fut: Future[Any]) -> None:
        try:
            pipe.call(Request("POST", "/inner", b"1"))
            seen.append(None)
        except RuntimeError as exc:
            seen.append(exc)

    try:
        pipe.submit(Request("POST", "/outer", b"1")).add_done_callback(from_callback)
        wait_for(lambda: seen, 5, "the callback ran")
        assert isinstance(seen[0], RuntimeError) and "never return" in str(seen[0])
        assert pipe.submit(Request("POST", "/after", b"1")).result(5).status == 201  # the loop still runs
    finally:
        pipe.close()


def test_large_answers_over_tls_come_back_whole_and_in_order(tmp_path: Path) -> None:
    """Non-blocking TLS: answers of many records each, read as they arrive on two connections at once."""
    from phalanx.security import certs

    ca = certs.new_ca()
    directory = certs.write(
        tmp_path / "server", ca.cert_pem, certs.issue(ca, "localhost", ["localhost"], ["127.0.0.1"])
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(directory / certs.CERT_FILE, directory / certs.KEY_FILE)

    def big(n: int, req: bytes) -> bytes:
        return plain(200, req.split(b" ")[1] * 20_000)  # ~100-200 kB an answer

    server = Server(big, wrap=context)
    config = KubeConnection(f"https://127.0.0.1:{server.port}", ssl_ca_cert=str(directory / certs.CA_FILE))
    pipe = Pipeline(config, connections=2, timeout=10)
    try:
        futures = [pipe.submit(Request("POST", f"/r{i}", b"{}")) for i in range(40)]
        for i, f in enumerate(futures):
            assert f.result(10).data == f"/r{i}".encode() * 20_000
    finally:
        pipe.close()


def test_a_lane_that_fails_does_not_stop_the_loop_the_others_depend_on() -> None:
    server = Server(echo)
    loop = IoLoop("test-io")
    pipe = Pipeline(server.config(), connections=1, timeout=5, loop=loop)
    broken = Pipeline(server.config(), connections=1, timeout=5, loop=loop)
    calls = []

    def dispatch_fails() -> None:
        calls.append(1)
        raise RuntimeError("a bug in a lane")

    def sendable_fails() -> bool:
        raise RuntimeError("another bug in a lane")

    broken.dispatch = dispatch_fails  # type: ignore[method-assign]  # every turn's sending step raises
    broken.sendable = sendable_fails  # type: ignore[method-assign]  # and so does the turn itself
    try:
        for i in range(5):
            assert pipe.submit(Request("POST", f"/q{i}", b"1")).result(5).status == 201
        assert calls  # the broken lane was asked at every turn, and the loop went on
    finally:
        pipe.close()
        broken.close()
        loop.stop()
