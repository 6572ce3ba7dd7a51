"""Reservations for starving gangs: which gang, which nodes, and that a restart computes the same."""

from __future__ import annotations

import pytest
from builders import GPU, gang_spec, model_node, model_pod
from local_scheduler import LocalScheduler

from phalanx.framework.snapshot import Snapshot
from phalanx.plugins.registry import in_tree_framework
from phalanx.scheduling.reservation import plan
from phalanx.scheduling.scheduler import GangScheduler, SchedulerSettings
from phalanx.state.store import StateStore


def _settings(bound: float) -> SchedulerSettings:
    return SchedulerSettings(default_wait_seconds=1000, starvation_bound_seconds=bound)


def _scheduler(h: LocalScheduler, bound: float) -> GangScheduler:
    return GangScheduler(h.store, h.queue, h.binder, in_tree_framework(), _settings(bound))


def test_plan_picks_the_nodes_needing_least_drain_then_by_name() -> None:
    snap = Snapshot()
    nodes = [model_node(n, gpus=8) for n in ("a", "b", "c", "d")]
    snap.set_nodes(nodes, {("a", GPU): 6000, ("b", GPU): 2000, ("c", GPU): 2000, ("d", GPU): 8000})
    hold = plan("ns/g", {GPU: 8000}, 2, snap, 5.0, {})
    assert hold is not None
    assert [snap.nodes[i].name for i in hold.rows] == ["b", "c"]
    assert hold.hold[:, snap.column[GPU]].tolist() == [8000, 8000]
    assert plan("ns/g", {GPU: 8000}, 5, snap, 5.0, {}) is None  # more than the cluster holds: no reservation


def test_earliest_start_comes_from_known_end_times() -> None:
    snap = Snapshot()
    snap.set_nodes([model_node("a", gpus=4)], {})
    for name, dur in (("p1", 30.0), ("p2", 90.0)):
        p = model_pod(name, gpus=2)
        p.duration = dur
        snap.reserve(0, p.requests, pod=p)
    hold = plan("ns/g", {GPU: 4000}, 1, snap, 10.0, {"default/p1": 0.0, "default/p2": 5.0})
    assert hold is not None and hold.earliest_start == pytest.approx(95.0)
    unknown = plan("ns/g", {GPU: 4000}, 1, snap, 10.0, {"default/p1": 0.0})  # p2's start lost: it may end now
    assert unknown is not None and unknown.earliest_start == pytest.approx(30.0)


def test_starving_gangs_hold_disjoint_nodes_oldest_first(store: StateStore) -> None:
    h = LocalScheduler(store)
    h.sched = _scheduler(h, 10)
    h.sched.upsert_nodes([model_node("n1", gpus=4), model_node("n2", gpus=4)])
    h.queue.add([model_pod("s0", gpus=3), model_pod("s1", gpus=3)], 0)  # one on each node
    h.sched.step(0)
    old, young = gang_spec("old", 1, wait=1000), gang_spec("young", 1, wait=1000)
    young.created_at = 1.0
    h.sched.upsert_gangs([old, young])
    h.queue.add([model_pod("o0", "old", gpus=4), model_pod("y0", "young", gpus=4, created=1.0)], 1)
    h.sched.step(1)
    assert h.sched.snapshot.reservation == ()  # not waited long enough yet
    h.queue.queue.move_all(20)
    h.sched.step(20)
    holds = h.sched.snapshot.reservation
    assert [x.gang for x in holds] == ["default/old", "default/young"]
    assert holds[0].rows.tolist() != holds[1].rows.tolist()  # disjoint: neither can wait on the other
    h.sched.reservation.max_holds = 1
    h.queue.queue.move_all(21)
    h.sched.step(21)
    assert [x.gang for x in h.sched.snapshot.reservation] == ["default/old"]
    assert "holds a reservation on 1 node(s)" in h.conditions()["default/o0"]


def test_restart_mid_reservation_computes_the_same_one_and_the_gang_binds(store: StateStore) -> None:
    h = LocalScheduler(store)
    h.sched = _scheduler(h, 10)
    h.sched.upsert_nodes([model_node("n1", gpus=4), model_node("n2", gpus=4)])
    h.queue.add([model_pod("s0", gpus=3), model_pod("s1", gpus=2)], 0)  # one on each node
    h.sched.step(0)
    h.sched.upsert_gangs([gang_spec("big", 1, wait=1000)])
    h.queue.add([model_pod("big0", "big", gpus=4)], 0)
    h.sched.step(0)
    h.queue.queue.move_all(20)
    h.sched.step(20)
    (before,) = h.sched.snapshot.reservation
    assert before.gang == "default/big"
    # The scheduler dies: memory is gone; Redis and the queue remain (the reservation is in neither).
    fresh = _scheduler(h, 10)
    fresh.recover(21)
    h.queue.add([model_pod("s2", gpus=1, created=21)], 21)
    h.queue.queue.move_all(21)
    fresh.step(21)
    (after,) = fresh.snapshot.reservation
    assert after.gang == before.gang
    assert after.rows.tolist() == before.rows.tolist() and after.hold.tolist() == before.hold.tolist()
    reserved = fresh.snapshot.nodes[int(after.rows[0])].name
    assert h.bound().get("default/s2") != reserved  # the new small job was kept off the reserved node
    # The pods on the reserved node finish: the gang binds there, and the reservation ends with it.
    on_node = [k for k, n in h.bound().items() if n == reserved]
    fresh.release_pods(on_node)
    h.queue.queue.move_all(22)
    fresh.step(22)
    assert h.bound()["default/big0"] == reserved
    h.queue.add([model_pod("s3", gpus=1, created=23)], 23)  # the next round recomputes: nothing starves
    fresh.step(23)
    assert fresh.snapshot.reservation == ()
