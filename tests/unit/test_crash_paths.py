"""What the scheduler does when a process it talks to fails mid-step (issue: nothing half-bound, nothing
stuck). Real Redis, in-process queue and binder; the binder "dies" by raising from its port, as the gRPC
client does when the binder is down."""

from __future__ import annotations

from typing import Any

import pytest
from builders import gang_spec as gang
from builders import model_node as node
from builders import model_pod as pod
from local_scheduler import LocalScheduler as Harness

from phalanx.queueing.scheduling_queue import QueueSettings, SchedulingQueue, SubQueue
from phalanx.state.store import StateStore


class FlakyBinder:
    """The binder port, down (raising like an UNAVAILABLE gRPC call) while `down` is True."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.down = True
        self.calls = 0

    def bind(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.down:
            raise ConnectionError("binder unavailable")
        return self.inner.bind(*args, **kwargs)

    def bind_many(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.down:
            raise ConnectionError("binder unavailable")
        return self.inner.bind_many(*args, **kwargs)

    def report(self, *args: Any, **kwargs: Any) -> None:
        self.inner.report(*args, **kwargs)


@pytest.fixture
def h(store: StateStore) -> Harness:
    harness = Harness(store)
    harness.sched.binder = FlakyBinder(harness.binder)  # type: ignore[assignment]
    return harness


def in_flight(h: Harness) -> int:
    return h.queue.queue.stats(0).in_flight


def states(store: StateStore) -> dict[str, str]:
    return {k: r.state for k, r in store.load_pods().items()}


def test_a_gang_whose_binder_is_down_keeps_its_reservations_and_binds_when_it_is_back(h: Harness) -> None:
    h.sched.upsert_nodes([node("n1", gpus=4)])
    h.sched.upsert_gangs([gang("train", 3)])
    h.queue.add([pod(f"w{i}", "train", gpus=1) for i in range(3)], 0)
    h.sched.step(0)
    assert h.bound() == {}
    assert in_flight(h) == 0  # every popped pod got a verdict
    assert set(states(h.store).values()) == {"assumed"}  # reservations kept, not dropped
    h.sched.binder.down = False  # type: ignore[attr-defined]
    h.sched.step(1)  # past the retry's backoff
    assert sorted(h.bound()) == ["default/w0", "default/w1", "default/w2"]
    assert set(states(h.store).values()) == {"bound"}


def test_an_ordinary_pod_whose_bind_failed_is_bound_later_not_kept_assumed(h: Harness) -> None:
    h.sched.upsert_nodes([node("n1", gpus=1)])
    h.queue.add([pod("solo", gpus=1)], 0)
    h.sched.step(0)
    assert states(h.store) == {"default/solo": "assumed"} and in_flight(h) == 0
    h.sched.binder.down = False  # type: ignore[attr-defined]
    h.sched.step(30)
    assert h.bound() == {"default/solo": "n1"}
    assert states(h.store) == {"default/solo": "bound"}


def test_a_restarted_scheduler_binds_an_ordinary_pod_left_assumed(store: StateStore) -> None:
    first = Harness(store)
    first.sched.binder = FlakyBinder(first.binder)  # type: ignore[assignment]
    first.sched.upsert_nodes([node("n1", gpus=1)])
    first.queue.add([pod("solo", gpus=1)], 0)
    first.sched.step(0)
    assert states(store) == {"default/solo": "assumed"}
    second = Harness(store)  # a new process: memory from Redis only
    second.sched.recover(5)
    assert second.bound() == {"default/solo": "n1"}


def test_a_gang_placed_whole_is_not_timed_out_while_its_binder_is_down(h: Harness) -> None:
    h.sched.upsert_nodes([node("n1", gpus=4)])
    h.sched.upsert_gangs([gang("train", 2, wait=5)])
    h.queue.add([pod(f"w{i}", "train", gpus=1) for i in range(2)], 0)
    h.sched.step(0)
    h.sched.step(50)  # far past its 5 s wait, binder still down
    assert h.sched.gangs.record("default/train").timed_out is False
    assert set(states(h.store).values()) == {"assumed"}
    h.sched.binder.down = False  # type: ignore[attr-defined]
    h.sched.step(60)
    assert len(h.bound()) == 2 and not h.annotations()


def test_a_step_that_fails_midway_returns_its_pods_and_reloads_memory(h: Harness) -> None:
    h.sched.binder.down = False  # type: ignore[attr-defined]
    h.sched.upsert_nodes([node("n1", gpus=2)])
    h.queue.add([pod("a", gpus=1)], 0)
    original = h.sched.store.apply
    h.sched.store.apply = lambda txn: (_ for _ in ()).throw(ConnectionError("redis down"))  # type: ignore[assignment]
    with pytest.raises(ConnectionError):
        h.sched.step(0)
    h.sched.store.apply = original  # type: ignore[method-assign]
    assert h.sched.needs_resync
    h.sched.snapshot.used[:] = 12345  # whatever memory holds now is not trusted
    h.sched.step(10)  # reloads memory; the pod's verdict (backoff) reaches the queue
    h.sched.step(20)
    assert h.bound() == {"default/a": "n1"}  # the pod came back and was scheduled
    assert in_flight(h) == 0
    assert h.sched.snapshot.used_map() == {k: v for k, v in h.store.load_used().items() if v}


def test_the_timeout_message_counts_what_was_placed_before_the_release(store: StateStore) -> None:
    h = Harness(store)
    h.sched.upsert_nodes([node("n1", gpus=2)])
    h.sched.upsert_gangs([gang("big", 3, wait=5)])
    h.queue.add([pod(f"w{i}", "big", gpus=1) for i in range(2)], 0)  # only 2 of 3 ever created
    h.sched.step(0)
    h.sched.step(10)
    message = h.conditions()["default/w0"]
    assert "2/3 pods placed" in message, message


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _queue(lease: float = 10.0) -> tuple[SchedulingQueue, FakeClock]:
    clock = FakeClock()
    q = SchedulingQueue(QueueSettings(lease_seconds=lease), monotonic=clock)
    for name in ("a", "b"):
        q.add(f"default/{name}", priority=0, created_at=0, gang="", gang_created_at=0, payload=name, now=0)
    return q, clock


def test_a_restarted_consumer_gets_its_predecessors_pods_back_at_once() -> None:
    q, _ = _queue()
    assert len(q.pop(10, 0, consumer="sched", incarnation="1")) == 2
    assert q.stats(0).in_flight == 2
    again = q.pop(10, 0, consumer="sched", incarnation="2")  # the same scheduler, restarted
    assert sorted(e.key for e in again) == ["default/a", "default/b"]
    assert q.returned_loans == 2


def test_pods_of_a_silent_consumer_return_after_the_lease() -> None:
    q, clock = _queue(lease=10.0)
    q.pop(10, 0, consumer="sched", incarnation="1")
    clock.t = 5.0
    assert q.pop(10, 0, consumer="other", incarnation="x") == []  # within the lease: still lent
    clock.t = 11.0
    back = q.pop(10, 0, consumer="other", incarnation="x")
    assert sorted(e.key for e in back) == ["default/a", "default/b"]


def test_a_consumer_that_keeps_popping_keeps_its_loans() -> None:
    q, clock = _queue(lease=10.0)
    q.pop(1, 0, consumer="sched", incarnation="1")
    for t in (6.0, 12.0, 18.0):
        clock.t = t
        q.pop(1, 0, consumer="sched", incarnation="1")  # renews the lease
    entries = {e.key: e.where for e in q._entries.values()}
    assert list(entries.values()).count(SubQueue.IN_FLIGHT) == 2
    assert q.returned_loans == 0


def test_a_verdict_ends_the_loan(store: StateStore) -> None:
    q, clock = _queue(lease=10.0)
    popped = q.pop(10, 0, consumer="sched", incarnation="1")
    from phalanx.queueing.scheduling_queue import Outcome

    for e in popped:
        q.done(e.key, Outcome.ASSUMED, 0)
    clock.t = 100.0
    assert q.pop(10, 0, consumer="sched", incarnation="2") == [] and q.returned_loans == 0


def test_two_strict_gangs_interleaved_the_one_that_fits_binds_without_waiting_for_the_others_timeout(
    store: StateStore,
) -> None:
    """Gang a can never fit (2 x 3 GPUs on a 4-GPU node), gang b can (2 x 2). Their pods arrive
    interleaved. Before the fix, b waited for a's timeout (600 s): releasing a's reservations woke nobody."""
    h = Harness(store)
    h.sched.upsert_nodes([node("n1", gpus=4)])
    h.sched.upsert_gangs([gang("a", 2, wait=600), gang("b", 2, wait=600)])
    t = 0.0
    for p in (
        pod("a0", "a", gpus=3, created=0),
        pod("b0", "b", gpus=2, created=1),
        pod("a1", "a", gpus=3, created=0),
        pod("b1", "b", gpus=2, created=1),
    ):
        h.queue.add([p], t)
        h.sched.step(t)
        t += 0.3
    while not h.bound() and t < 600:
        r = h.sched.step(t)
        t = max(t + 0.5, r.next_wakeup or 0)
    assert h.bound() == {"default/b0": "n1", "default/b1": "n1"}
    assert t < 30


def test_a_pod_turned_away_by_an_invalid_cycle_lets_the_cycle_end() -> None:
    """Root cause of gangs left pending on an empty cluster: the pods of a Strict gang reach the scheduler
    apart; one fails alone and invalidates the cycle; its sibling, turned away by the invalid cycle, was
    not counted as tried, so the cycle never ended and every later attempt of the gang was refused."""
    from phalanx.gang.manager import GangManager

    gm = GangManager(60)
    gm.upsert(gang("g", 2))
    stmt = gm.begin()
    key = "default/g"
    assert gm.try_enter_cycle(key, "p0", stmt) and gm.try_enter_cycle(key, "p1", stmt)
    gm.invalidate_cycle(key, stmt)  # both tried and failed together: cycle 2 starts
    assert stmt.record(key).cycle == 2 and stmt.record(key).valid
    assert gm.try_enter_cycle(key, "p0", stmt)  # p0 alone this time ...
    gm.invalidate_cycle(key, stmt)  # ... and it fails: cycle 2 is invalid until p1 passes
    assert not stmt.record(key).valid
    assert not gm.try_enter_cycle(key, "p1", stmt)  # p1 turned away, but counted: the cycle ends
    assert stmt.record(key).cycle == 3 and stmt.record(key).valid
    assert gm.try_enter_cycle(key, "p0", stmt) and gm.try_enter_cycle(key, "p1", stmt)


def test_a_pod_that_lost_its_place_may_try_again_in_a_valid_cycle() -> None:
    """A bind the API server refused, or a reservation Redis lost, sends a gang's pod back: in a valid
    cycle it is tried again (it was turned away as 'already tried' until the gang's timeout)."""
    from phalanx.gang.manager import GangManager

    gm = GangManager(60)
    gm.upsert(gang("g", 3))
    stmt = gm.begin()
    assert gm.try_enter_cycle("default/g", "p0", stmt) and gm.try_enter_cycle("default/g", "p1", stmt)
    assert gm.try_enter_cycle("default/g", "p1", stmt)


def test_a_satisfied_gangs_late_pod_whose_bind_failed_is_bound_when_the_binder_is_back(h: Harness) -> None:
    """Once satisfied, a gang's later pods are reserved as ordinary pods (outside the gang's list of
    reserved pods); a bind of one that did not finish is still sent again, and after a restart too."""
    h.sched.binder.down = False  # type: ignore[attr-defined]
    h.sched.upsert_nodes([node("n1", gpus=4)])
    h.sched.upsert_gangs([gang("train", 2, total=3)])
    h.queue.add([pod(f"w{i}", "train", gpus=1) for i in range(2)], 0)
    h.sched.step(0)
    assert sorted(h.bound()) == ["default/w0", "default/w1"]  # satisfied
    h.sched.binder.down = True  # type: ignore[attr-defined]
    h.queue.add([pod("w2", "train", gpus=1)], 1)
    h.sched.step(1)
    assert "default/w2" not in h.bound() and states(h.store)["default/w2"] == "assumed"
    fresh = Harness(h.store)  # a restart: the decided bind is found in Redis and sent again
    fresh.queue = h.queue
    fresh.sched.queue = h.queue
    fresh.sched.recover(2)
    assert h.bound()["default/w2"] == "n1"
