"""The changes a scheduling decision makes to a gang's record, as values.

Each operation knows how it changes the in-memory record (`apply`); `phalanx.state.gang_writes` knows how
it is written to Redis. The gang manager decides, the scheduler commits the operations to Redis, and only
then does memory change (see `phalanx.gang.statement`), so a conflict leaves nothing to undo.
"""

from __future__ import annotations

from dataclasses import dataclass

from phalanx.gang.record import GangRecord


@dataclass(frozen=True)
class GangOp:
    gang: str

    # Whether the op starts or clears the gang's wait timer (the scheduler then re-reads its next deadline).
    moves_timer = False

    def apply(self, rec: GangRecord) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class TriedInCycle(GangOp):
    """Strict mode: `pod` went through cycle `cycle` (tried, or turned away by an invalid cycle)."""

    pod: str
    cycle: int

    def apply(self, rec: GangRecord) -> None:
        rec.rounds[self.pod] = self.cycle


@dataclass(frozen=True)
class CycleInvalidated(GangOp):
    """Strict mode: a pod failed, so the rest of the cycle is turned away."""

    def apply(self, rec: GangRecord) -> None:
        rec.valid = False


@dataclass(frozen=True)
class CycleAdvanced(GangOp):
    """Every pod went through the cycle: a new, valid one starts."""

    cycle: int

    def apply(self, rec: GangRecord) -> None:
        rec.cycle = self.cycle
        rec.valid = True


@dataclass(frozen=True)
class PodsAssumed(GangOp):
    pods: tuple[str, ...]

    def apply(self, rec: GangRecord) -> None:
        rec.assumed.update(self.pods)


@dataclass(frozen=True)
class PodsReleased(GangOp):
    """Reservations given back, or bound pods gone (finished, deleted, preempted). In Redis the release of
    the pods' records (in the same transaction) takes them out of both of the gang's sets, so this op
    writes nothing of its own."""

    pods: tuple[str, ...]

    def apply(self, rec: GangRecord) -> None:
        rec.assumed.difference_update(self.pods)
        rec.bound.difference_update(self.pods)


@dataclass(frozen=True)
class WaitStarted(GangOp):
    """The first pod reached the wait stage: the gang's timer runs until `deadline`."""

    at: float
    deadline: float
    trace: str
    moves_timer = True

    def apply(self, rec: GangRecord) -> None:
        rec.first_wait = self.at
        rec.trace = self.trace


@dataclass(frozen=True)
class TimedOut(GangOp):
    """The wait ran out and the reservations were given back. `retry_at`: the form retries, and the gang is
    tried again from then (its timer is set to it); None: given up for good (its timer is cleared)."""

    retry_at: float | None = None
    moves_timer = True

    def apply(self, rec: GangRecord) -> None:
        rec.timed_out = True
        rec.assumed.clear()
        rec.retry_at = self.retry_at
        rec.timeouts += 1


@dataclass(frozen=True)
class TimeoutLifted(GangOp):
    """A retrying gang's backoff ended: it is tried again as new, with a fresh wait (none started yet) and a
    fresh Strict cycle `cycle`, so no pod is turned away by the attempt that timed out."""

    cycle: int
    moves_timer = True

    def apply(self, rec: GangRecord) -> None:
        rec.timed_out = False
        rec.retry_at = None
        rec.first_wait = None
        rec.cycle = self.cycle
        rec.valid = True


@dataclass(frozen=True)
class PodsBound(GangOp):
    """Pods of the gang bound; the first bind satisfies the gang and clears its timer."""

    pods: tuple[str, ...]
    at: float

    def apply(self, rec: GangRecord) -> None:
        rec.assumed.difference_update(self.pods)
        rec.bound.update(self.pods)
        if rec.satisfied_at is None:
            rec.satisfied_at = self.at


@dataclass(frozen=True)
class BoundPodsFound(GangOp):
    """Pods found already bound on the cluster (a restart): they count toward the gang, satisfy nothing."""

    pods: tuple[str, ...]

    def apply(self, rec: GangRecord) -> None:
        rec.bound.update(self.pods)


@dataclass(frozen=True)
class PodsSucceeded(GangOp):
    """`count` bound pods of the gang finished successfully (released in the same transaction, so in neither
    of its sets): they keep counting toward its minimum, so a job finishing is not a gang losing its pods."""

    count: int

    def apply(self, rec: GangRecord) -> None:
        rec.succeeded += self.count


@dataclass(frozen=True)
class SatisfactionLost(GangOp):
    """The gang's bound pods (running, or finished successfully) fell below its minimum: evicted, deleted,
    preempted, failed, their node lost. It is satisfied no longer: its next pods are placed all-or-nothing
    again. `fresh` (none of its pods waits): the next attempt starts anew, with no wait running (its first
    pod placed starts one) and a fresh Strict cycle `cycle`, so no pod is turned away by an attempt before."""

    cycle: int
    fresh: bool = True
    moves_timer = True

    def apply(self, rec: GangRecord) -> None:
        rec.satisfied_at = None
        if self.fresh:
            rec.first_wait = None
            rec.cycle = self.cycle
            rec.valid = True
