"""What a pod is told while it is not bound: Unschedulable (with a Warning Event) only when its gang cannot be
placed now; while it is placed and waits for the rest of its gang or group, reason GangWaiting and no Event,
since cluster-autoscaler scales up for PodScheduled=False with reason Unschedulable (its
UnschedulablePodLister reads exactly that) and job operators repeat a pod's Events on their job."""

from __future__ import annotations

import json
from typing import Any

import pytest
from builders import gang_spec, model_node, model_pod
from local_scheduler import LocalScheduler

from phalanx.backends.kubernetes import KubernetesBackend
from phalanx.backends.simulated import SimulatedBackend
from phalanx.binding.batch_binder import BatchBinder
from phalanx.model.binding import GangReport, PodReport
from phalanx.model.status import EventReason, ScheduledReason
from phalanx.rpc.convert import pod_report_from_pb, pod_report_to_pb
from phalanx.scheduling.scheduler import GangScheduler
from phalanx.state.store import StateStore
from phalanx.testing.in_process import LocalBinder


class RecordingBinder(LocalBinder):
    def __init__(self, binder: BatchBinder, backend: SimulatedBackend) -> None:
        super().__init__(binder, backend)
        self.pods: list[PodReport] = []

    def report(self, pods: list[PodReport], gangs: list[GangReport], now: float) -> None:
        self.pods.extend(pods)
        super().report(pods, gangs, now)


@pytest.fixture
def sched(store: StateStore) -> GangScheduler:
    s = LocalScheduler(store, RecordingBinder).sched
    s.upsert_nodes([model_node("n1", gpus=2)])
    return s


def told(s: GangScheduler, pod: str) -> list[PodReport]:
    return [r for r in s.binder.pods if r.pod_key == f"default/{pod}"]  # type: ignore[attr-defined]


def test_a_pod_waiting_for_the_rest_of_its_gang_is_not_unschedulable(sched: GangScheduler) -> None:
    sched.upsert_gangs([gang_spec("g", 2, wait=30)])
    sched.queue.add([model_pod("a", "g", gpus=1)], 10.0)  # type: ignore[attr-defined]
    sched.step(10.0)
    (waiting,) = told(sched, "a")
    assert waiting.waiting and waiting.condition_reason == ScheduledReason.GANG_WAITING == "GangWaiting"
    assert waiting.unschedulable_message == "gang default/g: 1/2 pods placed; waiting for the rest of the gang"
    assert (waiting.event_reason, waiting.event_message) == ("", "")  # no Warning Event, nor any other
    sched.queue.add([model_pod("b", "g", gpus=1)], 10.3)  # type: ignore[attr-defined]
    sched.step(10.3)
    assert not any(r.condition_reason == ScheduledReason.UNSCHEDULABLE for r in told(sched, "a") + told(sched, "b"))


def test_a_pod_whose_gang_cannot_be_placed_is_unschedulable_with_a_warning(sched: GangScheduler) -> None:
    sched.upsert_gangs([gang_spec("g", 3, wait=30)])
    sched.queue.add([model_pod(n, "g", gpus=1) for n in "abc"], 0.0)  # type: ignore[attr-defined]
    sched.step(0.0)
    for name in "abc":
        (failed,) = told(sched, name)
        assert not failed.waiting and failed.condition_reason == ScheduledReason.UNSCHEDULABLE
        assert failed.event_reason == EventReason.FAILED_SCHEDULING and not EventReason.FAILED_SCHEDULING.normal
        assert "Insufficient nvidia.com/gpu" in failed.unschedulable_message


def test_a_gang_waiting_for_the_other_gangs_of_its_group_is_not_unschedulable(sched: GangScheduler) -> None:
    group = ("default/ga", "default/gb")
    sched.upsert_gangs([gang_spec("ga", 1, groups=group, wait=30), gang_spec("gb", 1, groups=group, wait=30)])
    sched.queue.add([model_pod("a", "ga", gpus=1)], 0.0)  # type: ignore[attr-defined]
    sched.step(0.0)
    (waiting,) = told(sched, "a")
    assert waiting.waiting and waiting.event_reason == ""
    assert waiting.unschedulable_message.endswith("waiting for the other gangs of its group")


