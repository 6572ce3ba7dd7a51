"""A gang's satisfied mark follows its pods, not its history (issue 22): once-satisfied holds while the gang's
bound pods (running, or finished successfully) make its minimum; when they fall below it (evicted, deleted,
failed, their node lost) the mark is cleared, in memory and in Redis in the transaction that releases them,
and the gang's recreated pods are placed all-or-nothing again, with a fresh wait. A restarted scheduler
derives the same state from Redis."""

from __future__ import annotations

import json

import pytest
from builders import gang_spec, model_node, model_pod
from local_scheduler import LocalScheduler

from phalanx.backends.base import BindFailure
from phalanx.backends.simulated import SimulatedBackend
from phalanx.binding.batch_binder import BatchBinder
from phalanx.binding.lock import FencedLock
from phalanx.gang.manager import GangManager, GangStatus
from phalanx.gang.ops import PodsBound, SatisfactionLost
from phalanx.model.binding import Assignment, Victim
from phalanx.model.objects import GangSpec
from phalanx.plugins.registry import in_tree_framework
from phalanx.preemption.nomination import Nomination
from phalanx.queueing.scheduling_queue import QueueSettings, SchedulingQueue
from phalanx.scheduling.scheduler import GangScheduler, SchedulerSettings
from phalanx.state.keys import rel_gang
from phalanx.state.store import StateStore
from phalanx.state.txn import Txn, record_bound
from phalanx.testing.in_process import LocalBinder, LocalQueue

KEY = "default/train"
WORKERS = [f"default/w{i}" for i in range(4)]


def four_bound(store: StateStore) -> GangManager:
    """A gang of min 4 whose four pods were bound at t=5 (in Redis and in memory)."""
    store.put_nodes([model_node("n1", gpus=8)])
    gm = GangManager(60)
    gm.upsert(gang_spec("train", 4))
    stmt = gm.begin()
    gm.assumed(KEY, WORKERS, 1.0, stmt, "t")
    reserve = Txn(reserve=[store.reserve_entry(model_pod(f"w{i}", "train", gpus=1), "n1") for i in range(4)])
    reserve.gang_ops = stmt.ops
    store.must_apply(reserve)
    gm.commit(stmt)
    bound = Txn()
    record_bound(bound, {KEY: WORKERS}, 5.0)
    store.must_apply(bound)
    gm.apply(bound.gang_ops)
    assert gm.status(KEY) == GangStatus.SATISFIED
    return gm


def release(store: StateStore, gm: GangManager, pods: list[str], succeeded: int = 0) -> list[type]:
    """Releases `pods` as the scheduler does: their records and the gang's operations in one transaction."""
    stmt = gm.begin()
    gm.pods_gone(KEY, pods, succeeded, stmt)
    txn = Txn(gang_ops=stmt.ops)
    for p in pods:
        txn.release_pod(p, KEY)
    store.must_apply(txn)
    gm.commit(stmt)
    return [type(op) for op in stmt.ops]


def gang_hash(store: StateStore) -> dict[str, str]:
    return {k: v for k, v in store.redis.hgetall(store.keys.gang(KEY)).items()}


# -- the gang manager and its Redis writes -------------------------------------------------------------------


def test_losing_the_minimum_clears_the_mark_in_memory_and_in_redis(store: StateStore) -> None:
    gm = four_bound(store)
    assert "satisfied_at" in gang_hash(store)
    assert SatisfactionLost in release(store, gm, WORKERS[:1])  # 3 left of 4: below the minimum
    rec = gm.record(KEY)
    assert rec.satisfied_at is None and rec.first_wait is None and gm.status(KEY) == GangStatus.ACCUMULATING
    assert rec.cycle == 2 and rec.valid  # a fresh Strict cycle: no recreated pod is taken as tried already
    h = gang_hash(store)
    assert "satisfied_at" not in h and "first_wait" not in h and (h["cycle"], h["valid"]) == ("2", "1")
    assert store.redis.zscore(store.keys.timers, KEY) is None
    # What a restart reads is what memory holds.
    assert store.load_gang_records([KEY])[KEY] == rec


def test_a_gang_still_at_its_minimum_keeps_the_mark(store: StateStore) -> None:
    gm = four_bound(store)
    gm.upsert(gang_spec("train", 2))  # min 2 of 4
    assert SatisfactionLost not in release(store, gm, WORKERS[:2])
    assert gm.status(KEY) == GangStatus.SATISFIED and "satisfied_at" in gang_hash(store)


