"""The scheduling queue: ordering, whole-gang pops, backoff, unschedulable, move requests and in-flight pods."""

from __future__ import annotations

import threading
import time
from fractions import Fraction

import pytest

from phalanx.queueing.backoff import backoff_delay
from phalanx.queueing.scheduling_queue import Outcome, QueueSettings, SchedulingQueue, SubQueue

NS = "default"


def make_queue(**settings: float) -> SchedulingQueue:
    return SchedulingQueue(QueueSettings(**{"unschedulable_flush": 0.0, **settings}))


def add(
    q: SchedulingQueue,
    name: str,
    *,
    gang: str = "",
    prio: int = 0,
    created: float = 0.0,
    gang_created: float | None = None,
    payload: object = None,
    now: float = 0.0,
) -> None:
    q.add(
        f"{NS}/{name}",
        priority=prio,
        created_at=created,
        gang=f"{NS}/{gang}" if gang else "",
        gang_created_at=created if gang_created is None else gang_created,
        payload=name if payload is None else payload,
        now=now,
    )


def names(entries: list) -> list[str]:
    return [e.key.split("/", 1)[1] for e in entries]


def pop_units(q: SchedulingQueue, now: float = 0.0) -> list[list[str]]:
    """Pops one unit at a time until the active sub-queue is empty."""
    out = []
    while True:
        unit = names(q.pop(1, now))
        if not unit:
            return out
        out.append(unit)


def key(name: str) -> str:
    return f"{NS}/{name}"


# -- ordering ---------------------------------------------------------------------------------------

ORDER_CASES = {
    "higher priority first, even when newer": (
        [dict(name="old", prio=0, created=0), dict(name="new", prio=10, created=5)],
        [["new"], ["old"]],
    ),
    "older first at equal priority": (
        [dict(name="a", created=2), dict(name="z", created=1)],
        [["z"], ["a"]],
    ),
    "name breaks a time tie": (
        [dict(name="b", created=1), dict(name="a", created=1)],
        [["a"], ["b"]],
    ),
    "gang creation time orders gangs": (
        [
            dict(name="a", gang="late", created=0, gang_created=2),
            dict(name="x", gang="early", created=9, gang_created=1),
            dict(name="y", gang="early", created=9, gang_created=1),
        ],
        [["x", "y"], ["a"]],
    ),
    "gang name breaks a gang time tie": (
        [dict(name="p1", gang="gb", created=1), dict(name="p2", gang="ga", created=1)],
        [["p2"], ["p1"]],
    ),
    "gang priority beats an older single pod": (
        [
            dict(name="single", created=0),
            dict(name="w0", gang="g", prio=5, created=3),
            dict(name="w1", gang="g", prio=5, created=3),
        ],
        [["w0", "w1"], ["single"]],
    ),
    "single pod by its own time against a gang": (
        [dict(name="w0", gang="g", created=4), dict(name="single", created=3)],
        [["single"], ["w0"]],
    ),
}


@pytest.mark.parametrize("pods, expected", ORDER_CASES.values(), ids=ORDER_CASES.keys())
def test_pop_order(pods: list[dict], expected: list[list[str]]) -> None:
    q = make_queue()
    for p in pods:
        add(q, p.pop("name"), **p)
    assert pop_units(q) == expected


def test_gangs_never_interleave_when_their_pods_were_added_interleaved() -> None:
    q = make_queue()
    for i in range(3):
        add(q, f"a{i}", gang="ga", created=0)
        add(q, f"b{i}", gang="gb", created=0)
        add(q, f"s{i}", created=0)  # single pods with the same time, named between the gangs' pods
    add(q, "b3", gang="gb", prio=0, created=0)
    order = names(q.pop(100, 0))
    assert len(order) == 10
    # Each gang's pods form one contiguous run, in pod name order.
    for prefix, expected in (("a", ["a0", "a1", "a2"]), ("b", ["b0", "b1", "b2", "b3"])):
        positions = [order.index(n) for n in expected]
        assert positions == list(range(positions[0], positions[0] + len(expected))), order


def test_a_gang_with_one_high_priority_pod_comes_out_whole() -> None:
    q = make_queue()
    add(q, "a0", gang="ga", prio=1)
    add(q, "b0", gang="gb", prio=5)
    add(q, "b1", gang="gb", prio=0)  # would sort after ga on its own
    add(q, "a1", gang="ga", prio=1)
    assert pop_units(q) == [["b0", "b1"], ["a0", "a1"]]


