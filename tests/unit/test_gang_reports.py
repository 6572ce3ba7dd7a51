"""The gang-level reports the scheduler sends the binder (PodGroup status, gang Events): when a gang starts
waiting, binds, fails in Strict mode and times out; unchanged ones are not sent twice."""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import gang_spec, model_node, model_pod
from local_scheduler import LocalScheduler

from phalanx.backends.simulated import SimulatedBackend
from phalanx.binding.batch_binder import BatchBinder
from phalanx.model.objects import PodInfo
from phalanx.scheduling.scheduler import GangScheduler
from phalanx.state.store import StateStore
from phalanx.testing.in_process import LocalBinder
from phalanx.v1 import binder_pb2

SOURCE = "podgroup/scheduling.x-k8s.io"


class RecordingBinder(LocalBinder):
    def __init__(self, binder: BatchBinder, backend: SimulatedBackend) -> None:
        super().__init__(binder, backend)
        self.gangs: list[binder_pb2.GangReport] = []

    def report(self, pods: list[binder_pb2.PodReport], gangs: list[binder_pb2.GangReport], now: float) -> None:
        self.gangs.extend(gangs)
        super().report(pods, gangs, now)


@pytest.fixture
def sched(store: StateStore) -> GangScheduler:
    s = LocalScheduler(store, RecordingBinder).sched
    s.upsert_nodes([model_node("n1", gpus=2)])
    return s


def pod(name: str) -> PodInfo:
    return model_pod(name, "g", gpus=1)


def reports(s: GangScheduler) -> list[binder_pb2.GangReport]:
    return s.binder.gangs  # type: ignore[attr-defined, no-any-return]


def test_waiting_then_scheduled(sched: GangScheduler) -> None:
    sched.upsert_gangs([gang_spec("g", 2, wait=30, source=SOURCE)])
    sched.queue.add([pod("a")], 10.0)  # type: ignore[attr-defined]
    sched.step(10.0)
    waiting = reports(sched)[-1]
    assert (waiting.gang_key, waiting.phase, waiting.event_reason) == ("default/g", "Scheduling", "GangWaiting")
    assert waiting.source == SOURCE and waiting.schedule_start_time == 10.0 and waiting.pod_key == "default/a"
    sched.queue.add([pod("b")], 11.0)  # type: ignore[attr-defined]
    sched.step(11.0)
    done = reports(sched)[-1]
    assert (done.phase, done.event_reason, done.scheduled) == ("Scheduled", "GangScheduled", 2)
    assert done.schedule_start_time == 10.0  # when the gang first waited, not when it bound


def test_strict_failure_and_timeout_name_the_missing_resource(sched: GangScheduler) -> None:
    sched.upsert_gangs([gang_spec("g", 3, wait=5, source=SOURCE)])
    sched.queue.add([pod(n) for n in "abc"], 0.0)  # type: ignore[attr-defined]
    sched.step(0.0)
    failed = reports(sched)[-1]
    assert (failed.phase, failed.event_reason, failed.unschedulable) == ("Pending", "FailedScheduling", True)
    assert "Insufficient nvidia.com/gpu" in failed.message
    count = len(reports(sched))
    sched.step(1.0)  # nothing new: nothing sent again
    assert len(reports(sched)) == count
    sched.step(5.0)
    timeout = reports(sched)[-1]
    # A scheduler-plugins PodGroup is tried again after the backoff: Pending, as its controller shows it, with
    # the timeout's own Event.
    assert (timeout.phase, timeout.event_reason, timeout.unschedulable) == ("Pending", "GangTimeout", True)
    assert "timed out after waiting 5s" in timeout.message and "Insufficient nvidia.com/gpu" in timeout.message
    assert timeout.message.endswith("; retrying after 10s")


def test_gangs_without_a_source_still_report(sched: GangScheduler) -> None:
    spec = gang_spec("g", 1, wait=30)
    sched.upsert_gangs([replace(spec, source="koordinator-annotations")])
    sched.queue.add([pod("a")], 0.0)  # type: ignore[attr-defined]
    sched.step(0.0)
    assert [(r.phase, r.source, r.pod_key) for r in reports(sched)] == [
        ("Scheduled", "koordinator-annotations", "default/a")
    ]