def test_pods_that_succeeded_keep_a_finishing_job_satisfied(store: StateStore) -> None:
    gm = four_bound(store)
    assert SatisfactionLost not in release(store, gm, WORKERS, succeeded=4)
    assert gm.status(KEY) == GangStatus.SATISFIED
    assert gang_hash(store)["succeeded"] == "4"
    assert store.load_gang_records([KEY])[KEY].succeeded == 4


def test_a_failure_among_finished_pods_regates_and_counts_them(store: StateStore) -> None:
    """Two workers finished, then a third failed: 1 running + 2 succeeded < 4. The failed one's recreation
    is placed under the gang rules, counted with the one running and the two done, so it can complete."""
    gm = four_bound(store)
    release(store, gm, WORKERS[:2], succeeded=2)
    assert gm.status(KEY) == GangStatus.SATISFIED
    assert SatisfactionLost in release(store, gm, WORKERS[2:3])
    assert gm.status(KEY) == GangStatus.ACCUMULATING
    assert gm.placed_count(KEY) == 3
    assert gm.reached_minimum(KEY, [model_pod("w2", "train", gpus=1)])


def test_pods_still_waiting_keep_their_wait() -> None:
    """A satisfied gang with pods reserved and being bound (a batch the API server showed half bound) keeps
    the wait of those pods: only the mark goes."""
    gm = GangManager(60)
    gm.upsert(gang_spec("train", 4))
    gm.records[KEY] = rec = gm.record(KEY)
    rec.first_wait, rec.satisfied_at, rec.bound, rec.assumed = 1.0, 5.0, {WORKERS[0]}, set(WORKERS[1:3])
    stmt = gm.begin()
    gm.pods_gone(KEY, [WORKERS[0]], 0, stmt)
    assert [op for op in stmt.ops if isinstance(op, SatisfactionLost)] == [SatisfactionLost(KEY, 2, fresh=False)]
    gm.commit(stmt)
    assert gm.record(KEY).first_wait == 1.0 and gm.record(KEY).satisfied_at is None


def test_a_bind_below_the_minimum_does_not_satisfy_for_long() -> None:
    """A pod bound alone (decided while its gang was satisfied, bound after the gang lost its pods) sets the
    mark the way every first bind does; the manager lists the gang for the scheduler to settle."""
    gm = GangManager(60)
    gm.upsert(gang_spec("train", 4))
    gm.apply([PodsBound(KEY, (WORKERS[0],), 5.0)])
    assert gm.unsettled == {KEY}
    whole = GangManager(60)
    whole.upsert(gang_spec("train", 4))
    whole.apply([PodsBound(KEY, tuple(WORKERS), 5.0)])
    assert not whole.unsettled


def test_the_new_operations_write_only_declared_keys(store: StateStore) -> None:
    txn = Txn(gang_ops=[SatisfactionLost(KEY, 3)])
    declared = set(txn.script_call(store.keys, None)[0])
    assert store.keys.full(rel_gang(KEY)) in declared and store.keys.timers in declared


# -- through the scheduler ----------------------------------------------------------------------------------


@pytest.fixture
def h(store: StateStore) -> LocalScheduler:
    return LocalScheduler(store)


def train(minimum: int = 4, total: int = 4, wait: float = 30) -> GangSpec:
    return gang_spec("train", minimum, total=total, wait=wait)


def bind_four(h: LocalScheduler, spec: GangSpec | None = None) -> None:
    h.sched.upsert_nodes([model_node("n1", gpus=4)])
    h.sched.upsert_gangs([spec or train()])
    h.queue.add([model_pod(f"w{i}", "train", gpus=1) for i in range(4)], 0)
    h.sched.step(0)
    assert states(h) == dict.fromkeys(WORKERS, "bound")


def states(h: LocalScheduler) -> dict[str, str]:
    return {k: r.state for k, r in h.store.load_pods().items() if k in WORKERS}


def binds(h: LocalScheduler) -> list[dict[str, object]]:
    return [json.loads(x) for x in h.store.redis.lrange(h.store.keys.sim_binds, 0, -1)]


