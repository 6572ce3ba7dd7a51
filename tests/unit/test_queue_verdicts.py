"""The scheduler's verdicts applied to the queue (phalanx.queueing.verdicts), in process and over the wire alike."""

from __future__ import annotations

from typing import Any, cast

import grpc
from builders import model_pod

from phalanx.clock import Clock
from phalanx.model.objects import PodInfo
from phalanx.queueing.hints import Hint
from phalanx.queueing.scheduling_queue import Outcome, QueueSettings, SchedulingQueue
from phalanx.queueing.verdicts import PodVerdict, apply_verdicts
from phalanx.rpc.convert import pod_to_pb
from phalanx.rpc.queue_wire import HintDecoder, hint_to_pb, verdict_from_pb
from phalanx.scheduling.ports import Popped, Verdict
from phalanx.testing.in_process import LocalQueue
from phalanx.v1 import queue_pb2
from phalanx_queue.servicer import QueueServicer

_PB_OUTCOME = {
    Outcome.ASSUMED: queue_pb2.OUTCOME_ASSUMED,
    Outcome.BOUND: queue_pb2.OUTCOME_BOUND,
    Outcome.UNSCHEDULABLE: queue_pb2.OUTCOME_UNSCHEDULABLE,
    Outcome.BACKOFF: queue_pb2.OUTCOME_BACKOFF,
    Outcome.DROPPED: queue_pb2.OUTCOME_DROPPED,
}
HINT = Hint.of({"cpu": 4000}, ["cpu"])


def make_queue() -> SchedulingQueue:
    return SchedulingQueue(QueueSettings(unschedulable_flush=0.0))


def pod(name: str, gang: str = "", priority: int = 0) -> PodInfo:
    return model_pod(name, gang, priority=priority, created=1.0)


def state(q: SchedulingQueue, now: float) -> tuple[Any, ...]:
    s = q.stats(now)
    return s.active, s.backoff, s.unschedulable, s.in_flight, len(q)


def test_a_verdict_on_a_pod_the_queue_no_longer_holds_adds_it_back_in_order() -> None:
    q = make_queue()
    low, high = pod("low"), pod("high", priority=10)
    apply_verdicts(q, [PodVerdict.of(p.key, Outcome.BACKOFF, p, p.name) for p in (low, high)], [], [], now=0.0)
    assert state(q, 0.0) == (0, 2, 0, 0, 2)
    assert [e.payload for e in q.pop(10, now=100.0)] == ["high", "low"]  # priority travelled with the verdict


def test_pods_placed_or_gone_leave_the_queue() -> None:
    q = make_queue()
    for p in (pod("a"), pod("b"), pod("c")):
        q.add(p.key, priority=0, created_at=1.0, gang="", gang_created_at=0.0, payload=p, now=0.0)
    q.pop(10, now=0.0)
    verdicts = [
        PodVerdict.of(f"default/{n}", o, pod(n), None)
        for n, o in (("a", Outcome.ASSUMED), ("b", Outcome.BOUND), ("c", Outcome.DROPPED))
    ]
    apply_verdicts(q, verdicts, [], [], now=1.0)
    assert len(q) == 0


def test_the_queue_service_applies_verdicts_as_the_local_queue_does() -> None:
    pods = [pod("g-0", "g"), pod("g-1", "g"), pod("solo"), pod("placed", "h")]
    outcomes = [Outcome.UNSCHEDULABLE, Outcome.UNSCHEDULABLE, Outcome.BACKOFF, Outcome.ASSUMED]
    hints = [HINT, HINT, None, None]
    activate, failed = ["default/h"], ["default/g"]

    local_queue = make_queue()
    LocalQueue(local_queue).done(
        [Verdict(Popped(p), o, "", h) for p, o, h in zip(pods, outcomes, hints)], activate, failed, now=5.0
    )

    served_queue = make_queue()
    results = []
    for p, o, h in zip(pods, outcomes, hints):
        result = queue_pb2.PodResult(pod=pod_to_pb(p), outcome=_PB_OUTCOME[o])
        if h is not None:
            result.hint.CopyFrom(hint_to_pb(h))
        results.append(result)
    request = queue_pb2.DoneRequest(results=results, activate_gangs=activate, failed_gangs=failed, now=5.0)
    QueueServicer(served_queue, Clock(virtual=True)).Done(request, cast(grpc.ServicerContext, None))

    assert state(local_queue, 5.0) == state(served_queue, 5.0) == (0, 1, 2, 0, 3)
    local_hints = {e.key: e.hint for e in local_queue._entries.values()}
    served_hints = {e.key: e.hint for e in served_queue._entries.values()}
    assert local_hints == served_hints == {"default/g-0": HINT, "default/g-1": HINT, "default/solo": None}


def test_only_an_unschedulable_pods_hint_is_decoded() -> None:
    p = pod("p")
    result = queue_pb2.PodResult(pod=pod_to_pb(p), outcome=queue_pb2.OUTCOME_BACKOFF)
    result.hint.CopyFrom(hint_to_pb(HINT))
    assert verdict_from_pb(result, HintDecoder()) == PodVerdict.of("default/p", Outcome.BACKOFF, p, result.pod)
    result.outcome = queue_pb2.OUTCOME_UNSCHEDULABLE
    assert verdict_from_pb(result, HintDecoder()).hint == HINT
