"""What a gang's timeout says: the real cause (a GangGroup partner that never completed, not "too few pods
were created"), and the pods it had placed when its wait ran out, not the zero left after the release."""

from __future__ import annotations

import json

import pytest
from builders import gang_spec, model_node, model_pod
from local_scheduler import LocalScheduler

from phalanx.model.objects import GangMode, NodeInfo, PodInfo
from phalanx.scheduling.scheduler import GangScheduler
from phalanx.state.store import StateStore, decoded


def node(name: str, gpus: int) -> NodeInfo:
    return model_node(name, gpus=gpus)


def pod(name: str, gang: str) -> PodInfo:
    return model_pod(name, gang, gpus=1)


@pytest.fixture
def sched(store: StateStore) -> GangScheduler:
    return LocalScheduler(store).sched


def conditions(s: GangScheduler) -> dict[str, str]:
    return decoded(s.store.redis.hgetall(s.store.keys.sim_conditions))


def gang_events(s: GangScheduler, phase: str) -> dict[str, str]:
    """The last gang-level message of each gang in `phase`, as the simulated cluster recorded it."""
    out = {}
    for raw in s.store.redis.lrange(s.store.keys.sim_events, 0, -1):
        e = json.loads(raw)
        if e["object"].startswith("PodGroup/") and e["reason"] == phase:
            out[e["object"].removeprefix("PodGroup/")] = e["message"]
    return out


def test_a_gang_held_by_its_group_partner_names_the_partner_and_its_progress(sched: GangScheduler) -> None:
    sched.upsert_nodes([node("n1", 3)])
    group = ("default/trainer", "default/evaluator")
    sched.upsert_gangs(
        [
            gang_spec("trainer", 2, mode=GangMode.STRICT, groups=group, wait=30.0),
            gang_spec("evaluator", 3, mode=GangMode.NON_STRICT, groups=group, wait=30.0),
        ]
    )
    # The trainer's two pods are placed; the evaluator gets the last GPU and waits for two more.
    sched.queue.add([pod("t0", "trainer"), pod("t1", "trainer"), pod("e0", "evaluator")], 0)  # type: ignore[attr-defined]
    sched.step(0)
    assert len(sched.store.load_pods()) == 3
    sched.step(30)
    trainer = gang_events(sched, "Failed")["default/trainer"]
    assert "too few of its pods were created" not in trainer
    assert "with 2/2 pods placed" in trainer
    assert "waiting for GangGroup member default/evaluator which has 1/3 pods placed" in trainer
    assert conditions(sched)["default/t0"] == trainer
    # The evaluator's own message: its pods were never all created.
    evaluator = gang_events(sched, "Failed")["default/evaluator"]
    assert "with 1/3 pods placed (too few of its pods were created)" in evaluator


def test_a_pod_turned_away_after_the_timeout_is_told_what_was_placed_then(sched: GangScheduler) -> None:
    sched.upsert_nodes([node("n1", 2)])
    sched.upsert_gangs([gang_spec("ns", 3, mode=GangMode.NON_STRICT, wait=20.0)])
    sched.queue.add([pod(f"w{i}", "ns") for i in range(3)], 0)  # type: ignore[attr-defined]
    sched.step(0)
    assert len(sched.store.load_pods()) == 2  # w0 and w1 reserved, w2 does not fit
    sched.step(20)
    at_timeout = conditions(sched)["default/w0"]
    assert "with 2/3 pods placed" in at_timeout and "last failure: w2" in at_timeout
    # w2 comes back from the unschedulable queue after the release: the same counts, not 0/3.
    sched.queue.queue.move_all(21)  # type: ignore[attr-defined]
    sched.step(21)
    assert conditions(sched)["default/w2"] == at_timeout