def test_a_gang_evicted_whole_binds_its_recreated_pods_all_or_nothing(h: LocalScheduler) -> None:
    """The issue's case: all four pods of a gang of min 4 evicted (a high-priority job takes two of the four
    GPUs); the operator recreates them one by one. None binds while only two fit; all four bind together
    once four fit. Before the fix, the first two bound one at a time, as if the gang were still satisfied."""
    bind_four(h)
    h.sched.release_pods(WORKERS)  # evicted: deleted, not finished
    h.queue.add([model_pod(f"hi{i}", gpus=1, priority=100) for i in range(2)], 10)
    h.sched.step(10)
    for i in range(4):  # recreated, one at a time
        h.queue.add([model_pod(f"w{i}", "train", gpus=1, created=20 + i)], 20 + i)
        h.sched.step(20 + i)
        assert "bound" not in states(h).values(), f"after w{i}: {states(h)}"
    assert len(binds(h)) == 4 + 2  # the first bind and the high-priority pods, nothing of the new attempt
    h.sched.upsert_nodes([model_node("n2", gpus=4)])  # room for four
    h.queue.queue.move_all(30)
    h.sched.step(30)
    assert states(h) == dict.fromkeys(WORKERS, "bound")
    again = binds(h)[6:]
    assert len(again) == 4 and {b["at"] for b in again} == {30}  # in one batch
    assert h.sched.gangs.status(KEY) == GangStatus.SATISFIED


def test_once_satisfied_still_binds_a_later_pod_alone_while_the_gang_runs(h: LocalScheduler) -> None:
    """Min 2 of 4: two bound, the third arrives alone and binds alone; a pod of the gang deleted while two
    others still run does not re-gate it either."""
    h.sched.upsert_nodes([model_node("n1", gpus=4)])
    h.sched.upsert_gangs([train(minimum=2)])
    h.queue.add([model_pod("w0", "train", gpus=1), model_pod("w1", "train", gpus=1)], 0)
    h.sched.step(0)
    h.queue.add([model_pod("w2", "train", gpus=1)], 5)
    h.sched.step(5)
    assert states(h) == dict.fromkeys(WORKERS[:3], "bound")
    h.sched.release_pods(["default/w0"])  # two still running: at the minimum
    assert h.sched.gangs.status(KEY) == GangStatus.SATISFIED
    h.queue.add([model_pod("w3", "train", gpus=1)], 6)
    h.sched.step(6)
    assert states(h)["default/w3"] == "bound"


def test_a_finished_job_is_not_regated(h: LocalScheduler) -> None:
    bind_four(h, train(minimum=2))
    h.sched.release_pods(WORKERS, succeeded=WORKERS)  # the job completed
    assert h.sched.gangs.status(KEY) == GangStatus.SATISFIED
    h.queue.add([model_pod("late", "train", gpus=1)], 10)
    h.sched.step(10)
    assert h.store.load_pods()["default/late"].state == "bound"  # alone, as once-satisfied says


def test_an_evicted_pod_reported_finished_is_still_a_loss(h: LocalScheduler) -> None:
    """A preemption victim that exits 0 on SIGTERM ends Succeeded (the simulator ends victims as finished):
    the scheduler knows it evicted it, so its gang lost it."""
    bind_four(h)
    h.sched.preemption.nominations["default/hi"] = nomination = _nomination(WORKERS)
    assert nomination.victims
    h.sched.release_pods(WORKERS, succeeded=WORKERS)
    assert h.sched.gangs.status(KEY) == GangStatus.ACCUMULATING
    assert h.sched.gangs.record(KEY).succeeded == 0


def _nomination(victims: list[str]) -> Nomination:
    return Nomination(
        "default/hi", 100, 1.0, {}, [Victim(pod_key=k, uid=k, node="n1", preemptor="default/hi") for k in victims]
    )


def test_the_recreated_gang_gets_a_fresh_wait(h: LocalScheduler) -> None:
    """Its wait (30 s) ran from t=0 and was cleared by the bind; the new attempt's runs from its first pod
    placed (t=110), not from the first attempt's start, which would time it out at once."""
    bind_four(h)
    h.sched.release_pods(WORKERS)
    h.queue.add([model_pod("w0", "train", gpus=1)], 110)
    r = h.sched.step(110)
    assert states(h) == {"default/w0": "assumed"}
    assert h.sched.gangs.record(KEY).first_wait == 110
    assert r.next_wakeup == pytest.approx(140.0)
    h.queue.add([model_pod(f"w{i}", "train", gpus=1) for i in range(1, 4)], 139)
    h.sched.step(139)
    assert states(h) == dict.fromkeys(WORKERS, "bound")


def test_a_lost_node_takes_the_mark_with_its_pods(h: LocalScheduler) -> None:
    bind_four(h)
    h.sched.remove_nodes(["n1"], 10)
    rec = h.sched.gangs.record(KEY)
    assert rec.bound == set() and rec.satisfied_at is None  # memory follows Redis, which released them
    assert h.store.load_gang_records([KEY])[KEY] == rec


