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


def _put_later(inbox: Inbox[str], *timed: tuple[float, str]) -> None:
    """Puts each item at its delay (seconds from now), from another thread, as a watch thread would."""

    def run() -> None:
        start = time.monotonic()
        for delay, item in timed:
            time.sleep(max(0.0, start + delay - time.monotonic()))
            inbox.put(item)

    threading.Thread(target=run, daemon=True).start()


def test_a_drain_that_waited_lingers_so_the_items_right_behind_the_first_come_with_it() -> None:
    inbox: Inbox[str] = Inbox()
    # A gang's three pods arrive 10 ms apart after a lull: one batch with a 0.1 s linger ...
    _put_later(inbox, (0.05, "pod-0"), (0.06, "pod-1"), (0.07, "pod-2"))
    assert inbox.drain(5.0, linger=0.1) == ["pod-0", "pod-1", "pod-2"]
    # ... and the first one alone without it.
    _put_later(inbox, (0.05, "pod-0"), (0.15, "pod-1"))
    assert inbox.drain(5.0) == ["pod-0"]
    assert inbox.drain(5.0) == ["pod-1"]


def test_a_drain_that_finds_items_waiting_takes_them_without_lingering() -> None:
    inbox: Inbox[str] = Inbox()
    inbox.put("a")
    started = time.monotonic()
    assert inbox.drain(5.0, linger=1.0) == ["a"]  # behind already: no wait on top
    assert time.monotonic() - started < 0.5
    started = time.monotonic()
    assert inbox.drain(0.1, linger=1.0) == []  # nothing came: no linger after the timeout either
    assert time.monotonic() - started < 0.5
