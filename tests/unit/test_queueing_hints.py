"""Queueing hints: an unschedulable pod is retried only by an event that may help it, and never stranded.

The queue's side (which events move which pods), the scheduler's side (what it reports), and the two
together: a GPU-starved gang is not retried when CPU-only pods finish, and binds once GPUs free; and, on
random workloads, nothing placeable is ever left waiting in the unschedulable sub-queue.
"""

from __future__ import annotations

import copy
import random
from functools import partial

import pytest
from builders import gang_spec, model_node, model_pod
from local_scheduler import LocalScheduler

from phalanx.gang.manager import GangStatus
from phalanx.model.objects import Placement, PodInfo, Taint
from phalanx.queueing.hints import Freed, FreedCapacity, Hint, helps
from phalanx.queueing.scheduling_queue import Outcome, QueueSettings, SchedulingQueue, SubQueue
from phalanx.rpc import validation
from phalanx.rpc.queue_wire import HintDecoder, freed_from_pb, freed_to_pb, hint_from_pb, hint_to_pb
from phalanx.scheduling.ports import Carry
from phalanx.state.store import StateStore
from phalanx.v1 import objects_pb2, queue_pb2

GPU = "nvidia.com/gpu"
GPU_SHARE = "phalanx.dev/gpu-share"


# -- hints against events ----------------------------------------------------------------------------
def test_a_cpu_release_does_not_help_a_pod_short_of_gpus() -> None:
    hint = Hint.of({GPU: 8000, "cpu": 4000}, {GPU})
    cpu_freed = Freed("n1", frozenset({"cpu", "memory"}), {"cpu": 60_000, GPU: 4000})
    gpu_freed = Freed("n2", frozenset({GPU, "cpu"}), {"cpu": 60_000, GPU: 8000})
    assert not helps(hint, [cpu_freed])
    assert helps(hint, [cpu_freed, gpu_freed])
    # Too few GPUs freed on the node for this pod: no help either.
    assert not helps(hint, [Freed("n2", frozenset({GPU}), {"cpu": 60_000, GPU: 7000})])


def test_capacity_freed_on_a_node_the_pod_cannot_use_does_not_help() -> None:
    hint = Hint.of({GPU: 1000}, {GPU}, nodes={"a1", "a2"})
    assert not helps(hint, [Freed("b1", frozenset({GPU}), {GPU: 8000})])
    assert helps(hint, [Freed("a2", frozenset({GPU}), {GPU: 1000})])


def test_without_amounts_the_released_resource_names_decide() -> None:
    hint = Hint.of(None, {GPU})
    assert not helps(hint, [Freed("n", frozenset({"cpu"}))])
    assert helps(hint, [Freed("n", frozenset({GPU}))])
    assert helps(hint, [Freed("n")])  # an event that does not say what it released may help anyone


def test_unknown_and_node_only_hints() -> None:
    assert helps(None, [Freed("n", frozenset({"cpu"}), {"cpu": 1})])
    assert helps(Hint(), [Freed("n", frozenset({"cpu"}), {"cpu": 1})])
    assert not helps(Hint(node_change_only=True), [Freed("n", frozenset({GPU}), {GPU: 8000})])


def test_a_gang_hint_counts_slots_across_nodes_and_captures_what_was_taken() -> None:
    # 8 pods of one GPU; when it failed, n1 could hold 3 of them.
    hint = Hint.of({GPU: 1000}, {GPU}, pods=8, slots={"n1": 3})
    assert not helps(hint, [Freed("n2", frozenset({GPU}), {GPU: 4000})])  # 3 + 4 < 8
    assert helps(hint, [Freed("n3", frozenset({GPU}), {GPU: 1000})])  # 3 + 4 + 1
    hint = Hint.of({GPU: 1000}, {GPU}, pods=8, slots={"n1": 3})
    assert not helps(
        hint,
        [
            Freed("n2", frozenset({GPU}), {GPU: 4000}),
            Freed("n1", free={GPU: 0}, taken_only=True),  # n1 was filled meanwhile
            Freed("n3", frozenset({GPU}), {GPU: 1000}),
        ],
    )
    # A release on a node that still holds none of the pods changes nothing for the gang.
    hint = Hint.of({GPU: 8000}, {GPU}, pods=2, slots={"n1": 1, "n2": 1})
    assert not helps(hint, [Freed("n3", frozenset({GPU}), {GPU: 7000})])


