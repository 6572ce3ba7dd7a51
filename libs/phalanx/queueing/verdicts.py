"""The scheduler's verdicts on popped pods, applied to the queue: one place for what a round's outcome means
to it, whether the verdicts came over gRPC (the queue service) or in process (tests' local queue)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from phalanx.model.policies import job_ordering
from phalanx.queueing.hints import Hint
from phalanx.queueing.scheduling_queue import Outcome, SchedulingQueue


class OrderedPod(Protocol):
    """What the queue orders a pod by: a model PodInfo and a protobuf Pod both have it."""

    @property
    def priority(self) -> int: ...

    @property
    def created_at(self) -> float: ...

    @property
    def gang(self) -> str: ...

    @property
    def gang_created_at(self) -> float: ...

    @property
    def namespace(self) -> str: ...

    @property
    def annotations(self) -> Mapping[str, str]: ...


@dataclass(frozen=True, slots=True)
class PodVerdict:
    """What became of one popped pod. The pod's ordering fields travel with it: a pod no longer in the queue
    (a reservation released since) is added back from them."""

    key: str
    outcome: Outcome
    payload: Any  # what a later pop hands out for the pod
    priority: int = 0
    created_at: float = 0.0
    gang: str = ""
    gang_created_at: float = 0.0
    hint: Hint | None = None  # UNSCHEDULABLE: what may make it schedulable (None: any cluster event)
    tenant: str = ""  # see phalanx.model.policies.job_ordering
    queue_policy: str = ""

    @classmethod
    def of(cls, key: str, outcome: Outcome, pod: OrderedPod, payload: Any, hint: Hint | None = None) -> PodVerdict:
        tenant, policy = job_ordering(pod)
        return cls(
            key, outcome, payload, pod.priority, pod.created_at, pod.gang, pod.gang_created_at, hint, tenant, policy
        )


def apply_verdicts(
    queue: SchedulingQueue, verdicts: Iterable[PodVerdict], activate: Iterable[str], failed: Iterable[str], now: float
) -> None:
    """Pods first, then the gangs that failed (one retried on a timer queues behind the others, one waiting
    for an event keeps its turn: see SchedulingQueue.gang_failed), then the gangs activated (their
    unschedulable and backoff pods move to active)."""
    for v in verdicts:
        queue.done(
            v.key,
            v.outcome,
            now,
            payload=v.payload,
            priority=v.priority,
            created_at=v.created_at,
            gang=v.gang,
            gang_created_at=v.gang_created_at,
            hint=v.hint,
            tenant=v.tenant,
            queue_policy=v.queue_policy,
        )
    for gang in failed:
        queue.gang_failed(gang, now)
    for gang in activate:
        queue.activate_gang(gang, now)
