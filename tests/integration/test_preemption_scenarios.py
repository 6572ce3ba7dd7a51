"""Gang preemption on the embedded cluster (real Redis, the scheduler with its queue and binder in process):
whole gangs or surplus pods as victims, never a running gang below its minimum, budgets, preemptionPolicy,
no cascades, the nominated place kept while the victims terminate."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from builders import GPU, gang_spec, model_node, model_pod
from local_scheduler import LocalScheduler

from phalanx.metrics.catalog import PREEMPTION_VICTIMS
from phalanx.model.budgets import DisruptionBudget
from phalanx.model.keys import QUEUE_NAME
from phalanx.model.objects import GangMode, Placement, PodInfo
from phalanx.model.pod_affinity import LabelSelector
from phalanx.state.store import StateStore

HIGH = 100


@pytest.fixture
def h(store: StateStore) -> LocalScheduler:
    return LocalScheduler(store)


def _preempted(h: LocalScheduler) -> list[str]:
    """Pods the binder evicted, in order."""
    return [json.loads(x)["pod"] for x in h.store.redis.lrange(h.store.keys.sim_preempted, 0, -1)]


def _terminate(h: LocalScheduler, now: float) -> None:
    """The kubelet's part: every evicted pod goes, freeing its capacity."""
    h.sched.release_pods(_preempted(h))
    h.queue.queue.move_all(now)


def _running_gang(
    h: LocalScheduler,
    name: str,
    n: int,
    *,
    gpus: int,
    priority: int,
    minimum: int | None = None,
    placement: Placement | None = None,
    labels: dict[str, str] | None = None,
    t: float = 0,
) -> list[str]:
    """Declares gang `name` (minimum `minimum`, default all `n` pods) and schedules its pods until bound."""
    h.sched.upsert_gangs([gang_spec(name, minimum or n, n, mode=GangMode.NON_STRICT if minimum else GangMode.STRICT)])
    pods = [
        _pod(f"{name}-{i}", name, gpus=gpus, priority=priority, placement=placement, labels=labels) for i in range(n)
    ]
    h.queue.add(pods, t)
    h.sched.step(t)
    keys = [p.key for p in pods]
    assert all(k in h.bound() for k in keys), h.conditions()
    return keys


def _pod(
    name: str,
    gang: str,
    *,
    gpus: int,
    priority: int,
    placement: Placement | None = None,
    labels: dict[str, str] | None = None,
    never: bool = False,
) -> PodInfo:
    p = model_pod(name, gang, gpus=gpus, priority=priority, placement=placement)
    p.labels = dict(labels or {})
    p.preemption_policy = "Never" if never else ""
    return p


def _high_gang(h: LocalScheduler, n: int, gpus: int, t: float, **kw: object) -> list[str]:
    h.sched.upsert_gangs([gang_spec("high", n, wait=1000)])
    pods = [_pod(f"high-{i}", "high", gpus=gpus, priority=HIGH, **kw) for i in range(n)]  # type: ignore[arg-type]
    h.queue.add(pods, t)
    h.sched.step(t)
    return [p.key for p in pods]


def test_one_low_priority_gang_is_preempted_when_one_suffices_and_the_gang_binds_after(h: LocalScheduler) -> None:
    h.sched.upsert_nodes([model_node(f"n{i}", gpus=4) for i in range(1, 5)])
    cheap = _running_gang(h, "cheap", 2, gpus=4, priority=1)
    dear = _running_gang(h, "dear", 2, gpus=4, priority=5)
    victims_before = PREEMPTION_VICTIMS._value.get()
    high = _high_gang(h, 2, 4, t=1)
    assert sorted(_preempted(h)) == sorted(cheap)  # the lowest priority, and only it
    assert PREEMPTION_VICTIMS._value.get() - victims_before == 2
    assert not any(k in high for k in h.bound())
    said = h.conditions()[high[0]]
    assert "preempting 2 lower-priority pod(s): gang default/cheap (2 pods)" in said
    nominated = h.store.redis.hgetall(h.store.keys.sim_nominated)
    cheap_nodes = {h.bound()[k] for k in cheap}
    assert {nominated[k] for k in high} == cheap_nodes

    # Nothing else may take the freed place while the victims terminate: a low-priority pod arriving is
    # kept off the nominated nodes even once they are free, the preemptor is not.
    h.queue.queue.move_all(5)
    h.sched.step(5)
    assert "waiting for 2 evicted pod(s) to terminate" in h.conditions()[high[0]]
    _terminate(h, 10)
    h.queue.add([_pod("sneak", "", gpus=4, priority=0)], 10)
    h.sched.step(10)
    assert {h.bound()[k] for k in high} == cheap_nodes
    assert "default/sneak" not in h.bound()
    assert all(k in h.bound() for k in dear) and len(_preempted(h)) == 2