def test_freed_capacity_merges_per_node_and_refreshes() -> None:
    f = FreedCapacity()
    f.add("n1", {GPU}, {GPU: 2000})
    f.add("n1", {"cpu"}, {GPU: 1000, "cpu": 5})
    f.taken("n2")
    assert f.released() and len(f) == 2
    (ev,) = f.events()  # n2 has no amounts yet: nothing to say about it
    assert ev.resources == {GPU, "cpu"} and ev.free == {GPU: 2000, "cpu": 5}
    f.refresh(lambda node: None if node == "gone" else {GPU: 7000})
    assert [(e.node, e.free, e.taken_only) for e in f.events()] == [
        ("n1", {GPU: 7000}, False),
        ("n2", {GPU: 7000}, True),
    ]
    g = FreedCapacity()
    g.taken("n3")
    assert not g.released()


def test_hints_and_freed_capacity_survive_the_wire() -> None:
    hint = Hint.of({GPU: 8000, "cpu": 4000}, {GPU, "cpu"}, {"a", "b"}, pods=16, slots={"a": 1})
    back = hint_from_pb(hint_to_pb(hint))
    assert (back.needs, back.insufficient, back.nodes, back.pods, back.slots) == (
        hint.needs,
        hint.insufficient,
        hint.nodes,
        hint.pods,
        hint.slots,
    )
    assert back.tally is not None and back.tally.total == 1
    f = FreedCapacity()
    f.add("n1", {GPU}, {GPU: 8000})
    f.taken("n2")
    f.refresh(lambda node: {GPU: 1000})
    assert freed_from_pb(freed_to_pb(f)) == f.events()
    # Equal hints in one request decode to one object: the queue judges it once for the whole gang.
    decode = HintDecoder()
    results = [queue_pb2.PodResult(hint=hint_to_pb(hint)) for _ in range(3)] + [queue_pb2.PodResult()]
    decoded = [decode(r) for r in results]
    assert decoded[0] is decoded[1] is decoded[2] and decoded[3] is None


# -- the queue ---------------------------------------------------------------------------------------
def _unschedulable(q: SchedulingQueue, key: str, hint: Hint | None, gang: str = "", now: float = 0.0) -> None:
    q.add(key, priority=0, created_at=now, gang=gang, gang_created_at=now, payload=key, now=now)
    assert [e.key for e in q.pop(1, now)] == [key] or gang
    q.done(key, Outcome.UNSCHEDULABLE, now, hint=hint)


def _where(q: SchedulingQueue, key: str) -> SubQueue:
    return q._entries[key].where


def test_freed_capacity_moves_only_the_pods_it_may_help() -> None:
    q = SchedulingQueue(QueueSettings(unschedulable_flush=0))
    _unschedulable(q, "d/gpu", Hint.of({GPU: 8000}, {GPU}))
    _unschedulable(q, "d/cpu", Hint.of({"cpu": 8000}, {"cpu"}))
    _unschedulable(q, "d/unknown", None)
    _unschedulable(q, "d/node", Hint(node_change_only=True))
    moved = q.move_all(1, [Freed("n1", frozenset({"cpu"}), {"cpu": 16_000, GPU: 0})])
    assert moved == 2 and q.moves_skipped == 2
    assert {k for k in q._entries if _where(q, k) == SubQueue.ACTIVE} == {"d/cpu", "d/unknown"}
    assert _where(q, "d/gpu") == _where(q, "d/node") == SubQueue.UNSCHEDULABLE
    assert q.move_all(2, [Freed("n1", frozenset({GPU}), {"cpu": 16_000, GPU: 8000})]) == 1
    assert _where(q, "d/gpu") == SubQueue.ACTIVE
    assert q.move_all(3) == 1  # a node added or changed: every pod, node_change_only included
    assert _where(q, "d/node") == SubQueue.ACTIVE


def test_capacity_only_taken_moves_nothing() -> None:
    q = SchedulingQueue(QueueSettings(unschedulable_flush=0))
    _unschedulable(q, "d/p", None)
    assert q.move_all(1, [Freed("n1", free={GPU: 0}, taken_only=True)]) == 0
    assert _where(q, "d/p") == SubQueue.UNSCHEDULABLE


