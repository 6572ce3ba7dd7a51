"""cluster.inbox.Inbox: the watch threads' hand-over to the feed thread."""

from __future__ import annotations

import threading
import time

from phalanx.cluster.inbox import Inbox


def test_every_item_of_concurrent_producers_arrives_once_in_each_producers_order() -> None:
    inbox: Inbox[tuple[int, int]] = Inbox()
    producers, per = 4, 20_000

    def produce(p: int) -> None:
        for i in range(per):
            inbox.put((p, i))

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(producers)]
    for t in threads:
        t.start()
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + 30
    while len(got) < producers * per and time.monotonic() < deadline:
        got += inbox.drain(0.05)
    for t in threads:
        t.join()
    got += inbox.drain()
    assert len(got) == producers * per
    for p in range(producers):
        assert [i for q, i in got if q == p] == list(range(per))


def test_a_waiting_drain_wakes_at_the_first_put_and_an_empty_one_returns_at_its_timeout() -> None:
    inbox: Inbox[str] = Inbox()
    started = time.monotonic()
    assert inbox.drain(0.1) == []
    assert 0.09 <= time.monotonic() - started < 1.0
    threading.Timer(0.1, inbox.put, args=("x",)).start()
    started = time.monotonic()
    assert inbox.drain(10.0) == ["x"]
    assert time.monotonic() - started < 2.0
    # The Event was cleared by that drain: the next one waits again rather than spinning on a stale wake-up.
    started = time.monotonic()
    assert inbox.drain(0.1) == []
    assert time.monotonic() - started >= 0.09
    inbox.put("a")
    inbox.put("b")
    assert len(inbox) == 2 and inbox.drain() == ["a", "b"] and len(inbox) == 0
