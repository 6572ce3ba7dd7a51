"""A large gang behind a stream of small jobs: without a reservation it starves, with one it binds; a short
job of known duration still backfills a reserved node when it ends before the gang could start."""

from __future__ import annotations

import dataclasses

import pytest
from builders import gang_spec, model_node, model_pod
from local_scheduler import LocalScheduler

from phalanx.model.objects import PodInfo
from phalanx.plugins.registry import in_tree_framework
from phalanx.scheduling.scheduler import GangScheduler, SchedulerSettings
from phalanx.state.store import StateStore

BIG = "default/big"


def _with_bound(h: LocalScheduler, bound: float) -> LocalScheduler:
    h.sched = GangScheduler(
        h.store,
        h.queue,
        h.binder,
        in_tree_framework(),
        SchedulerSettings(default_wait_seconds=1000, starvation_bound_seconds=bound),
    )
    return h


def _small(i: int, t: float, duration: float | None = None) -> PodInfo:
    p = model_pod(f"s{i:03d}", gpus=1, created=t)
    p.duration = duration
    return p


def _run_stream(h: LocalScheduler, until: int, duration: int = 5) -> None:
    """Two 4-GPU nodes; a 2x4-GPU gang at t=0; one 1-GPU job arrives each second and runs `duration` s,
    so the nodes are never empty unless something keeps new jobs off them."""
    h.sched.upsert_nodes([model_node("n1", gpus=4), model_node("n2", gpus=4)])
    h.sched.upsert_gangs([gang_spec("big", 2, wait=1000)])
    h.queue.add([_small(0, 0), _small(1, 0)], 0)
    h.sched.step(0)
    h.queue.add([model_pod(f"big{i}", "big", gpus=4) for i in range(2)], 0)
    started: dict[str, int] = {}
    for t in range(1, until):
        done = [k for k, t0 in started.items() if t - t0 >= duration]
        if done:
            h.sched.release_pods(done)
            for k in done:
                del started[k]
        h.queue.add([_small(t + 1, t)], t)
        h.queue.queue.move_all(t)
        h.sched.step(t)
        for k in h.bound():
            if k.split("/")[1].startswith("s") and k not in started and k not in _finished(h, started):
                started[k] = t
        if all(f"default/big{i}" in h.bound() for i in range(2)):
            return


def _finished(h: LocalScheduler, running: dict[str, int]) -> set[str]:
    return {k for k in h.bound() if k not in running and k not in h.sched.bound and k not in h.sched.assumed}


@pytest.fixture
def h(store: StateStore) -> LocalScheduler:
    return LocalScheduler(store)


def test_without_a_reservation_the_big_gang_starves(h: LocalScheduler) -> None:
    _run_stream(_with_bound(h, 0), until=60)
    assert not any(k.startswith("default/big") for k in h.bound())


def test_with_a_reservation_the_big_gang_binds_and_small_jobs_are_told_why(h: LocalScheduler) -> None:
    _run_stream(_with_bound(h, 10), until=60)
    assert all(f"default/big{i}" in h.bound() for i in range(2))
    said = " ".join(h.conditions().values())
    assert "node(s) reserved for starving gang default/big" in said


def test_a_short_job_backfills_a_reserved_node(h: LocalScheduler) -> None:
    h = _with_bound(h, 10)
    h.sched.upsert_nodes([model_node("n1", gpus=4)])
    h.sched.upsert_gangs([dataclasses.replace(gang_spec("big", 1, wait=1000), created_at=0.0)])
    h.queue.add([_small(0, 0, duration=100)], 0)  # holds n1 until t=100
    h.sched.step(0)
    h.queue.add([model_pod("big0", "big", gpus=4)], 0)
    h.sched.step(0)
    h.queue.queue.move_all(20)
    h.sched.step(20)  # past the bound: n1 is reserved, and the gang cannot start before t=100
    (hold,) = h.sched.snapshot.reservation
    assert hold.gang == BIG and hold.earliest_start == pytest.approx(100)
    h.queue.add([_small(1, 20, duration=30), _small(2, 20, duration=300), _small(3, 20)], 20)
    h.sched.step(20)
    bound = h.bound()
    assert "default/s001" in bound  # ends at 50, before the gang could start: backfilled
    assert "default/s002" not in bound and "default/s003" not in bound  # would delay it, or may
    assert "reserved for starving gang default/big" in h.conditions()["default/s002"]