def test_a_pop_returns_a_whole_gang_even_past_max_pods() -> None:
    q = make_queue()
    for i in range(5):
        add(q, f"w{i}", gang="big", created=0)
    add(q, "later", created=1)
    assert names(q.pop(2, 0)) == [f"w{i}" for i in range(5)]
    assert names(q.pop(2, 0)) == ["later"]


def test_a_pop_takes_whole_units_until_it_reaches_max_pods() -> None:
    q = make_queue()
    for g, t in (("g1", 1), ("g2", 2), ("g3", 3)):
        for i in range(2):
            add(q, f"{g}-{i}", gang=g, created=t)
    # 2 < 3 so a second gang is taken; 4 >= 3 stops before the third.
    assert names(q.pop(3, 0)) == ["g1-0", "g1-1", "g2-0", "g2-1"]
    assert names(q.pop(3, 0)) == ["g3-0", "g3-1"]


def test_a_pop_leaves_gang_members_that_are_not_active() -> None:
    q = make_queue()
    add(q, "w0", gang="g")
    add(q, "w1", gang="g")
    assert names(q.pop(10, 0)) == ["w0", "w1"]
    q.done(key("w1"), Outcome.BACKOFF, 0)
    q.done(key("w0"), Outcome.ASSUMED, 0)
    add(q, "w2", gang="g")
    assert names(q.pop(10, 0)) == ["w2"]  # w1 is still backing off
    assert names(q.pop(10, 1.0)) == ["w1"]


# -- failed gangs -----------------------------------------------------------------------------------


def test_a_failed_gang_sorts_by_its_failure_time_behind_a_newer_gang() -> None:
    q = make_queue()
    add(q, "a", gang="old", created=0)
    add(q, "b", gang="old", created=0)
    assert names(q.pop(1, 0)) == ["a", "b"]
    add(q, "c", gang="new", created=5, now=5)
    q.gang_failed(key("old"), now=10)
    for k in ("a", "b"):
        q.done(key(k), Outcome.BACKOFF, now=10)
    assert pop_units(q, now=12) == [["c"], ["a", "b"]]


def test_a_failed_gang_waiting_for_an_event_keeps_its_turn() -> None:
    # Issue 22: an event moves a budget of the waiting gangs; one tried and failed (here "early", waiting for
    # capacity) must not fall behind one the queue held back ("late"), or freed capacity goes out of turn.
    q = make_queue()
    add(q, "a", gang="early", created=0)
    add(q, "c", gang="late", created=5)
    assert names(q.pop(1, 0)) == ["a"]
    q.done(key("a"), Outcome.UNSCHEDULABLE, now=10)
    q.gang_failed(key("early"), now=10)
    q.move_all(now=11)
    assert pop_units(q, now=11) == [["a"], ["c"]]


def test_a_failed_gang_gets_its_turn_back_once_it_waits_for_an_event() -> None:
    q = make_queue()
    add(q, "a", gang="early", created=0)
    assert names(q.pop(1, 0)) == ["a"]
    add(q, "c", gang="late", created=5, now=5)
    q.done(key("a"), Outcome.BACKOFF, now=10)
    q.gang_failed(key("early"), now=10)  # retried on a timer: behind "late"
    assert pop_units(q, now=12) == [["c"], ["a"]]
    q.done(key("c"), Outcome.UNSCHEDULABLE, now=12)
    q.done(key("a"), Outcome.UNSCHEDULABLE, now=12)
    q.gang_failed(key("early"), now=12)  # now it waits for capacity: its creation time again
    q.move_all(now=13)
    assert pop_units(q, now=13) == [["a"], ["c"]]


def test_without_a_failure_the_older_gang_keeps_the_head() -> None:
    q = make_queue()
    add(q, "a", gang="old", created=0)
    assert names(q.pop(1, 0)) == ["a"]
    add(q, "c", gang="new", created=5, now=5)
    q.done(key("a"), Outcome.BACKOFF, now=10)
    assert pop_units(q, now=12) == [["a"], ["c"]]


def test_a_gang_gone_from_the_queue_is_forgotten_and_a_new_one_of_its_name_starts_afresh() -> None:
    q = make_queue()
    add(q, "a", gang="old", created=0)
    add(q, "b", gang="old", created=0)
    assert names(q.pop(1, 0)) == ["a", "b"]
    q.gang_failed(key("old"), now=10)
    for k in ("a", "b"):
        q.done(key(k), Outcome.ASSUMED, now=10)  # placed after all: the gang's pods leave the queue
    add(q, "c", gang="new", created=5, now=11)
    add(q, "d", gang="old", created=0, now=11)  # the job recreated under the same gang name
    assert pop_units(q, now=12) == [["d"], ["c"]]  # by its creation time, not the old gang's failure


