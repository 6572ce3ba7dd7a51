"""The scheduler waits for the queue and the binder concurrently (phalanx_scheduler.__main__.Dependencies):
both serving, it is ready as soon as the later one is; one that never serves is named, the queue first."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from phalanx.rpc.server import ServiceServer
from phalanx.security.tls import PLAINTEXT
from phalanx.testing.ports import free_ports
from phalanx_scheduler.__main__ import Dependencies, parser


@pytest.fixture
def serving() -> Iterator[str]:
    server = ServiceServer("queue", "127.0.0.1:0", lambda s: None, security=PLAINTEXT).start()
    yield server.address
    server.stop(0)


def deps(queue: str, binder: str, timeout: float) -> Dependencies:
    args = parser().parse_args(
        ["--queue", queue, "--binder", binder, "--dependency-timeout", str(timeout), "--backend", "simulated"]
    )
    return Dependencies(args, PLAINTEXT)


def test_both_serving_is_ready(serving: str) -> None:
    d = deps(serving, serving, 5).start()
    assert d.ready() and d.failure == ""


def test_the_waits_run_together_and_name_the_queue_first() -> None:
    closed = [f"127.0.0.1:{p}" for p in free_ports(2)]
    d = deps(closed[0], closed[1], 1.0)
    started = time.monotonic()
    d.start()
    assert not d.ready()
    took = time.monotonic() - started
    assert took < 1.9, f"one timeout, not two in turn ({took:.1f}s)"
    assert set(d.failures) == {"queue", "binder"}
    assert (
        d.failure
        == f"--queue {closed[0]}: the queue is not serving (no healthy answer within 1s; --dependency-timeout)"
    )
    with pytest.raises(SystemExit, match="phalanx-scheduler: --queue"):
        d.wait()


def test_a_binder_that_never_serves_is_named(serving: str) -> None:
    [closed] = [f"127.0.0.1:{p}" for p in free_ports(1)]
    d = deps(serving, closed, 0.5).start()
    assert not d.ready() and set(d.failures) == {"binder"}
    assert d.failure.startswith(f"--binder {closed}: the binder is not serving")


def test_in_process_services_are_not_waited_for() -> None:
    """phalanx-combined: the queue and the binder serve before the scheduler starts, and it calls them in
    process: addresses that answer nothing hold nothing up and open no connection."""
    closed = [f"127.0.0.1:{p}" for p in free_ports(2)]
    args = parser().parse_args(
        ["--queue", closed[0], "--binder", closed[1], "--dependency-timeout", "1", "--backend", "simulated"]
    )
    d = Dependencies(args, PLAINTEXT, in_process=True)
    started = time.monotonic()
    assert d.start().ready() and d.failure == ""
    assert time.monotonic() - started < 0.5
