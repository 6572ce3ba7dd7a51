"""The scheduler's one set of cluster-event handlers (phalanx.scheduling.events), with a real scheduler and
Redis: what each change does to the scheduler and the queue, and the two places where the cluster feed's
events (API_SERVER) and the Scheduler API's (SCHEDULER_API) are handled differently. And the gang intake
the cluster feed and the simulator share (phalanx.cluster.gang_intake)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from builders import gang_spec, make_pod, make_podgroup, model_node, model_pod
from local_scheduler import LocalScheduler

from phalanx.cluster.gang_intake import Decision, GangIntake
from phalanx.intake.errors import IntakeError
from phalanx.intake.pods import parse_pod
from phalanx.model.keys import VOLCANO_GROUP_NAME
from phalanx.model.objects import PodInfo
from phalanx.queueing.hints import FreedCapacity
from phalanx.queueing.scheduling_queue import Outcome
from phalanx.scheduling.events import API_SERVER, SCHEDULER_API, ClusterChange, ClusterEvents, FeederRules, deliver
from phalanx.scheduling.ports import Carry, Verdict
from phalanx.state.store import StateStore

VOLCANO = "scheduling.volcano.sh/v1beta1"


@pytest.fixture
def h(store: StateStore) -> LocalScheduler:
    return LocalScheduler(store)


def reserve_one_of_two(h: LocalScheduler) -> PodInfo:
    """Pod default/a of a gang of two, reserved on n1 and waiting for its sibling."""
    h.sched.upsert_nodes([model_node("n1", gpus=4)])
    h.sched.upsert_gangs([gang_spec("g", 2, wait=600.0)])
    pod = model_pod("a", "g", gpus=1)
    h.queue.add([pod], 0.0)
    h.sched.step(0.0)
    assert set(h.sched.assumed) == {"default/a"}
    return pod


def states(store: StateStore) -> dict[str, str]:
    return {k: r.state for k, r in store.load_pods().items()}


@pytest.mark.parametrize("rules, state", [(API_SERVER, "bound"), (SCHEDULER_API, "assumed")])
def test_a_reserved_pod_found_bound_is_confirmed_only_from_the_api_server(
    h: LocalScheduler, rules: FeederRules, state: str
) -> None:
    pod = reserve_one_of_two(h)
    ClusterEvents(h.sched, rules).apply(ClusterChange(bound=[replace(pod, node_name="n1")]), 1.0)
    assert states(h.store) == {"default/a": state}
    assert ("default/a" in h.sched.bound) == (state == "bound")


def test_pods_bound_by_another_scheduler_hold_capacity_from_either_feeder(h: LocalScheduler) -> None:
    h.sched.upsert_nodes([model_node("n1", gpus=4)])
    for rules, name in ((API_SERVER, "x"), (SCHEDULER_API, "y")):
        theirs = replace(model_pod(name, gpus=1), node_name="n1")
        ClusterEvents(h.sched, rules).apply(ClusterChange(bound=[theirs]), 1.0)
    assert states(h.store) == {"default/x": "bound", "default/y": "bound"}


def test_a_removed_node_sends_its_reserved_pods_back_unless_they_are_gone(h: LocalScheduler) -> None:
    pod = reserve_one_of_two(h)
    events = ClusterEvents(h.sched, SCHEDULER_API)
    carry = events.apply(ClusterChange(nodes_removed=["n1"]), 1.0)
    assert [(v.item.pod.key, v.outcome, v.reason) for v in carry.verdicts] == [
        (pod.key, Outcome.BACKOFF, "node n1 was removed")
    ]
    assert states(h.store) == {} and not h.sched.assumed

    h.sched.upsert_nodes([model_node("n2", gpus=4)])
    h.queue.add([pod], 2.0)
    h.sched.step(2.0)
    assert set(h.sched.assumed) == {"default/a"}
    carry = events.apply(ClusterChange(nodes_removed=["n2"]), 3.0, still_exists=lambda key: False)
    assert carry.verdicts == []  # deleted meanwhile: not queued again


@pytest.mark.parametrize("rules, still_bound", [(API_SERVER, False), (SCHEDULER_API, True)])
def test_bound_pods_of_a_removed_node_leave_the_bound_set_only_from_the_api_server(
    h: LocalScheduler, rules: FeederRules, still_bound: bool
) -> None:
    h.sched.upsert_nodes([model_node("n1", gpus=4)])
    events = ClusterEvents(h.sched, rules)
    events.apply(ClusterChange(bound=[replace(model_pod("b", gpus=1), node_name="n1")]), 0.0)
    events.apply(ClusterChange(nodes_removed=["n1"]), 1.0)
    assert states(h.store) == {}  # released in Redis either way
    assert ("default/b" in h.sched.bound) is still_bound


def test_one_change_applied_in_order_fills_the_carry(h: LocalScheduler) -> None:
    h.sched.upsert_nodes([model_node("n1", gpus=4)])
    events = ClusterEvents(h.sched, SCHEDULER_API)
    events.apply(ClusterChange(bound=[replace(model_pod("done", gpus=2), node_name="n1")]), 0.0)
    carry = events.apply(
        ClusterChange(
            nodes=[model_node("n2", gpus=8)],
            gangs=[gang_spec("g2", 2)],
            released=["default/done"],
            unqueued=["default/deleted"],
            forgotten=["default/deleted"],
        ),
        1.0,
    )
    assert carry.move_all and carry.activate == ["default/g2"] and carry.remove == ["default/deleted"]
    assert carry.freed  # the finished pod's GPUs, for the pods they may help
    assert set(h.sched.snapshot.index) == {"n1", "n2"} and "default/g2" in h.sched.gangs.specs
    assert states(h.store) == {}


class RecordingQueue:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def done(self, verdicts: list[Verdict], activate: list[str], failed: list[str], now: float) -> None:
        self.calls.append(("done", len(verdicts), activate, now))

    def remove(self, keys: list[str]) -> None:
        self.calls.append(("remove", keys))

    def move_all(self, event: str, now: float, freed: FreedCapacity | None = None) -> None:
        self.calls.append(("move_all", event, freed is not None))


def test_deliver_sends_a_carry_to_the_queue_at_once() -> None:
    q = RecordingQueue()
    deliver(Carry(activate=["ns/g"], remove=["ns/p"], move_all=True), q, 5.0)  # type: ignore[arg-type]
    assert q.calls == [("done", 0, ["ns/g"], 5.0), ("remove", ["ns/p"]), ("move_all", "cluster-changed", False)]
    freed = FreedCapacity()
    freed.add("n1", ["ns/p"], {"cpu": 1000})
    q = RecordingQueue()
    deliver(Carry(freed=freed), q, 6.0)  # type: ignore[arg-type]
    assert q.calls == [("move_all", "capacity-freed", True)]
    q = RecordingQueue()
    deliver(Carry(), q, 7.0)  # type: ignore[arg-type]
    assert q.calls == []


# --- the gang intake ------------------------------------------------------------------------------------


def volcano_pod(name: str, group: str) -> PodInfo:
    return parse_pod(
        make_pod(name)
        .scheduler("phalanx")
        .container()
        .gpu(1)
        .annotation(VOLCANO_GROUP_NAME, group)
        .created("2026-01-01T00:00:00Z")
        .build()
    )


def test_pods_wait_parked_under_their_gang_in_arrival_order() -> None:
    intake = GangIntake(retry_refused=False)
    for name, group in (("b", "pg1"), ("a", "pg1"), ("c", "pg2")):
        res = intake.resolve(f"default/{name}", volcano_pod(name, group))
        assert res.waiting_for and res.spec is None
    assert intake.parked("default/pg1") == ["default/b", "default/a"]
    intake.add_object(make_podgroup("pg1", api_version=VOLCANO).min_member(2).build(), created_at=0.0)
    res = intake.resolve("default/b", volcano_pod("b", "pg1"), parked_under="default/pg1")
    assert res.spec is not None and res.spec.min_available == 2
    assert intake.take_parked() == ["default/a", "default/c"] and intake.take_parked() == []


def test_a_pod_past_scheduling_is_resolved_without_being_parked() -> None:
    intake = GangIntake(retry_refused=True)
    res = intake.resolve("default/a", volcano_pod("a", "pg"), park=False)
    assert res.waiting_for and intake.parked("default/pg") == []


@pytest.mark.parametrize("retry_refused", [True, False])
def test_pods_refused_for_an_invalid_gang_object_are_parked_only_where_retried(retry_refused: bool) -> None:
    intake = GangIntake(retry_refused=retry_refused)
    with pytest.raises(IntakeError):
        intake.add_object(make_podgroup("pg", api_version=VOLCANO).min_member(-1).build(), created_at=0.0)
    res = intake.resolve("default/a", volcano_pod("a", "pg"))
    assert res.error
    assert intake.parked("default/pg") == (["default/a"] if retry_refused else [])


def test_a_spec_is_sent_when_new_or_changed() -> None:
    intake = GangIntake(retry_refused=False)
    spec = gang_spec("g", 2)
    assert intake.is_new(spec) and not intake.was_sent("default/g")
    assert intake.note_sent(spec) and not intake.note_sent(spec) and intake.was_sent("default/g")
    assert intake.note_sent(replace(spec, min_available=3))
    intake.forget_sent("default/g")
    assert intake.note_sent(spec)
    intake.forget_sent()
    assert intake.is_new(spec)


@pytest.mark.parametrize("retry_refused", [True, False])
def test_admission_queues_lets_wait_or_refuses_alike_for_the_feed_and_the_simulator(retry_refused: bool) -> None:
    intake = GangIntake(retry_refused=retry_refused)
    pod = volcano_pod("a", "pg")
    waiting = intake.admit("default/a", pod)
    assert (waiting.decision, waiting.gang, pod.gang) == (Decision.WAIT, "default/pg", "default/pg")
    assert waiting.reason == f"gang default/pg: {waiting.waiting_for}; the pod waits for it"
    assert intake.parked("default/pg") == ["default/a"]  # parked by both: resolved again when the object comes
    intake.add_object(make_podgroup("pg", api_version=VOLCANO).min_member(2).build(), created_at=5.0)
    pod = volcano_pod("a", "pg")
    queued = intake.admit("default/a", pod, parked_under="default/pg")
    assert queued.decision == Decision.QUEUE and queued.spec is not None
    assert (pod.gang, pod.gang_created_at, intake.parked("default/pg")) == ("default/pg", 5.0, [])
    with pytest.raises(IntakeError):
        intake.add_object(make_podgroup("bad", api_version=VOLCANO).min_member(-1).build(), created_at=0.0)
    refused = intake.admit("default/b", volcano_pod("b", "bad"))
    assert refused.decision == Decision.REFUSE and refused.reason
    assert intake.parked("default/bad") == (["default/b"] if retry_refused else [])


def test_a_bound_pod_is_admitted_without_being_parked() -> None:
    intake = GangIntake(retry_refused=True)
    assert intake.admit("default/a", volcano_pod("a", "pg"), park=False).decision == Decision.WAIT
    assert intake.parked("default/pg") == []