def test_waiting_then_failing_is_said_again_as_unschedulable(sched: GangScheduler) -> None:
    """The same pod told it waits, then (its gang released under Strict) that it cannot be placed: the
    second is sent although a report was sent before, and as Unschedulable."""
    sched.upsert_gangs([gang_spec("g", 3, wait=30)])
    sched.queue.add([model_pod("a", "g", gpus=1)], 0.0)  # type: ignore[attr-defined]
    sched.step(0.0)
    sched.queue.add([model_pod(n, "g", gpus=1) for n in "bc"], 1.0)  # type: ignore[attr-defined]
    sched.step(1.0)
    reports = told(sched, "a")
    assert [r.waiting for r in reports] == [True, False]
    assert reports[-1].event_reason == EventReason.FAILED_SCHEDULING


def test_the_wire_keeps_a_waiting_report_waiting() -> None:
    sent = PodReport("ns/p", unschedulable_message="gang ns/g: 1/2 pods placed; waiting", waiting=True)
    assert pod_report_from_pb(pod_report_to_pb(sent)) == sent
    assert pod_report_from_pb(pod_report_to_pb(PodReport("ns/p", unschedulable_message="no"))).waiting is False


# -- the binder's writes (the API faked) ----------------------------------------------------------------------


class Resp:
    def __init__(self, body: dict[str, Any]) -> None:
        self.data = json.dumps(body).encode()

    def read(self) -> bytes:
        return self.data

    def release_conn(self) -> None:
        pass


class FakeCore:
    """The pod `ns/p` of scheduler phalanx, unbound; records status patches and Events."""

    pipeline = None  # writes one by one (the pipeline has its own tests)

    def __init__(self) -> None:
        self.pod: dict[str, Any] = {
            "metadata": {"namespace": "ns", "name": "p", "uid": "u1", "resourceVersion": "7"},
            "spec": {"schedulerName": "phalanx", "containers": [{"name": "c"}]},
            "status": {"phase": "Pending"},
        }
        self.patches: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []

    def read_namespaced_pod(self, name: str, namespace: str, **kw: Any) -> Resp:
        return Resp(self.pod)

    def patch_namespaced_pod_status(self, name: str, namespace: str, body: dict[str, Any], **kw: Any) -> Resp:
        self.patches.append(body)
        self.pod["status"].update(body["status"])
        return Resp(self.pod)

    def create_namespaced_event(self, namespace: str, body: dict[str, Any], **kw: Any) -> Resp:
        self.events.append(body)
        return Resp(body)


def _write(reports: list[PodReport]) -> FakeCore:
    core = FakeCore()
    backend = KubernetesBackend(None, component="phalanx")
    backend.core = backend.view.core = core  # type: ignore[assignment]
    try:
        for r in reports:
            backend._report_pod(r)  # what a write lane runs
    finally:
        backend.close()
    return core


def test_the_binder_writes_nothing_on_a_pod_waiting_for_its_gang() -> None:
    # As kube-scheduler in Permit: no condition of any reason (the training-operator repeats a False one as a
    # Warning on its job), no Event.
    core = _write([PodReport("ns/p", unschedulable_message="gang ns/g: 1/2 pods placed; waiting", waiting=True)])
    assert core.patches == [] and core.events == []


def test_a_waiting_pod_with_a_nominated_node_says_gang_waiting_not_unschedulable() -> None:
    core = _write(
        [PodReport("ns/p", unschedulable_message="gang ns/g: 1/2 pods placed", waiting=True, nominated_node="n1")]
    )
    conditions = [c for p in core.patches for c in (p.get("status") or {}).get("conditions") or []]
    assert [c["reason"] for c in conditions] == ["GangWaiting"]
    assert core.events == []


def test_the_binder_warns_only_for_unschedulable() -> None:
    failed = PodReport(
        "ns/p",
        unschedulable_message="gang ns/g: 0/2 pods placed; Insufficient nvidia.com/gpu",
        event_reason=EventReason.FAILED_SCHEDULING,
        event_message="gang ns/g: 0/2 pods placed; Insufficient nvidia.com/gpu",
    )
    core = _write([failed, PodReport("ns/p", unschedulable_message="gang ns/g: 1/2 pods placed", waiting=True)])
    assert [p["status"]["conditions"][0]["reason"] for p in core.patches] == ["Unschedulable"]
    assert [(e["reason"], e["type"]) for e in core.events] == [("FailedScheduling", "Warning")]