def test_the_queue_keeps_nothing_of_gangs_whose_pods_all_left() -> None:
    q = make_queue()
    for g in range(1000):
        add(q, f"p{g}", gang=f"g{g}", created=g)
    for entry in q.pop(2000, 0):
        q.done(entry.key, Outcome.BOUND, now=1)
    assert len(q) == 0 and not q._gangs  # memory follows the gangs in the queue, not all gangs ever seen


def test_gang_failed_resorts_gang_pods_already_active() -> None:
    q = make_queue()
    add(q, "a", gang="old", created=0)
    add(q, "c", gang="new", created=5)
    q.gang_failed(key("old"), now=10)
    assert pop_units(q, now=10) == [["c"], ["a"]]


# -- backoff ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "settings, expected",
    [
        ({}, [1, 2, 4, 8, 10, 10]),
        ({"initial_backoff": 0.5, "max_backoff": 3.0}, [0.5, 1, 2, 3, 3]),
    ],
)
def test_backoff_doubles_up_to_the_maximum(settings: dict, expected: list[float]) -> None:
    q = make_queue(**settings)
    add(q, "p")
    now = 100.0
    for delay in expected:
        assert names(q.pop(1, now)) == ["p"]
        q.done(key("p"), Outcome.BACKOFF, now)
        assert q.next_ready_at() == pytest.approx(now + delay)
        s = q.stats(now)
        assert (s.active, s.backoff, s.in_flight) == (0, 1, 0)
        assert s.next_ready_at == pytest.approx(now + delay)
        assert q.pop(1, now + delay - 0.01) == []
        now += delay


def test_backoff_never_overflows_however_many_attempts() -> None:
    # Past 1,025 attempts of one pod, initial * 2 ** (attempts-1) raised OverflowError (it crashed `phalanx simulate`).
    q = make_queue()
    add(q, "p")
    now = 0.0
    for attempt in range(1, 1_101):
        assert names(q.pop(1, now)) == ["p"]
        q.done(key("p"), Outcome.BACKOFF, now)
        ready = q.next_ready_at()
        assert ready == pytest.approx(now + min(2.0 ** min(attempt - 1, 10), 10.0))
        now = ready


@pytest.mark.parametrize("attempts", [0, 1, 2, 11, 1_024, 1_025, 1_026, 5_000, 10**9, 10**30])
@pytest.mark.parametrize(
    "initial, maximum", [(1.0, 10.0), (0.5, 3.0), (5e-324, 1e308), (1e300, float("inf")), (0.0, 10.0)]
)
def test_backoff_delay_is_the_capped_doubling(attempts: int, initial: float, maximum: float) -> None:
    exact = Fraction(initial) * 2 ** min(max(attempts - 1, 0), 3000)  # exact; past 2^3000 the cap always wins
    as_float = float(exact) if exact < 2**1024 else float("inf")  # beyond the largest double: infinite
    expected = maximum if exact >= maximum else as_float
    assert backoff_delay(attempts, initial, maximum) == expected


def test_backoff_pod_comes_back_at_its_time() -> None:
    q = make_queue()
    add(q, "p")
    q.pop(1, 0)
    q.done(key("p"), Outcome.BACKOFF, 0)
    assert q.pop(1, 0.999) == []
    assert names(q.pop(1, 1.0)) == ["p"]
    assert q.next_ready_at() is None


def test_next_ready_at_is_the_earliest_backoff() -> None:
    q = make_queue()
    add(q, "a")
    add(q, "b")
    q.pop(10, 0)
    q.done(key("a"), Outcome.BACKOFF, 5)  # ready at 6
    q.done(key("b"), Outcome.BACKOFF, 3)  # ready at 4
    assert q.next_ready_at() == pytest.approx(4)
    q.remove([key("b")])
    assert q.next_ready_at() == pytest.approx(6)


# -- unschedulable and move requests ------------------------------------------------------------------


def test_unschedulable_waits_for_move_all() -> None:
    q = make_queue()
    add(q, "p")
    q.pop(1, 0)
    q.done(key("p"), Outcome.UNSCHEDULABLE, 0)
    assert q.stats(0).unschedulable == 1
    assert q.pop(1, 10_000) == []
    assert q.next_ready_at() is None
    assert q.move_all(10_000) == 1
    assert names(q.pop(1, 10_000)) == ["p"]