def fresh(h: LocalScheduler) -> GangScheduler:
    """A new scheduler process over the same Redis and queue."""
    s = GangScheduler(h.store, h.queue, h.binder, in_tree_framework(), SchedulerSettings(default_wait_seconds=60))
    s.recover(50)
    return s


def test_a_restarted_scheduler_derives_the_same_state(h: LocalScheduler) -> None:
    bind_four(h)
    h.sched.release_pods(WORKERS[:2])
    s = fresh(h)
    assert s.gangs.status(KEY) == GangStatus.ACCUMULATING
    assert s.gangs.record(KEY) == h.sched.gangs.record(KEY)


def test_a_gang_redis_kept_satisfied_without_its_pods_is_unsatisfied_on_restart(h: LocalScheduler) -> None:
    """What the code before this rule left in Redis (the mark outliving every pod): a restart settles it."""
    bind_four(h)
    txn = Txn()
    for k in WORKERS:
        txn.release_pod(k, KEY)  # as the old release did: the pods go, the mark stays
    h.store.must_apply(txn)
    assert "satisfied_at" in h.store.redis.hgetall(h.store.keys.gang(KEY))
    s = fresh(h)
    assert s.gangs.status(KEY) == GangStatus.ACCUMULATING
    assert "satisfied_at" not in h.store.redis.hgetall(h.store.keys.gang(KEY))
    h.queue.add([model_pod("w0", "train", gpus=1)], 60)
    s.step(60)
    assert states(h) == {"default/w0": "assumed"}  # waits for the rest of its gang


class GoneBackend(SimulatedBackend):
    """The simulated cluster, where the pods named in `gone` were deleted before their binding."""

    def __init__(self, store: StateStore) -> None:
        super().__init__(store.redis, store.keys)
        self.gone: set[str] = set()

    def precheck(self, assignments: list[Assignment]) -> dict[str, BindFailure]:
        return {
            a.pod_key: BindFailure(f"pod {a.pod_key} does not exist", gone=True)
            for a in assignments
            if a.pod_key in self.gone
        }


def test_a_gang_bound_short_of_a_pod_deleted_mid_bind_is_not_satisfied(store: StateStore) -> None:
    """A pod deleted while its gang was being bound does not hold the rest back (they bind); the gang, three
    of four, is satisfied no longer once the bind is taken in, and the pod's recreation binds with them."""
    backend = GoneBackend(store)
    queue = LocalQueue(SchedulingQueue(QueueSettings(unschedulable_flush=0)))
    binder = LocalBinder(BatchBinder(store, backend, FencedLock(store.redis, store.keys)), backend)
    s = GangScheduler(store, queue, binder, in_tree_framework(), SchedulerSettings(default_wait_seconds=60))
    s.upsert_nodes([model_node("n1", gpus=4)])
    s.upsert_gangs([train()])
    backend.gone = {"default/w2"}
    queue.add([model_pod(f"w{i}", "train", gpus=1) for i in range(4)], 0)
    s.step(0)
    assert s.gangs.record(KEY).bound == {"default/w0", "default/w1", "default/w3"}
    assert s.gangs.status(KEY) == GangStatus.ACCUMULATING
    assert "satisfied_at" not in store.redis.hgetall(store.keys.gang(KEY))
    backend.gone = set()
    queue.add([model_pod("w2", "train", gpus=1)], 5)
    s.step(5)
    assert s.gangs.record(KEY).bound == set(WORKERS) and s.gangs.status(KEY) == GangStatus.SATISFIED


def test_a_recreated_pod_that_failed_once_is_tried_again_while_the_rest_of_its_gang_stays_bound(
    store: StateStore,
) -> None:
    # The gang's other three pods are bound and never come back to a Strict cycle: the cycle must end once
    # the pods that can still be tried were, or the recreated pod is turned away for good (found by
    # phalanx simulate's PhalanxJob restarts: the job stayed Rescheduling after the GPU it needed was free).
    gm = four_bound(store)
    stmt = gm.begin()
    for pod in WORKERS:  # as the scheduler tried them, the attempt that placed them
        assert gm.try_enter_cycle(KEY, pod, stmt)
    gm.commit(stmt)
    release(store, gm, WORKERS[:1])
    stmt = gm.begin()
    assert gm.try_enter_cycle(KEY, WORKERS[0], stmt)  # the recreated w0: tried, and it does not fit
    gm.mark_tried(KEY, WORKERS[0], stmt)
    gm.invalidate_cycle(KEY, stmt)
    gm.commit(stmt)
    stmt = gm.begin()
    assert gm.try_enter_cycle(KEY, WORKERS[0], stmt)  # retried once capacity frees