def _high_gang_with_min_resources(h: LocalScheduler, n: int, gpus: int, min_gpus: int, t: float) -> list[str]:
    """As Kubeflow's training-operator declares a job: a PodGroup with minResources (GPUs here)."""
    h.sched.upsert_gangs([replace(gang_spec("high", n, wait=1000), min_resources={GPU: min_gpus * 1000})])
    pods = [_pod(f"high-{i}", "high", gpus=gpus, priority=HIGH) for i in range(n)]
    h.queue.add(pods, t)
    h.sched.step(t)
    return [p.key for p in pods]


def test_a_gang_declaring_min_resources_preempts_and_binds_whole(h: LocalScheduler) -> None:
    """minResources (8 GPUs) exceed what is free (0): the gate used to refuse before preemption was asked.
    The planner frees both minResources and a place for the gang, and the gang binds whole once the victims
    are gone."""
    h.sched.upsert_nodes([model_node("n1", gpus=4), model_node("n2", gpus=4)])
    low = _running_gang(h, "low", 2, gpus=4, priority=1)
    high = _high_gang_with_min_resources(h, 2, 4, min_gpus=8, t=1)
    assert sorted(_preempted(h)) == sorted(low)
    said = h.conditions()[high[0]]
    assert "minResources needs 8 nvidia.com/gpu, the cluster has 0 free" in said
    assert "preempting 2 lower-priority pod(s): gang default/low (2 pods)" in said
    nominated = h.store.redis.hgetall(h.store.keys.sim_nominated)
    assert {nominated[k] for k in high} == {"n1", "n2"}
    assert not any(k in high for k in h.bound())

    h.queue.queue.move_all(3)
    h.sched.step(3)  # the victims have not gone yet: it waits, evicting nothing more
    assert "waiting for 2 evicted pod(s) to terminate" in h.conditions()[high[0]]
    assert len(_preempted(h)) == 2
    _terminate(h, 5)
    h.sched.step(5)
    assert all(k in h.bound() for k in high)
    assert not h.store.load_nominations()


def test_min_resources_no_eviction_could_free_do_not_preempt_and_say_why(h: LocalScheduler) -> None:
    """Evicting `low` would make room for the gang's one pod, but its minResources (8 GPUs) would still
    exceed what is free (4, `peer` being as high as the gang): nothing is evicted."""
    h.sched.upsert_nodes([model_node("n1", gpus=4), model_node("n2", gpus=4)])
    _running_gang(h, "low", 1, gpus=4, priority=1)
    _running_gang(h, "peer", 1, gpus=4, priority=HIGH)
    high = _high_gang_with_min_resources(h, 1, 4, min_gpus=8, t=1)
    assert _preempted(h) == []
    said = h.conditions()[high[0]]
    assert "minResources needs 8 nvidia.com/gpu, the cluster has 0 free" in said
    assert (
        "not preempting: evicting every lower-priority pod would not free its minResources "
        "(it needs 8 nvidia.com/gpu, at most 4 could be free)" in said
    )


def test_fewest_pods_lost_among_equal_priorities(h: LocalScheduler) -> None:
    h.sched.upsert_nodes([model_node(f"n{i}", gpus=4) for i in range(1, 5)])
    many = _running_gang(h, "many", 4, gpus=2, priority=1)  # 4 pods on two nodes
    few = _running_gang(h, "few", 2, gpus=4, priority=1)
    _high_gang(h, 2, 4, t=1)
    assert sorted(_preempted(h)) == sorted(few)
    assert not set(_preempted(h)) & set(many)


def test_surplus_pods_above_the_minimum_go_alone(h: LocalScheduler) -> None:
    h.sched.upsert_nodes([model_node("n1", gpus=4), model_node("n2", gpus=4)])
    low = _running_gang(h, "low", 4, gpus=2, priority=1, minimum=2)
    _high_gang(h, 1, 2, t=1)
    assert len(_preempted(h)) == 1 and _preempted(h)[0] in low  # one pod above the minimum, not the gang


