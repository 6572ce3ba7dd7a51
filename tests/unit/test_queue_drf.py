"""The queue's DRF ordering: within a priority, jobs of the tenant holding the smallest dominant share come
first; the scheduler's reports set the shares, and a pop charges the jobs it hands out as it goes."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from phalanx.model.gpu import GPU
from phalanx.queueing.scheduling_queue import QueueSettings, SchedulingQueue
from phalanx.rpc import validation
from phalanx.v1 import queue_pb2

CAPACITY = {"cpu": 64_000, "memory": 256 * 2**30 * 1000, "gpu": 64_000}


@dataclass
class Job:
    """A payload with requests, as the queue service's protobuf Pod has."""

    name: str
    requests: dict[str, int] = field(default_factory=dict)


def _queue(default: str = "Priority") -> SchedulingQueue:
    return SchedulingQueue(QueueSettings(unschedulable_flush=0.0, job_queue_policy=default))


def _add(
    q: SchedulingQueue, name: str, tenant: str, *, policy: str = "DRF", gpus: int = 1, prio: int = 0, at: float = 0
) -> None:
    q.add(
        f"{tenant}/{name}",
        priority=prio,
        created_at=at,
        gang="",
        gang_created_at=at,
        payload=Job(name, {GPU: gpus * 1000}),
        now=0,
        tenant=tenant,
        queue_policy=policy,
    )


def _order(q: SchedulingQueue, n: int = 100) -> list[str]:
    return [e.payload.name for e in q.pop(n, 0)]


def test_the_tenant_holding_less_goes_first_whatever_the_age() -> None:
    q = _queue()
    _add(q, "old", "a", at=0)
    _add(q, "new", "b", at=5)
    q.set_shares({"a": 0.5, "b": 0.1}, CAPACITY)
    assert _order(q, 1) == ["new"]


def test_a_report_that_lowers_a_share_reorders_what_waits() -> None:
    q = _queue()
    _add(q, "a1", "a", at=0)
    _add(q, "b1", "b", at=1)
    q.set_shares({"a": 0.6, "b": 0.2})
    q.set_shares({"a": 0.1})  # a's pods finished; b keeps its last share
    assert _order(q, 1) == ["a1"]


def test_a_pop_charges_each_job_so_tenants_alternate() -> None:
    q = _queue()
    for i in range(4):
        _add(q, f"small{i}", "small", gpus=8, at=i)  # 8 of 64 GPUs: 0.125 each
    for i in range(2):
        _add(q, f"large{i}", "large", gpus=16, at=10 + i)  # 0.25 each
    q.set_shares({"small": 0.0, "large": 0.0}, CAPACITY)
    # small0 (older) 0 -> .125; large0 0 -> .25; small1 .125 -> .25; small2 .25 (older than large1) ...
    assert _order(q) == ["small0", "large0", "small1", "small2", "large1", "small3"]


def test_priority_comes_before_shares_and_priority_jobs_count_as_holding_nothing() -> None:
    q = _queue()
    _add(q, "drf-high", "a", prio=10, at=3)
    _add(q, "drf-low", "b", at=0)
    _add(q, "fifo", "a", policy="Priority", at=2)
    q.set_shares({"a": 0.9, "b": 0.3}, CAPACITY)
    assert _order(q) == ["drf-high", "fifo", "drf-low"]


def test_the_queue_default_policy_applies_to_jobs_naming_none() -> None:
    for default, first in (("Priority", "a-old"), ("DRF", "b-new")):
        q = _queue(default)
        _add(q, "a-old", "a", policy="", at=0)
        _add(q, "b-new", "b", policy="", at=9)
        q.set_shares({"a": 0.7, "b": 0.0}, CAPACITY)
        assert _order(q, 1) == [first], default


@pytest.mark.parametrize(
    ("shares", "capacity", "error"),
    [
        ({"a": 1.5}, {}, "done.tenant_shares[a]: 1.5 is not a share from 0 to 1"),
        ({"a": float("nan")}, {}, "done.tenant_shares[a]: nan is not a share"),
        ({"": 0.1}, {}, "done.tenant_shares: tenant name '' must have 1 to 253 characters"),
        ({}, {"disk": 5}, "done.share_capacity: unknown resource 'disk' (known: cpu, memory, gpu)"),
        ({}, {"gpu": -1}, "done.share_capacity[gpu]: -1 is negative"),
    ],
)
def test_bad_shares_are_refused_naming_the_field(
    shares: dict[str, float], capacity: dict[str, int], error: str
) -> None:
    req = queue_pb2.PopRequest(done=queue_pb2.DoneRequest(tenant_shares=shares, share_capacity=capacity))
    assert any(e.startswith(error) for e in validation.pop_request(req)), validation.pop_request(req)


def test_a_volcano_queue_is_read_and_checked_and_names_the_pods_tenant() -> None:
    from phalanx.intake.errors import IntakeError
    from phalanx.intake.gang_objects import read_gang_object
    from phalanx.intake.gang_shapes import ObjectRef
    from phalanx.model import keys
    from phalanx.model.objects import PodInfo
    from phalanx.model.policies import job_ordering, with_gang_queue

    ref = ObjectRef("PodGroup", "scheduling.volcano.sh", "ns", "pg")
    pg = {"metadata": {"name": "pg", "namespace": "ns"}, "spec": {"minMember": 2, "queue": "research"}}
    assert read_gang_object(pg, ref).queue == "research"
    pg["spec"]["queue"] = "Research Team"  # type: ignore[index]
    with pytest.raises(IntakeError, match=r'PodGroup ns/pg: spec.queue: "Research Team" is not a DNS-1123'):
        read_gang_object(pg, ref)
    pod = PodInfo("ns", "p")
    with_gang_queue(pod, "research")
    assert job_ordering(pod) == ("research", "")
    own = PodInfo("ns", "q", annotations={keys.QUEUE_NAME: "mine"})
    with_gang_queue(own, "research")  # the pod's own annotation wins
    assert job_ordering(own) == ("mine", "")
