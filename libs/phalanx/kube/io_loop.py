"""One thread that drives every pipelined connection to the API server (kube/pipeline.py), with a selector.

Why one thread: a sender thread per connection (the binder had 28 of them) cost each request two thread
wake-ups of its own (woken by the request, put to sleep on the answer, woken by it, put to sleep on the next
request), and each wake-up of a Python thread is a futex, a context switch and a hand-over of the GIL; on a
2-core machine the binder switched 11 times a pod (bench/issue25-ab.txt, section 31). Here a request handed in
while the loop is already awake costs no wake-up at all (a binding's `Scheduled` Event is handed in by the
binding's answer, on this thread), and one wake-up reads every answer that has arrived on any connection.

What runs on this thread must not block: the futures' callbacks run here (a callback that waited for another
request of the same loop would wait forever; Pipeline.call refuses to). Opening a connection (TCP connect and
TLS handshake) does block it, once per connection, bounded by the connection's timeout.
"""

from __future__ import annotations

import logging
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

log = logging.getLogger(__name__)

READ_SIZE = 262144
EXPIRY_TICK_S = 0.1


class Channel:
    """One non-blocking connection: what is still to be written, what was read but not yet parsed, and the
    owner's bookkeeping of the requests written and not yet answered."""

    __slots__ = ("sock", "lane", "tls", "out", "buf", "inflight", "answered", "deadline", "closed", "writing")

    def __init__(self, sock: socket.socket, lane: Lane) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.lane = lane
        self.tls = isinstance(sock, ssl.SSLSocket)
        self.out = bytearray()
        self.buf = bytearray()
        self.inflight: deque[Any] = deque()  # the owner's requests, in the order written
        self.answered = 0  # answers read of the batch last written
        self.deadline = float("inf")  # monotonic time it gives up waiting for an answer
        self.closed = False
        self.writing = False  # registered for writability (a write the socket could not take whole)

    def write_some(self) -> None:
        """Writes what the socket takes now (OSError if the connection is broken)."""
        while self.out:
            try:
                n = self.sock.send(self.out)
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
                return
            del self.out[:n]

    def read_some(self) -> bool:
        """Reads what has arrived into `buf`; True once the server has ended the connection (OSError if it is
        broken). A TLS record already decrypted is read too: the selector only sees the socket's bytes."""
        while True:
            try:
                chunk = self.sock.recv(READ_SIZE)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                return False
            if not chunk:
                return True
            self.buf += chunk
            if not (self.tls and self.sock.pending()):  # type: ignore[attr-defined]
                return False

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass


class Lane(Protocol):
    """What the loop drives: a pipeline's queue and connections (every method runs on the loop's thread)."""

    def dispatch(self) -> None:
        """Writes what is queued on the connections free to take it."""

    def sendable(self) -> bool:
        """Something queued that a connection could take now."""

    def waiting(self) -> bool:
        """A connection of this lane waits for an answer (its timeout is checked)."""

    def ready(self, channel: Channel, writable: bool) -> None:
        """`channel` has bytes to read (or the end of the connection), or room to write."""

    def expire(self, now: float) -> None:
        """Fails the requests of connections whose deadline has passed."""


class IoLoop:
    """The thread, its selector and a wake-up socket. Other threads hand work to a lane and call `wake` only
    when the loop sleeps (`sleeping`) and the lane has a free connection: under load the loop is awake, or
    the request waits for a connection to free up, and no wake-up is sent."""

    def __init__(self, name: str = "k8s-io") -> None:
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._lanes: list[Lane] = []
        self._calls: deque[Callable[[], object]] = deque()
        self._halted = False
        self.sleeping = False  # in select with nothing to send: a new request needs a wake-up
        self._next_expiry = 0.0  # monotonic time the lanes' timeouts are checked next
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def on_loop(self) -> bool:
        return threading.current_thread() is self._thread

    def wake(self) -> None:
        self.sleeping = False
        try:
            self._wake_w.send(b"\0")
        except OSError:  # full: a wake-up is pending already; closed: the loop has stopped
            pass

    def call(self, fn: Callable[[], object]) -> None:
        """Runs `fn` on the loop's thread at its next turn (at once on that thread)."""
        if self.on_loop():
            fn()
            return
        self._calls.append(fn)
        self.wake()

    def add(self, lane: Lane) -> None:
        def append() -> None:
            self._lanes = [*self._lanes, lane]  # a new list: a turn iterating the old one is not disturbed

        self.call(append)

    def remove(self, lane: Lane) -> None:
        """On the loop's thread."""
        self._lanes = [other for other in self._lanes if other is not lane]

    def watch(self, channel: Channel) -> None:
        """On the loop's thread: the end of an idle connection is read as soon as it comes."""
        self._selector.register(channel.sock, selectors.EVENT_READ, channel)

    def want_write(self, channel: Channel, on: bool) -> None:
        if channel.writing != on and not channel.closed:
            channel.writing = on
            mask = selectors.EVENT_READ | (selectors.EVENT_WRITE if on else 0)
            self._selector.modify(channel.sock, mask, channel)

    def forget(self, channel: Channel) -> None:
        """On the loop's thread: stops watching `channel` and closes it."""
        if channel.closed:
            return
        try:
            self._selector.unregister(channel.sock)
        except (KeyError, ValueError, OSError):
            pass
        channel.close()

    def stop(self, timeout: float = 5.0) -> None:
        def halt() -> None:
            self._halted = True

        self.call(halt)
        if not self.on_loop():
            self._thread.join(timeout)

    # -- the thread ----------------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._halted:
                try:
                    self._turn()
                except Exception:  # every write of the process waits on this thread: it must not end
                    log.exception("API I/O loop: a turn failed")
                    time.sleep(0.01)
        finally:
            self._selector.close()
            self._wake_r.close()
            self._wake_w.close()

    def _turn(self) -> None:
        while self._calls:
            _guarded(self._calls.popleft(), "a call")
        if self._halted:
            return
        lanes = self._lanes
        for lane in lanes:
            _guarded(lane.dispatch, "sending")
        # Asleep from here: a request handed in now sees `sleeping` and wakes the select below, or is seen by
        # the checks that follow (`sendable`), which leave the select without waiting.
        self.sleeping = True
        timeout: float | None = None
        if self._calls or any(_asked(lane.sendable) for lane in lanes):
            timeout = 0.0
        elif any(_asked(lane.waiting) for lane in lanes):
            timeout = max(0.0, self._next_expiry - time.monotonic())
        events = self._selector.select(timeout)
        self.sleeping = False
        for key, mask in events:
            channel = key.data
            if channel is None:
                try:
                    self._wake_r.recv(4096)
                except OSError:
                    pass
            elif not channel.closed:
                try:
                    channel.lane.ready(channel, bool(mask & selectors.EVENT_WRITE))
                except Exception:
                    log.exception("API I/O loop: reading failed")
        now = time.monotonic()
        if now >= self._next_expiry:  # answers are given up on to a tenth of a second (timeouts are seconds)
            self._next_expiry = now + EXPIRY_TICK_S
            for lane in lanes:
                _guarded(partial(lane.expire, now), "a timeout")


def _asked(question: Callable[[], bool]) -> bool:
    """A lane's answer to the loop; False (and logged) if asking it fails."""
    try:
        return question()
    except Exception:
        log.exception("API I/O loop: asking a lane failed")
        return False


def _guarded(fn: Callable[[], object], what: str) -> None:
    """A bug in one lane's step is logged, not the end of the loop that every write depends on."""
    try:
        fn()
    except Exception:
        log.exception("API I/O loop: %s failed", what)
