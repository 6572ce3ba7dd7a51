"""Koordinator's gang match-policy (gang.scheduling.koordinator.sh/match-policy): which pods count toward a
gang's minimum, and whether its first bind satisfies it for good. As Koordinator's coscheduling plugin reads
it (PodGroupManager.PreFilter and Gang.isGangValidForPermit):

- once-satisfied (default): waiting pods, until the first bind; then the gang rules no longer apply;
- only-waiting: waiting (reserved, not bound) pods only, every batch on its own;
- waiting-and-running: waiting and bound pods, every batch."""

from __future__ import annotations

import pytest
from builders import gang_spec, model_node, model_pod
from local_scheduler import LocalScheduler

from phalanx.gang.manager import GangManager, GangStatus
from phalanx.gang.ops import BoundPodsFound, PodsBound
from phalanx.gang.record import GangRecord
from phalanx.model.keys import KOORD_TIMEOUT
from phalanx.model.objects import GangSpec
from phalanx.plugins.registry import in_tree_framework
from phalanx.rpc.convert import gang_from_pb, gang_to_pb
from phalanx.rpc.object_checks import gang_errors
from phalanx.scheduling.scheduler import GangScheduler, SchedulerSettings
from phalanx.state.store import StateStore

POLICIES = ("once-satisfied", "only-waiting", "waiting-and-running")
KEY = "default/job"


def spec(policy: str, minimum: int = 2, wait: float = 100) -> GangSpec:
    s = gang_spec("job", minimum, wait=wait)
    s.match_policy = policy
    return s


def manager(policy: str, **record: object) -> GangManager:
    gm = GangManager(60)
    gm.upsert(spec(policy))
    gm.records[KEY] = GangRecord(KEY, **record)  # type: ignore[arg-type]
    return gm


# --- the gang manager -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "status", "reached", "counted"),
    [
        ("once-satisfied", GangStatus.SATISFIED, True, 2),
        ("only-waiting", GangStatus.ACCUMULATING, False, 0),
        ("waiting-and-running", GangStatus.ACCUMULATING, True, 2),
    ],
)
def test_a_bound_gang_by_policy(policy: str, status: GangStatus, reached: bool, counted: int) -> None:
    """Two pods bound (the gang's first bind at t=5), none waiting."""
    gm = manager(policy, bound={"default/w0", "default/w1"}, satisfied_at=5.0)
    assert gm.status(KEY) == status
    assert gm.reached_minimum(KEY) is reached
    assert gm.placed_count(KEY) == counted


@pytest.mark.parametrize(("policy", "reached"), [("only-waiting", False), ("waiting-and-running", True)])
def test_one_more_waiting_pod_after_the_bind(policy: str, reached: bool) -> None:
    gm = manager(policy, assumed={"default/w2"}, bound={"default/w0", "default/w1"}, satisfied_at=5.0)
    assert gm.reached_minimum(KEY) is reached
    gm.records[KEY].assumed.add("default/w3")
    assert gm.reached_minimum(KEY)  # two waiting: each policy has its minimum


def test_waiting_and_running_loses_its_minimum_when_its_running_pods_are_gone() -> None:
    """Never satisfied for good: with one pod left running, the gang needs a waiting one again."""
    gm = manager("waiting-and-running", bound={"default/w0"}, satisfied_at=5.0)
    assert not gm.reached_minimum(KEY)
    once = manager("once-satisfied", bound={"default/w0"}, satisfied_at=5.0)
    assert once.reached_minimum(KEY)


@pytest.mark.parametrize(("policy", "reached"), [(p, p != "only-waiting") for p in POLICIES])
def test_pods_found_bound_count_by_policy(policy: str, reached: bool) -> None:
    """BoundPodsFound (pods bound before a restart, unknown to Redis) satisfies nothing; they count as bound."""
    gm = manager(policy)
    gm.apply([BoundPodsFound(KEY, ("default/w0", "default/w1"))])
    assert gm.status(KEY) == GangStatus.ACCUMULATING
    assert gm.reached_minimum(KEY) is reached


@pytest.mark.parametrize(("policy", "satisfied"), [(p, p == "once-satisfied") for p in POLICIES])
def test_only_once_satisfied_stays_satisfied_after_the_first_bind(policy: str, satisfied: bool) -> None:
    gm = manager(policy, assumed={"default/w0", "default/w1"})
    gm.apply([PodsBound(KEY, ("default/w0", "default/w1"), 5.0)])
    assert gm.records[KEY].satisfied_at == 5.0  # the first bind is recorded whatever the policy
    assert (gm.status(KEY) == GangStatus.SATISFIED) is satisfied


# --- through the scheduler --------------------------------------------------------------------------------


@pytest.fixture
def h(store: StateStore) -> LocalScheduler:
    return LocalScheduler(store)