def test_a_gang_moves_whole_when_one_of_its_pods_may_be_helped() -> None:
    q = SchedulingQueue(QueueSettings(unschedulable_flush=0))
    for i, hint in enumerate([Hint.of({GPU: 1000}, {GPU}), Hint(node_change_only=True)]):
        q.add(f"d/g{i}", priority=0, created_at=0, gang="d/g", gang_created_at=0, payload=i, now=0)
    assert len(q.pop(10, 0)) == 2
    q.done("d/g0", Outcome.UNSCHEDULABLE, 0, hint=Hint.of({GPU: 1000}, {GPU}))
    q.done("d/g1", Outcome.UNSCHEDULABLE, 0, hint=Hint(node_change_only=True))
    assert q.move_all(1, [Freed("n", frozenset({GPU}), {GPU: 1000})]) == 2
    assert [e.key for e in q.pop(10, 1)] == ["d/g0", "d/g1"]


def test_an_event_while_in_flight_sends_the_pod_to_backoff_only_if_it_may_help() -> None:
    q = SchedulingQueue(QueueSettings(unschedulable_flush=0))
    for name in ("gpu", "cpu"):
        q.add(f"d/{name}", priority=0, created_at=0, gang="", gang_created_at=0, payload=name, now=0)
    assert len(q.pop(10, 0)) == 2
    q.move_all(0.5, [Freed("n", frozenset({"cpu"}), {"cpu": 8000, GPU: 0})])  # while both are in flight
    q.done("d/gpu", Outcome.UNSCHEDULABLE, 1, hint=Hint.of({GPU: 1000}, {GPU}))
    q.done("d/cpu", Outcome.UNSCHEDULABLE, 1, hint=Hint.of({"cpu": 1000}, {"cpu"}))
    assert _where(q, "d/gpu") == SubQueue.UNSCHEDULABLE
    assert _where(q, "d/cpu") == SubQueue.BACKOFF


def test_gangs_moved_by_their_slot_counts_go_a_budget_at_a_time() -> None:
    """Capacity for one 8-pod gang frees: not every waiting gang is retried for it. The first in queue
    order is; once it has been answered, the others are judged on the counts it left."""
    q = SchedulingQueue(QueueSettings(unschedulable_flush=0))
    for g in range(20):
        for i in range(8):
            q.add(f"d/g{g:02}-{i}", priority=0, created_at=g, gang=f"d/g{g:02}", gang_created_at=g, payload=None, now=0)
    popped = q.pop(1000, 0)
    assert len(popped) == 160
    for e in popped:  # each failed with 7 free GPUs on n1: 7 of its 8 pods fit
        q.done(e.key, Outcome.UNSCHEDULABLE, 0, hint=Hint.of({GPU: 1000}, {GPU}, pods=8, slots={"n1": 7}))
    q.move_all(1, [Freed("n2", frozenset({GPU}), {GPU: 1000})])  # room for one gang
    first = q.pop(1000, 1)
    assert len(first) == 64  # MOVE_BUDGET: 8 gangs of 8, in queue order
    assert {e.gang for e in first} == {f"d/g{g:02}" for g in range(8)}
    # The first is placed (n1 and n2 are full now), the other 7 fail again with no room at all.
    placed = [e for e in first if e.gang == "d/g00"]
    for e in placed:
        q.done(e.key, Outcome.ASSUMED, 1)
    q.move_all(1, [Freed("n1", free={GPU: 0}, taken_only=True), Freed("n2", free={GPU: 0}, taken_only=True)])
    for e in first:
        if e.gang != "d/g00":
            q.done(e.key, Outcome.UNSCHEDULABLE, 1, hint=Hint.of({GPU: 1000}, {GPU}, pods=8))
    assert q.pop(1000, 1) == []  # the 12 held back do not fit any more: they wait for the next event
    assert q.stats(1).unschedulable == 19 * 8
    q.move_all(2, [Freed("n3", frozenset({GPU}), {GPU: 8000}), Freed("n4", frozenset({GPU}), {GPU: 8000})])
    assert len(q.pop(1000, 2)) == 64  # room for two gangs: again a budget, the oldest failures first


def test_held_back_gangs_still_fitting_move_once_the_moved_ones_are_answered() -> None:
    q = SchedulingQueue(QueueSettings(unschedulable_flush=0))
    for g in range(10):
        for i in range(8):
            q.add(f"d/g{g}-{i}", priority=0, created_at=g, gang=f"d/g{g}", gang_created_at=g, payload=None, now=0)
    for e in q.pop(1000, 0):
        q.done(e.key, Outcome.UNSCHEDULABLE, 0, hint=Hint.of({GPU: 1000}, {GPU}, pods=8))
    q.move_all(1, [Freed(f"n{i}", frozenset({GPU}), {GPU: 8000}) for i in range(10)])  # room for all ten
    moved = []
    while batch := q.pop(1000, 1):
        moved += batch
        for e in batch:
            q.done(e.key, Outcome.ASSUMED, 1)
    assert len(moved) == 80


