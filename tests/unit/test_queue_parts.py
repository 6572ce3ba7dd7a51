"""The scheduling queue's parts on their own: gangs' places in line, the backoff and unschedulable areas,
loans. (Their behaviour together, through SchedulingQueue, is test_scheduling_queue.py's.)"""

from __future__ import annotations

import itertools

from phalanx.queueing.backoff import Backoff
from phalanx.queueing.entry import Entry, SubQueue
from phalanx.queueing.gangs import Gangs
from phalanx.queueing.loans import Loans
from phalanx.queueing.settings import QueueSettings
from phalanx.queueing.unschedulable import Unschedulable


def entry(key: str, gang: str = "", gang_created_at: float = 0.0) -> Entry:
    return Entry(key, 0, 0.0, gang, gang_created_at, payload=key)


def test_a_gang_sorts_by_its_first_creation_time_then_by_its_failure_and_is_forgotten_with_its_last_entry() -> None:
    gangs = Gangs()
    a, b = entry("a", "g", 5.0), entry("b", "g", 9.0)
    for e in (a, b):
        gangs.created(e.gang, e.gang_created_at)
        gangs.join(e)
    assert gangs.place(b) == 5.0 and gangs.members("g") == {"a", "b"}
    gangs.failed("g", 20.0)
    assert gangs.place(a) == 20.0
    gangs.keeps_turn("g")
    assert gangs.place(a) == 5.0
    gangs.leave(a)
    gangs.leave(b)
    assert not gangs and gangs.members("g") == set() and gangs.place(b) == 9.0


def test_backoff_hands_out_what_is_due_soonest_first_and_skips_what_moved_since() -> None:
    entries = {k: entry(k) for k in "abc"}
    backoff = Backoff(entries, QueueSettings(initial_backoff=1.0, max_backoff=4.0), itertools.count(1))
    for k, attempts in (("a", 3), ("b", 1), ("c", 2)):
        entries[k].attempts = attempts
        backoff.push(entries[k], now=10.0)
    assert [entries[k].backoff_until for k in "abc"] == [14.0, 11.0, 12.0]
    entries["c"].where = SubQueue.ACTIVE  # moved on by someone else: its heap item is stale
    assert backoff.next_ready_at() == 11.0
    assert [e.key for e in backoff.due(14.0)] == ["b", "a"]
    assert backoff.next_ready_at() is None


def test_the_unschedulable_area_flushes_its_oldest_first_and_stops_at_the_first_not_due() -> None:
    area = Unschedulable(QueueSettings(unschedulable_flush=10.0))
    for k, since in (("a", 1.0), ("b", 2.0), ("c", 3.0)):
        area.add(entry(k), since)
    assert area.flush_at() == 11.0
    assert [e.key for e in area.due(12.5)] == ["a", "b"]
    area.discard("a")
    assert len(area) == 2 and area.flush_at() == 12.0


def test_loans_come_back_on_a_new_incarnation_or_a_silent_lease_in_key_order() -> None:
    clock = [0.0]
    entries = {k: entry(k) for k in ("b", "a", "c")}
    loans = Loans(entries, QueueSettings(lease_seconds=5.0), lambda: clock[0])
    loans.heard_from("s1", "1")
    loans.heard_from("s2", "1")
    for k, consumer in (("b", "s1"), ("a", "s1"), ("c", "s2")):
        loans.lend(entries[k], consumer)
    assert [e.key for e in loans.heard_from("s1", "2")] == ["a", "b"]
    assert entries["a"].lent_to == "" and loans.returned == 2
    clock[0] = 4.0
    loans.heard_from("s1", "2")
    clock[0] = 6.0
    assert [e.key for e in loans.expire()] == ["c"] and loans.returned == 3