@pytest.mark.parametrize("event_while_in_flight, where", [(True, "backoff"), (False, "unschedulable")])
def test_a_move_request_while_in_flight_sends_the_pod_to_backoff(event_while_in_flight: bool, where: str) -> None:
    q = make_queue()
    add(q, "p")
    add(q, "other")
    q.pop(10, 0)
    q.done(key("other"), Outcome.UNSCHEDULABLE, 0)
    if event_while_in_flight:
        assert q.move_all(0.5) == 1  # moves "other"; "p" is in flight
    q.done(key("p"), Outcome.UNSCHEDULABLE, 1.0)
    assert q._entries[key("p")].where == SubQueue(where)
    if event_while_in_flight:
        s = q.stats(1.0)
        assert (s.active, s.backoff, s.unschedulable) == (1, 1, 0)
        assert q.next_ready_at() == pytest.approx(2.0)  # first attempt: 1 s
        assert names(q.pop(10, 1.5)) == ["other"]
        assert names(q.pop(10, 2.0)) == ["p"]
    else:
        assert q.stats(1.0).unschedulable == 2
        assert q.pop(10, 1000) == []


def test_move_all_sends_a_pod_still_backing_off_to_backoff() -> None:
    q = make_queue()
    add(q, "p")
    q.pop(1, 0)
    q.done(key("p"), Outcome.BACKOFF, 0)  # backoff until 1
    assert names(q.pop(1, 1)) == ["p"]
    q.done(key("p"), Outcome.BACKOFF, 1)  # until 3
    assert names(q.pop(1, 3)) == ["p"]
    q.done(key("p"), Outcome.UNSCHEDULABLE, 3)
    q.move_all(3)  # its last backoff (until 3) has expired: straight to active
    assert names(q.pop(1, 3)) == ["p"]


def test_activate_gang_moves_waiting_siblings_to_active() -> None:
    q = make_queue()
    for n in ("a", "b", "c"):
        add(q, n, gang="g")
    add(q, "x", gang="h")
    assert names(q.pop(10, 0)) == ["a", "b", "c", "x"]
    q.done(key("a"), Outcome.BACKOFF, 0)
    q.done(key("b"), Outcome.UNSCHEDULABLE, 0)
    q.done(key("c"), Outcome.ASSUMED, 0)
    q.done(key("x"), Outcome.BACKOFF, 0)
    assert q.activate_gang(f"{NS}/g", 0) == 2
    s = q.stats(0)
    assert (s.active, s.backoff, s.unschedulable) == (2, 1, 0)
    assert names(q.pop(10, 0)) == ["a", "b"]  # x of the other gang is still backing off


# -- remove, re-add, in flight ----------------------------------------------------------------------


def test_remove_forgets_pods_wherever_they_are() -> None:
    q = make_queue()
    for n in ("a", "b", "c", "d"):
        add(q, n)
    q.pop(2, 0)  # a, b in flight
    q.done(key("b"), Outcome.BACKOFF, 0)
    assert q.remove([key("b"), key("c"), key("nope")]) == 2
    assert len(q) == 2
    s = q.stats(100)
    assert (s.active, s.backoff, s.in_flight) == (1, 0, 1)
    assert names(q.pop(10, 100)) == ["d"]
    assert q.next_ready_at() is None


def test_remove_a_gang_member_leaves_it_out_of_the_unit() -> None:
    q = make_queue()
    for n in ("w0", "w1", "w2"):
        add(q, n, gang="g")
    q.remove([key("w1")])
    assert names(q.pop(1, 0)) == ["w0", "w2"]


def test_re_adding_a_known_pod_replaces_it() -> None:
    q = make_queue()
    add(q, "a", created=0)
    add(q, "b", created=1)
    add(q, "b", created=1, prio=10, payload="b-v2")
    assert len(q) == 2
    popped = q.pop(1, 0)
    assert names(popped) == ["b"] and popped[0].payload == "b-v2" and popped[0].priority == 10
    assert names(q.pop(1, 0)) == ["a"]
    assert q.pop(1, 0) == []  # the old copy of b is not popped again


def test_re_adding_a_pod_in_backoff_keeps_its_attempts() -> None:
    q = make_queue()
    add(q, "p")
    for now in (0, 1):
        q.pop(1, now)
        q.done(key("p"), Outcome.BACKOFF, now)  # attempts 1, 2
    add(q, "p", payload="p-v2", now=1.5)
    assert q.stats(1.5).active == 1  # replaced: active at once
    q.pop(1, 1.5)
    q.done(key("p"), Outcome.BACKOFF, 1.5)  # third attempt: 4 s
    assert q.next_ready_at() == pytest.approx(5.5)


