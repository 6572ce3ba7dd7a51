"""The words Phalanx reports in: gang phases, Event reasons, and the Kubernetes pod phases it reads.

StrEnums, so each value is the exact string the API server stores (and compares equal to it): a member can
go into a protobuf field, a JSON body or a comparison with what a watch delivered, unconverted.
"""

from __future__ import annotations

from enum import StrEnum


class GangPhase(StrEnum):
    """A gang's progress, as GangReport.phase carries it and scheduler-plugins' PodGroup status.phase
    shows it (phalanx.kube.podgroups translates it for Volcano)."""

    PENDING = "Pending"  # not placed: no room, or not declared yet
    SCHEDULING = "Scheduling"  # some pods placed, waiting for the gang's minimum
    SCHEDULED = "Scheduled"  # the minimum is bound
    RUNNING = "Running"  # the minimum runs (from the pods' phases)
    FINISHED = "Finished"  # the minimum succeeded
    FAILED = "Failed"  # timed out waiting, or pods failed once running


class EventReason(StrEnum):
    """Every Event reason Phalanx writes; the binder refuses to write any other."""

    SCHEDULED = "Scheduled"  # the binder's, on a pod it bound (kube-scheduler's own reason)
    FAILED_SCHEDULING = "FailedScheduling"
    GANG_WAITING = "GangWaiting"
    GANG_SCHEDULED = "GangScheduled"
    GANG_TIMEOUT = "GangTimeout"
    PREEMPTED = "Preempted"  # on a victim, naming the gang it made room for (kube-scheduler's reason)
    PREEMPTING = "Preempting"  # on a preempting gang: which victims, which nominated nodes

    @property
    def normal(self) -> bool:
        """A Normal Event; the others are Warnings."""
        return self in _NORMAL


_NORMAL = frozenset(
    {
        EventReason.SCHEDULED,
        EventReason.GANG_SCHEDULED,
        EventReason.GANG_WAITING,
        EventReason.PREEMPTED,
        EventReason.PREEMPTING,
    }
)


class ScheduledReason(StrEnum):
    """The reasons of the PodScheduled=False condition Phalanx writes on a pod it has not bound.

    Cluster-autoscaler (and Karpenter) scale up for pods whose PodScheduled is False with reason
    Unschedulable, exactly that reason (cluster-autoscaler's UnschedulablePodLister). A pod placed and waiting
    for the rest of its gang is not short of room, as a pod kube-scheduler holds in Permit is not: on a real
    cluster nothing is written on it (see phalanx.backends.kubernetes), and where a report must touch it
    anyway (a nominated node) its condition says GangWaiting, which the autoscalers do not read."""

    UNSCHEDULABLE = "Unschedulable"  # its gang cannot be placed now (kube-scheduler's v1.PodReasonUnschedulable)
    GANG_WAITING = "GangWaiting"  # placed (reserved), waiting for its gang's other pods or other gangs


class PodPhase(StrEnum):
    """Kubernetes' pod status.phase."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


TERMINAL_POD_PHASES = frozenset({PodPhase.SUCCEEDED, PodPhase.FAILED})