def test_room_is_made_for_the_gangs_minimum_not_for_its_pods_above_it(h: LocalScheduler) -> None:
    """A Strict gang of 2 pods with a minimum of 1: one low-priority gang is preempted, not two, and the
    gang binds its minimum; its second pod waits like any pod above a minimum."""
    h.sched.upsert_nodes([model_node("n1", gpus=4), model_node("n2", gpus=4)])
    first = _running_gang(h, "low1", 1, gpus=4, priority=1)
    _running_gang(h, "low2", 1, gpus=4, priority=2)
    h.sched.upsert_gangs([gang_spec("high", 1, 2, wait=1000)])
    high = [_pod(f"high-{i}", "high", gpus=4, priority=HIGH) for i in range(2)]
    h.queue.add(high, 1)
    h.sched.step(1)
    assert _preempted(h) == first
    _terminate(h, 5)
    h.sched.step(5)
    assert high[0].key in h.bound() and high[1].key not in h.bound()


def test_a_running_gang_is_never_left_below_its_minimum(h: LocalScheduler) -> None:
    """One pod of `low` would make room, but `low` needs both: it goes whole, or not at all; here the
    alternative (an ordinary pod) has a higher priority, so `low` goes whole."""
    h.sched.upsert_nodes([model_node("n1", gpus=4), model_node("n2", gpus=4)])
    low = _running_gang(h, "low", 2, gpus=2, priority=1)  # both on one node (n1)
    h.queue.add([_pod("ordinary", "", gpus=2, priority=50), _pod("filler", "", gpus=2, priority=60)], 0)
    h.sched.step(0)
    _high_gang(h, 1, 4, t=1)
    assert sorted(_preempted(h)) == sorted(low)


def test_a_disruption_budget_is_honoured(h: LocalScheduler) -> None:
    h.sched.upsert_nodes([model_node(f"n{i}", gpus=4) for i in range(1, 5)])
    protected = _running_gang(h, "protected", 2, gpus=4, priority=1, labels={"app": "db"})
    other = _running_gang(h, "other", 2, gpus=4, priority=5)
    budget = DisruptionBudget("default", "db", LabelSelector((("app", "db"),)), min_available="2")
    h.sched.preemption.set_budgets([budget], [])
    _high_gang(h, 2, 4, t=1)
    assert sorted(_preempted(h)) == sorted(other)
    assert not set(_preempted(h)) & set(protected)


def test_budgets_on_every_candidate_mean_no_preemption_and_say_so(h: LocalScheduler) -> None:
    h.sched.upsert_nodes([model_node("n1", gpus=4), model_node("n2", gpus=4)])
    _running_gang(h, "protected", 2, gpus=4, priority=1, labels={"app": "db"})
    budget = DisruptionBudget("default", "db", LabelSelector((("app", "db"),)), max_unavailable="0")
    h.sched.preemption.set_budgets([budget], [])
    high = _high_gang(h, 2, 4, t=1)
    assert _preempted(h) == []
    assert "PodDisruptionBudget default/db protects some of them" in h.conditions()[high[0]]


def test_preemption_policy_never_does_not_preempt(h: LocalScheduler) -> None:
    h.sched.upsert_nodes([model_node("n1", gpus=4)])
    _running_gang(h, "low", 1, gpus=4, priority=1)
    high = _high_gang(h, 1, 4, t=1, never=True)
    assert _preempted(h) == []
    assert "not preempting: preemptionPolicy is Never" in h.conditions()[high[0]]


def test_equal_or_higher_priority_is_never_a_victim(h: LocalScheduler) -> None:
    h.sched.upsert_nodes([model_node("n1", gpus=4)])
    _running_gang(h, "peer", 1, gpus=4, priority=HIGH)
    high = _high_gang(h, 1, 4, t=1)
    assert _preempted(h) == []
    assert "no running pod it may preempt (of a lower priority than the gang)" in h.conditions()[high[0]]


def test_no_cascade_a_gang_being_preempted_does_not_preempt_in_turn(h: LocalScheduler) -> None:
    """`high` may only use node a1, held by `mid`; `mid` is preempted. `mid` also has pods waiting, which
    would fit by preempting `low` on b1: they do not, while `mid` is itself being preempted."""
    h.sched.upsert_nodes(
        [model_node("a1", gpus=8, labels={"pool": "a"}), model_node("b1", gpus=8, labels={"pool": "b"})]
    )
    pool_a = Placement(node_selector=(("pool", "a"),))
    low = _running_gang(h, "low", 2, gpus=4, priority=10, placement=Placement(node_selector=(("pool", "b"),)))
    # `mid` needs 4 pods; two run already (found bound, as after a restart: that satisfies nothing).
    h.sched.upsert_gangs([gang_spec("mid", 4, wait=1000)])
    running = [_pod(f"mid-{i}", "mid", gpus=4, priority=50, placement=pool_a) for i in range(2)]
    for p in running:
        p.node_name = "a1"
    h.sched.add_bound_pods(running)
    waiting = [_pod(f"mid-{i}", "mid", gpus=4, priority=50) for i in range(2, 4)]
    highs = [_pod(f"high-{i}", "high", gpus=4, priority=HIGH, placement=pool_a) for i in range(2)]
    h.sched.upsert_gangs([gang_spec("high", 2, wait=1000)])
    h.queue.add(highs + waiting, 1)  # one pop: `high` first (priority), then `mid`'s waiting pods
    h.sched.step(1)
    assert sorted(_preempted(h)) == ["default/mid-0", "default/mid-1"]
    assert not set(_preempted(h)) & set(low)
    assert "pods of this gang are being preempted themselves" in h.conditions()["default/mid-2"]