def test_re_adding_an_in_flight_pod_keeps_it_in_flight() -> None:
    q = make_queue()
    add(q, "p")
    assert names(q.pop(1, 0)) == ["p"]
    add(q, "p", prio=100, payload="p-v2")
    s = q.stats(0)
    assert (s.active, s.in_flight) == (0, 1)
    assert q.pop(1, 0) == []  # not handed out twice
    q.done(key("p"), Outcome.UNSCHEDULABLE, 0)
    q.move_all(0)
    popped = q.pop(1, 0)
    assert names(popped) == ["p"] and popped[0].payload == "p-v2"


def test_release_in_flight_puts_popped_pods_back() -> None:
    q = make_queue()
    add(q, "a")
    add(q, "w0", gang="g")
    add(q, "w1", gang="g")
    assert len(q.pop(10, 0)) == 3
    assert q.release_in_flight(0) == 3
    s = q.stats(0)
    assert (s.active, s.in_flight) == (3, 0)
    assert sorted(names(q.pop(10, 0))) == ["a", "w0", "w1"]
    assert q.release_in_flight(0) == 3
    assert q.release_in_flight(0) == 0


def test_done_for_a_pod_the_queue_forgot_re_adds_it_with_its_payload() -> None:
    q = make_queue()
    q.done(key("p"), Outcome.BACKOFF, 0, payload="p", gang=f"{NS}/g", gang_created_at=0)
    assert q.stats(0).backoff == 1
    assert names(q.pop(1, 1)) == ["p"]
    q.done(key("q"), Outcome.BACKOFF, 0)  # no payload: nothing to re-add
    assert len(q) == 1


@pytest.mark.parametrize("outcome", [Outcome.ASSUMED, Outcome.BOUND, Outcome.DROPPED])
def test_leaving_outcomes_drop_the_pod(outcome: Outcome) -> None:
    q = make_queue()
    add(q, "p")
    q.pop(1, 0)
    q.done(key("p"), outcome, 0)
    assert len(q) == 0
    assert q.move_all(0) == 0 and q.release_in_flight(0) == 0


# -- periodic flush ---------------------------------------------------------------------------------


def test_unschedulable_pods_are_flushed_after_the_period() -> None:
    q = make_queue(unschedulable_flush=60)
    add(q, "p")
    q.pop(1, 10)
    q.done(key("p"), Outcome.UNSCHEDULABLE, 10)
    assert q.next_ready_at() == pytest.approx(70)
    assert q.pop(1, 69.9) == []
    assert names(q.pop(1, 70)) == ["p"]


def test_a_zero_flush_period_never_flushes() -> None:
    q = make_queue(unschedulable_flush=0)
    add(q, "p")
    q.pop(1, 10)
    q.done(key("p"), Outcome.UNSCHEDULABLE, 10)
    assert q.pop(1, 1e9) == []


# -- stats and waiting ------------------------------------------------------------------------------


def test_stats_count_each_sub_queue() -> None:
    q = make_queue()
    for n in ("a", "b", "c", "d", "e"):
        add(q, n)
    assert names(q.pop(3, 0)) == ["a", "b", "c"]
    q.done(key("a"), Outcome.BACKOFF, 0)
    q.done(key("b"), Outcome.UNSCHEDULABLE, 0)
    s = q.stats(0.5)
    assert (s.active, s.backoff, s.unschedulable, s.in_flight) == (2, 1, 1, 1)
    assert s.next_ready_at == pytest.approx(1.0)
    assert len(q) == 5
    s = q.stats(1.0)  # a's backoff is over
    assert (s.active, s.backoff) == (3, 0)
    assert {e.where for e in q._entries.values()} == {SubQueue.ACTIVE, SubQueue.UNSCHEDULABLE, SubQueue.IN_FLIGHT}


def test_pop_with_wait_returns_when_a_pod_arrives() -> None:
    q = make_queue()
    timer = threading.Timer(0.05, lambda: add(q, "late"))
    timer.start()
    started = time.monotonic()
    got = q.pop(1, 0, wait_seconds=5)
    timer.join()
    assert names(got) == ["late"]
    assert time.monotonic() - started < 2


def test_pop_with_wait_times_out_empty() -> None:
    q = make_queue()
    started = time.monotonic()
    assert q.pop(1, 0, wait_seconds=0.05) == []
    assert time.monotonic() - started >= 0.04