def bound_then_one_more(h: LocalScheduler, policy: str) -> None:
    """A gang of min 2 whose first two pods bound at t=0 (they keep running); a third pod arrives at t=10."""
    h.sched.upsert_nodes([model_node("n1", gpus=8)])
    h.sched.upsert_gangs([spec(policy, wait=30)])
    h.queue.add([model_pod("w0", "job", gpus=1), model_pod("w1", "job", gpus=1)], 0)
    h.sched.step(0)
    assert sorted(h.bound()) == ["default/w0", "default/w1"]
    h.queue.add([model_pod("w2", "job", gpus=1)], 10)
    h.sched.step(10)


@pytest.mark.parametrize("policy", ["once-satisfied", "waiting-and-running"])
def test_a_later_pod_binds_alone(h: LocalScheduler, policy: str) -> None:
    bound_then_one_more(h, policy)
    assert "default/w2" in h.bound()


def test_only_waiting_binds_a_later_pod_only_with_a_second_one(h: LocalScheduler) -> None:
    bound_then_one_more(h, "only-waiting")
    assert "default/w2" not in h.bound()
    assert h.store.load_pods()["default/w2"].state == "assumed"  # held, waiting for a second new pod
    assert "1/2 pods placed; waiting for the rest of the gang" in h.conditions()["default/w2"]
    h.queue.add([model_pod("w3", "job", gpus=1)], 15)
    h.sched.step(15)
    assert {"default/w2", "default/w3"} <= set(h.bound())


def test_only_waiting_gives_a_later_batch_its_own_wait(h: LocalScheduler) -> None:
    """The first bind cleared the gang's timer; a later batch that never completes must not hold its
    reservation for ever: its wait starts when it reaches the wait stage."""
    bound_then_one_more(h, "only-waiting")
    r = h.sched.step(10)
    assert r.next_wakeup == pytest.approx(40.0)
    h.sched.step(40)
    assert "default/w2" not in h.store.load_pods()  # given back
    assert h.annotations()["default/w2"][KOORD_TIMEOUT] == "true"
    assert sorted(k for k, r in h.store.load_pods().items() if r.state == "bound") == ["default/w0", "default/w1"]


def found_bound_then_one_more(h: LocalScheduler, policy: str) -> None:
    """Two pods of the gang found already bound (a restart against a cluster Redis knows nothing of), then a
    third pod arrives."""
    h.sched.upsert_nodes([model_node("n1", gpus=8)])
    h.sched.upsert_gangs([spec(policy)])
    running = [model_pod(f"w{i}", "job", gpus=1) for i in range(2)]
    for p in running:
        p.node_name = "n1"
    h.sched.add_bound_pods(running)
    h.queue.add([model_pod("w2", "job", gpus=1)], 1)
    h.sched.step(1)


@pytest.mark.parametrize(("policy", "binds"), [(p, p != "only-waiting") for p in POLICIES])
def test_pods_found_bound_count_by_policy_in_the_scheduler(h: LocalScheduler, policy: str, binds: bool) -> None:
    found_bound_then_one_more(h, policy)
    assert ("default/w2" in h.bound()) is binds


def test_the_policy_survives_a_restart(h: LocalScheduler, store: StateStore) -> None:
    bound_then_one_more(h, "only-waiting")
    fresh = GangScheduler(store, h.queue, h.binder, in_tree_framework(), SchedulerSettings(default_wait_seconds=60))
    fresh.recover(11)
    assert fresh.gangs.specs[KEY].match_policy == "only-waiting"
    assert fresh.gangs.status(KEY) == GangStatus.ACCUMULATING
    assert not fresh.gangs.reached_minimum(KEY)
    h.queue.add([model_pod("w3", "job", gpus=1)], 12)
    fresh.step(12)
    assert {"default/w2", "default/w3"} <= set(h.bound())


# --- the wire and Redis ---------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
def test_the_policy_crosses_protobuf_and_redis(store: StateStore, policy: str) -> None:
    assert gang_from_pb(gang_to_pb(spec(policy))).match_policy == policy
    store.put_gangs([spec(policy)])
    assert store.load_gangs()[KEY].match_policy == policy


def test_a_sender_without_the_field_means_once_satisfied() -> None:
    m = gang_to_pb(spec("only-waiting"))
    m.ClearField("match_policy")
    assert gang_from_pb(m).match_policy == "once-satisfied"
    assert gang_errors(m, "gangs[0]") == []


def test_an_unknown_policy_on_the_wire_is_refused() -> None:
    m = gang_to_pb(spec("once-satisfied"))
    m.match_policy = "always"
    assert gang_errors(m, "gangs[0]") == [
        "gangs[0].match_policy: 'always' is not one of once-satisfied, only-waiting, waiting-and-running"
    ]
