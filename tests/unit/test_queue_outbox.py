"""The feed's queue outbox on a rebuild: the first pending pods in the queue's order go before the loop starts,
the rest in chunks that never split a gang, and what the queue fails to take is staged again."""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.cluster.outbox import QueueOutbox, in_queue_order
from phalanx.framework.snapshot import Snapshot
from phalanx.model.objects import PodInfo
from phalanx.scheduling.ports import Verdict


class RecordingQueue:
    """The queue client the outbox calls (a process boundary): each Add's pods, and a failure on demand."""

    def __init__(self, fail_on_add: int = 0) -> None:
        self.adds: list[list[str]] = []
        self.fail_on_add = fail_on_add  # the n-th Add call (1-based) fails; 0: none
        self.calls = 0

    def add(self, pods: list[PodInfo], now: float, only_missing: bool = False) -> Any:
        self.calls += 1
        if self.calls == self.fail_on_add:
            raise ConnectionError("queue unreachable")
        self.adds.append([p.key for p in pods])

    def remove(self, keys: list[str]) -> None:
        pass

    def done(self, verdicts: list[Verdict], activate: list[str], failed: list[str], now: float) -> None:
        pass

    def move_all(self, event: str, now: float, freed: Any = None) -> None:
        pass


def outbox(queue: RecordingQueue, hold: float = 0.0, gathered: Any = lambda _g: True) -> QueueOutbox:
    return QueueOutbox(queue, lambda: Snapshot(), hold=hold, gathered=gathered)


def gang_pods(gang: str, n: int, created: float, priority: int = 0) -> dict[str, PodInfo]:
    pods = [
        PodInfo("ns", f"{gang}-{i}", priority=priority, gang=f"ns/{gang}", gang_created_at=created, created_at=created)
        for i in range(n)
    ]
    return {p.key: p for p in pods}


def plain(name: str, created: float, priority: int = 0) -> dict[str, PodInfo]:
    return {f"ns/{name}": PodInfo("ns", name, priority=priority, created_at=created)}


def test_the_queue_order_puts_priority_first_then_the_gangs_creation_then_names() -> None:
    staged = {
        **gang_pods("late", 2, created=30.0),
        **plain("early-plain", created=5.0),
        **gang_pods("early", 2, created=10.0),
        **plain("urgent", created=50.0, priority=100),
    }
    order = [p.key for p in in_queue_order(list(staged.values()))]
    assert order == ["ns/urgent", "ns/early-plain", "ns/early-0", "ns/early-1", "ns/late-0", "ns/late-1"]


def test_a_gang_sorts_by_its_highest_priority_so_its_pods_stay_together() -> None:
    staged = gang_pods("mixed", 3, created=20.0)
    staged["ns/mixed-2"].priority = 10  # one pod of the gang asks more than the others
    staged.update(plain("between", created=1.0, priority=5))
    order = [p.key for p in in_queue_order(list(staged.values()))]
    assert order == ["ns/mixed-0", "ns/mixed-1", "ns/mixed-2", "ns/between"]


def test_a_rebuilds_flush_sends_the_first_pods_whole_gangs_and_keeps_the_rest() -> None:
    q = RecordingQueue()
    box = outbox(q)
    staged: dict[str, PodInfo] = {}
    for g in range(10):  # gangs of 3 created one second apart, staged newest first
        staged.update(gang_pods(f"g{9 - g}", 3, created=float(9 - g)))
    box.stage(staged, [])
    assert box.flush(0.0, first_adds=4)
    # 4 pods cut g1 in two: its third pod goes too
    assert q.adds == [["ns/g0-0", "ns/g0-1", "ns/g0-2", "ns/g1-0", "ns/g1-1", "ns/g1-2"]]
    assert box.pending()
    rest = box.take_adds(0.0)
    assert [p.key for p in rest][:3] == ["ns/g2-0", "ns/g2-1", "ns/g2-2"] and len(rest) == 24
    assert not box.pending()  # taken: the outbox holds nothing until the send fails


def test_the_rest_goes_in_chunks_that_never_split_a_gang() -> None:
    q = RecordingQueue()
    box = outbox(q)
    staged: dict[str, PodInfo] = {}
    for g in range(7):
        staged.update(gang_pods(f"g{g}", 3, created=float(g)))
    box.stage(staged, [])
    assert box.send_adds(box.take_adds(0.0), 0.0, chunk=5)
    assert [len(a) for a in q.adds] == [6, 6, 6, 3]  # 5 would cut a gang: each chunk ends with one whole
    assert all(len({k.rsplit("-", 1)[0] for k in a}) == len(a) // 3 for a in q.adds)
    assert sorted(k for a in q.adds for k in a) == sorted(staged)


def test_pods_the_queue_fails_to_take_are_staged_again_and_sent_by_the_next_flush() -> None:
    q = RecordingQueue(fail_on_add=2)
    box = outbox(q)
    staged: dict[str, PodInfo] = {}
    for g in range(4):
        staged.update(gang_pods(f"g{g}", 3, created=float(g)))
    box.stage(staged, [])
    assert not box.send_adds(box.take_adds(0.0), 0.0, chunk=3)
    assert q.adds == [["ns/g0-0", "ns/g0-1", "ns/g0-2"]]  # the second chunk failed, the third was not tried
    assert box.pending()
    assert box.flush(0.0)
    assert sorted(q.adds[1]) == [f"ns/g{g}-{i}" for g in (1, 2, 3) for i in range(3)]
    assert not box.pending()


def test_pods_held_for_their_gang_are_not_taken_for_the_backlog() -> None:
    q = RecordingQueue()
    box = outbox(q, hold=5.0, gathered=lambda gang: gang != "ns/waiting")
    box.stage({**gang_pods("ready", 2, created=1.0), **gang_pods("waiting", 1, created=0.0)}, [])
    taken = box.take_adds(0.0)
    assert [p.key for p in taken] == ["ns/ready-0", "ns/ready-1"]
    assert box.pending() and box.next_release() == pytest.approx(5.0)  # the held pod stays, with its hold