# -- the scheduler and the queue together ------------------------------------------------------------
# Roomy nodes and 4 GiB pods: memory is never what these workloads run short of.
_node = partial(model_node, memory_gib=512)
_pod = partial(model_pod, memory_gib=4)


class Harness(LocalScheduler):
    """Counts scheduling attempts; gangs never time out (their waits are not what these tests are about)."""

    def __init__(self, store: StateStore) -> None:
        super().__init__(store, default_wait=1e6)
        self.attempts = 0

    def step(self, now: float, finished: list[str] = ()) -> None:  # type: ignore[assignment]
        carry = Carry()
        if finished:
            self.sched.release_pods(list(finished), carry.freed)
        self.attempts += self.sched.step(now, carry).attempted


@pytest.fixture
def h(store: StateStore) -> Harness:
    return Harness(store)


def test_a_gpu_starved_gang_is_retried_only_when_gpus_free(h: Harness) -> None:
    h.sched.upsert_nodes([_node("gpu-1", gpus=8), _node("gpu-2", gpus=8), _node("cpu-1")])
    h.sched.upsert_gangs([gang_spec("hold", 2, wait=None), gang_spec("big", 2, wait=None)])
    h.queue.add([_pod(f"hold-{i}", "hold", gpus=6, created=0) for i in range(2)], 0)
    h.step(0)
    assert len(h.bound()) == 2
    h.queue.add([_pod(f"big-{i}", "big", gpus=8, created=1) for i in range(2)], 1)
    h.step(1)
    assert h.attempts == 4 and "default/big-0" not in h.bound()
    # CPU-only pods come and go, some on the GPU nodes' spare cores: the gang is not tried again.
    for t in range(2, 12):
        h.queue.add([_pod(f"cpu-{t}-{i}", cpu=4, created=t) for i in range(3)], t)
        h.step(t, finished=[f"default/cpu-{t - 1}-{i}" for i in range(3)] if t > 2 else [])
    assert h.attempts == 4 + 30
    assert {p for p in h.bound() if p.startswith("default/cpu-")} == {
        f"default/cpu-{t}-{i}" for t in range(2, 12) for i in range(3)
    }
    # The GPU pods finish: now it is tried, and binds.
    h.step(20, finished=["default/hold-0", "default/hold-1"])
    assert h.attempts == 4 + 30 + 2
    assert h.bound()["default/big-0"] != h.bound()["default/big-1"]


def test_a_pod_waiting_for_a_labelled_node_ignores_releases_elsewhere(h: Harness) -> None:
    h.sched.upsert_nodes(
        [_node("a100", gpus=1, labels={"model": "A100"}), _node("t4-1", gpus=1), _node("t4-2", gpus=1)]
    )
    wants_a100 = Placement(node_selector=(("model", "A100"),))
    h.queue.add([_pod("first", gpus=1, created=0, placement=wants_a100)], 0)
    h.step(0)
    h.queue.add([_pod("second", gpus=1, created=1, placement=wants_a100), _pod("t", gpus=1, created=1)], 1)
    h.step(1)
    assert sorted(h.bound()) == ["default/first", "default/t"] and h.attempts == 3
    h.step(2, finished=["default/t"])  # a GPU frees on a node "second" cannot use
    assert h.attempts == 3
    h.step(3, finished=["default/first"])
    assert h.attempts == 4 and h.bound()["default/second"] == "a100"


def _placeable(h: Harness, pods: list[PodInfo]) -> bool:
    """Would the scheduler place all of `pods` (in order, each reserving) on the current snapshot?"""
    snap = copy.deepcopy(h.sched.snapshot)
    for p in sorted(pods, key=lambda p: p.key):
        res = h.sched.framework.place(p, snap)
        if not res.ok:
            return False
        assert res.node_index is not None
        snap.reserve(res.node_index, res.requests)
    return True


