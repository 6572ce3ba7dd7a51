"""Issue 22 through the real stack (redis-server and the three services as processes, the Scheduler API
feeding cluster events as the simulator does): a gang evicted whole is placed all-or-nothing again when its
pods are recreated, even when the scheduler is SIGKILLed between seeing the eviction and committing the
gang's return to unsatisfied; and once-satisfied still holds for a gang running at its minimum."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from builders import gang_spec, model_node, model_pod

from phalanx.faults import EXIT_CODE
from phalanx.model.objects import PodInfo
from phalanx.rpc.clients import SchedulerClient
from phalanx.security.tls import PLAINTEXT
from phalanx.sim.services import Stack
from phalanx.state.store import StateStore

pytestmark = pytest.mark.integration

KEY = "default/train"
FAULT = "scheduler.before_unsatisfy"


@pytest.fixture
def stack(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Stack]:
    fault = getattr(request, "param", "")
    s = Stack.launch(log_dir=tmp_path / "logs", scheduler_env={"PHALANX_FAULT": fault} if fault else None)
    s.scheduler.fault = fault  # what its first incarnation runs with
    yield s
    s.stop()


def client(stack: Stack) -> SchedulerClient:
    return SchedulerClient(stack.scheduler.address, PLAINTEXT, timeout=30)


def worker(i: int, at: float = 0.0) -> PodInfo:
    return model_pod(f"w{i}", "train", gpus=1, created=at)


def bound_pods(stack: Stack) -> dict[str, str]:
    store = StateStore.from_url(stack.redis_url, stack.prefix)
    return {k: r.state for k, r in store.load_pods().items() if r.state == "bound"}


def bind_times(stack: Stack, pod: str) -> list[float]:
    store = StateStore.from_url(stack.redis_url, stack.prefix)
    records = (json.loads(x) for x in store.redis.lrange(store.keys.sim_binds, 0, -1))
    return [float(r["at"]) for r in records if r["pod"] == pod]


def gang(c: SchedulerClient) -> object:
    return next(g for g in c.list_gangs() if g.key == KEY)


@pytest.mark.parametrize("stack", ["", f"{FAULT}:1"], ids=["no-crash", "killed-before-unsatisfy"], indirect=True)
def test_recreated_pods_of_a_gang_evicted_whole_bind_all_or_nothing(stack: Stack) -> None:
    c = client(stack)
    start = SchedulerClient.events(0, nodes=[model_node("n1", gpus=4)], gangs=[gang_spec("train", 4, wait=60)])
    assert c.step(0, start, pods=[worker(i) for i in range(4)]).pods_bound == 4
    evicted = [worker(i).key for i in range(4)]
    if stack.scheduler.fault:
        # The scheduler dies after seeing the eviction, before the release and the gang's return to
        # unsatisfied are committed: Redis still has four pods bound and the gang satisfied.
        with pytest.raises(grpc.RpcError):
            c.apply(10, deleted=evicted)
        assert stack.scheduler.proc is not None and stack.scheduler.proc.wait(30) == EXIT_CODE
        assert len(bound_pods(stack)) == 4
        stack.scheduler.start(fault="")
        c = client(stack)
        assert gang(c).satisfied  # nothing committed: the restart reads what was there
    c.apply(10, deleted=evicted)  # delivered (again, after a crash: the call that saw it failed)
    assert not gang(c).satisfied and gang(c).bound == 0
    # A high-priority job takes two of the four GPUs; the operator recreates the workers one at a time.
    assert c.step(11, pods=[model_pod(f"hi{i}", gpus=1, priority=100, created=11) for i in range(2)]).pods_bound == 2
    for i in range(4):
        assert c.step(20 + i, pods=[worker(i, at=20 + i)]).pods_bound == 0
        assert not set(bound_pods(stack)) & set(evicted), f"w{i}: the gang bound partly"
    # Room for four: they bind together.
    assert c.step(30, SchedulerClient.events(30, nodes=[model_node("n2", gpus=4)])).pods_bound == 4
    assert set(evicted) <= set(bound_pods(stack))
    assert all(bind_times(stack, k) == [0.0, 30.0] for k in evicted)
    assert gang(c).satisfied


def test_once_satisfied_still_binds_a_later_pod_alone(stack: Stack) -> None:
    """A gang of min 2 with 4 pods: 2 bound, a 3rd arriving alone binds alone."""
    c = client(stack)
    start = SchedulerClient.events(0, nodes=[model_node("n1", gpus=4)], gangs=[gang_spec("train", 2, total=4)])
    assert c.step(0, start, pods=[worker(0), worker(1)]).pods_bound == 2
    assert c.step(5, pods=[worker(2, at=5)]).pods_bound == 1
    assert c.step(6, SchedulerClient.events(6, deleted=[worker(0).key])).pods_bound == 0
    assert gang(c).satisfied  # two still bound: at its minimum
    assert c.step(7, pods=[worker(3, at=7)]).pods_bound == 1