def test_a_restart_between_nomination_and_eviction_sends_the_evictions(h: LocalScheduler) -> None:
    """The scheduler wrote its nomination and died before the binder heard of the victims: the scheduler
    that replaces it (memory rebuilt from Redis) sends them."""
    h.sched.upsert_nodes([model_node("n1", gpus=4)])
    low = _running_gang(h, "low", 1, gpus=4, priority=1)

    class Unreachable(type(h.binder)):  # type: ignore[misc]
        def evict(self, victims: object, now: float) -> object:
            raise ConnectionError("binder down")

    working = h.binder
    h.sched.binder = Unreachable(working.binder, working.backend)
    high = _high_gang(h, 1, 4, t=1)
    assert _preempted(h) == []
    assert h.store.load_nominations()  # the intent is in Redis

    replacement = LocalScheduler(h.store)
    replacement.queue = h.queue
    replacement.sched.queue = h.queue
    replacement.sched.recover(2)
    assert _preempted(replacement) == low
    _terminate(replacement, 3)
    replacement.sched.step(3)
    assert high[0] in replacement.bound()
    assert not replacement.store.load_nominations()  # dropped once the gang holds its minimum


def _queued(pods: list[PodInfo], queue: str) -> list[PodInfo]:
    for p in pods:
        p.annotations = {**p.annotations, QUEUE_NAME: queue}
    return pods


def _run_in_queue(h: LocalScheduler, name: str, queue: str, priority: int, t: float = 0) -> list[str]:
    h.sched.upsert_gangs([gang_spec(name, 1)])
    pods = _queued([_pod(f"{name}-0", name, gpus=4, priority=priority)], queue)
    h.queue.add(pods, t)
    h.sched.step(t)
    assert pods[0].key in h.bound(), h.conditions()
    return [pods[0].key]


def _high_in_queue(h: LocalScheduler, queue: str, t: float) -> str:
    h.sched.upsert_gangs([gang_spec("high", 1, wait=1000)])
    pod = _queued([_pod("high-0", "high", gpus=4, priority=HIGH)], queue)[0]
    h.queue.add([pod], t)
    h.sched.step(t)
    return pod.key


def test_a_queue_below_its_share_reclaims_from_a_queue_above_it(h: LocalScheduler) -> None:
    h.sched.upsert_nodes([model_node("n1", gpus=4), model_node("n2", gpus=4)])
    taken = _run_in_queue(h, "b1", "team-b", 1) + _run_in_queue(h, "b2", "team-b", 1)  # team-b: 100%
    _high_in_queue(h, "team-a", t=1)  # team-a: 0% < its deserved 50% < team-b's 100%
    assert len(_preempted(h)) == 1 and _preempted(h)[0] in taken


def test_a_queue_at_its_share_does_not_reclaim_from_another_queue(h: LocalScheduler) -> None:
    h.sched.upsert_nodes([model_node("n1", gpus=4), model_node("n2", gpus=4)])
    _run_in_queue(h, "a1", "team-a", HIGH)  # not a victim: as high as the preemptor
    _run_in_queue(h, "b1", "team-b", 1)  # each queue holds its deserved half
    high = _high_in_queue(h, "team-a", t=1)
    assert _preempted(h) == []
    said = h.conditions()[high]
    assert "queue team-a holds 50% of the cluster, its deserved share is 50%" in said


def test_within_one_queue_priority_alone_decides(h: LocalScheduler) -> None:
    h.sched.upsert_nodes([model_node("n1", gpus=4), model_node("n2", gpus=4)])
    own = _run_in_queue(h, "a1", "team-a", 1)
    _run_in_queue(h, "b1", "team-b", 1)
    _high_in_queue(h, "team-a", t=1)
    assert _preempted(h) == own  # its own queue's lower-priority gang, not team-b's