def _stranded(h: Harness) -> list[str]:
    """Units left in the unschedulable sub-queue that would be placed if tried now."""
    q = h.queue.queue
    units: dict[str, list[PodInfo]] = {}
    for e in q._unschedulable.values():
        pod = e.payload.pod
        gang = e.gang if e.gang and h.sched.gangs.status(e.gang) != GangStatus.SATISFIED else ""
        units.setdefault(gang or e.key, []).append(pod)
    out = []
    for unit, pods in units.items():
        if pods[0].gang and unit == pods[0].gang:
            members = [q._entries[k] for k in q._gangs.members(unit)]
            if any(m.where != SubQueue.UNSCHEDULABLE for m in members):
                continue  # part of it is in backoff: it is not waiting on an event alone
        if _placeable(h, pods):
            out.append(unit)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_random_workloads_leave_nothing_placeable_waiting(h: Harness, seed: int) -> None:
    """After every step (the queue drained of what can run now), no unit waiting for an event could be
    placed: the hints never kept back a pod that fits. Gangs of 1-GPU, 2-GPU and 8-GPU pods, shares of a
    GPU, CPU-only pods, a node selector and a taint, arrivals and finishes at random."""
    rng = random.Random(seed)
    nodes = [_node(f"g{i}", gpus=8) for i in range(5)]
    nodes += [
        _node("g-a100", gpus=8, labels={"model": "A100"}),
        _node("g-tainted", gpus=4, taints=(Taint("ded", "x"),)),
        _node("c1", cpu=16),
        _node("c2", cpu=16),
    ]
    h.sched.upsert_nodes(nodes)
    running: dict[str, float] = {}  # pod -> finish time
    durations: dict[str, float] = {}
    t, n = 0.0, 0
    for _ in range(70):
        t += rng.choice([1.0, 2.0, 5.0])
        arrivals: list[PodInfo] = []
        for _ in range(rng.randint(0, 2)):
            n += 1
            kind = rng.choice(["8x1", "4x2", "2x8", "cpu", "share", "a100"])
            dur = rng.uniform(5, 60)
            if kind in ("8x1", "4x2", "2x8"):
                size, gpus = (int(x) for x in kind.split("x"))
                h.sched.upsert_gangs([gang_spec(f"j{n}", size, wait=None)])
                pods = [_pod(f"j{n}-{i}", f"j{n}", gpus=gpus, cpu=4 * gpus, created=t) for i in range(size)]
            elif kind == "cpu":
                pods = [_pod(f"j{n}", cpu=rng.choice([2, 8, 14]), created=t)]
            elif kind == "share":
                pods = [_pod(f"j{n}", requests={GPU_SHARE: rng.choice([300, 500])}, created=t)]
            else:
                pods = [
                    _pod(
                        f"j{n}",
                        gpus=rng.choice([1, 4]),
                        created=t,
                        placement=Placement(node_selector=(("model", "A100"),)),
                    )
                ]
            arrivals += pods
            durations.update((p.key, dur) for p in pods)
        if arrivals:
            h.queue.add(arrivals, t)
        finished = [k for k, end in running.items() if end <= t]
        for k in finished:
            del running[k]
        h.step(t, finished)
        for key in h.bound():
            if key not in running and key in durations:
                running[key] = t + durations.pop(key)
        assert _stranded(h) == [], f"at t={t}"
    assert len(h.bound()) > 20


def test_the_queue_refuses_malformed_hints_and_freed_capacity() -> None:
    pod = objects_pb2.Pod(namespace="default", name="p")
    good = queue_pb2.RetryHint(needs={GPU: 8000}, insufficient=[GPU], nodes=["n1"], pods=2, slots={"n1": 1})
    ok = queue_pb2.DoneRequest(
        results=[queue_pb2.PodResult(pod=pod, outcome=queue_pb2.OUTCOME_UNSCHEDULABLE, hint=good)]
    )
    assert validation.done_request(ok) == []
    bad = queue_pb2.RetryHint(needs={GPU: -1}, insufficient=[""], nodes=["Not A Node"], pods=-2, slots={"n1": -1})
    errors = validation.done_request(
        queue_pb2.DoneRequest(results=[queue_pb2.PodResult(pod=pod, hint=bad, outcome=queue_pb2.OUTCOME_UNSCHEDULABLE)])
    )
    assert [e.split(":")[0] for e in errors] == [
        "results[0].hint.needs['nvidia.com/gpu']",
        "results[0].hint.insufficient[0]",
        "results[0].hint.nodes[0]",
        "results[0].hint.pods",
        "results[0].hint.slots['n1']",
    ]
    freed = [queue_pb2.FreedCapacity(node="bad node", resources=[""], free={"cpu": -5})]
    assert len(validation.move_all_request(queue_pb2.MoveAllRequest(freed=freed))) == 3
    assert len(validation.pop_request(queue_pb2.PopRequest(freed=freed))) == 3
    assert (
        validation.pop_request(queue_pb2.PopRequest(freed=[queue_pb2.FreedCapacity(node="n1", free={"cpu": 5})])) == []
    )
