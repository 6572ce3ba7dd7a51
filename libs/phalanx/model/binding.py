"""What the scheduler asks of the binder and what it answers: domain types, so scheduling, binding and the
backends know no protobuf (`phalanx.rpc.convert` turns them into the wire messages of binder.proto and back).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from phalanx.model.status import ScheduledReason


class BindStatus(StrEnum):
    BOUND = "bound"
    FAILED = "failed"  # not bound; its reservation was released
    ROLLED_BACK = "rolled_back"  # not bound because another pod of its all-or-nothing batch failed
    GONE = "gone"  # the pod no longer exists
    # The binding started (its intent is durable in Redis) but did not complete: the reservation is kept
    # and the binding is rolled forward later, never undone.
    PENDING = "pending"


@dataclass(frozen=True, slots=True)
class Assignment:
    pod_key: str  # "ns/name"
    uid: str
    node: str
    gang: str = ""  # "" for an ordinary pod


@dataclass(frozen=True, slots=True)
class BindResult:
    pod_key: str
    status: BindStatus
    message: str = ""


@dataclass(slots=True)
class PodReport:
    """Status to write on a pod: annotations, a PodScheduled=False condition, an Event."""

    pod_key: str
    annotations: dict[str, str] = field(default_factory=dict)
    # PodScheduled=False with this message, when set: reason Unschedulable, or GangWaiting when `waiting`.
    unschedulable_message: str = ""
    event_reason: str = ""
    event_message: str = ""
    nominated_node: str = ""  # preemption: status.nominatedNodeName to set while its victims terminate
    # Placed, waiting for the rest of its gang (or GangGroup): not unschedulable; a real cluster's backend
    # writes nothing for it (see ScheduledReason).
    waiting: bool = False

    @property
    def condition_reason(self) -> ScheduledReason:
        return ScheduledReason.GANG_WAITING if self.waiting else ScheduledReason.UNSCHEDULABLE


class EvictStatus(StrEnum):
    EVICTED = "evicted"  # accepted: the pod terminates
    GONE = "gone"  # the pod no longer exists, or is another incarnation
    REFUSED = "refused"  # refused for good (a PodDisruptionBudget allows no disruption)
    RETRY = "retry"  # no answer now: ask again later


@dataclass(frozen=True, slots=True)
class Victim:
    """A pod the scheduler chose to preempt for a higher-priority gang."""

    pod_key: str
    uid: str
    node: str
    preemptor: str  # the gang it makes room for
    message: str = ""


@dataclass(frozen=True, slots=True)
class EvictResult:
    pod_key: str
    status: EvictStatus
    message: str = ""


@dataclass(slots=True)
class GangReport:
    """A gang's progress, for its PodGroup's status and an Event (see binder.proto for each field)."""

    gang_key: str
    phase: str = ""  # "" leaves the phase as it is
    scheduled: int = 0
    message: str = ""
    source: str = ""
    event_reason: str = ""  # "" for no Event
    unschedulable: bool = False
    schedule_start_time: float = 0.0
    pod_key: str = ""
    has_counts: bool = False
    running: int = 0
    succeeded: int = 0
    failed: int = 0
