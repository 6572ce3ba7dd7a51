"""What Redis records about a reserved pod: its reservation (the `pods` hash) and its state (`podstate`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from phalanx.model.binding import Assignment
from phalanx.model.objects import PodInfo


class PodState(StrEnum):
    ASSUMED = "assumed"  # reserved by the scheduler, not bound
    # The binder recorded its intent and may have written the binding to the API server: it is rolled
    # forward (bound), never released, while it exists.
    BINDING = "binding"
    BOUND = "bound"


@dataclass
class PodRecord:
    key: str
    node: str
    gang: str
    requests: dict[str, int]
    pod: PodInfo
    state: PodState

    def assignment(self) -> Assignment:
        """The binder's assignment for this reservation: bind this pod (this incarnation of it) here."""
        return Assignment(self.key, self.pod.uid, self.node, self.gang)


@dataclass(frozen=True, slots=True)
class PodMark:
    """What a reconcile pass compares of a reservation (where, which incarnation of the pod, in what state),
    read without building the pod: a pass reads every record, and a repair pass does so under the
    scheduler's lock."""

    node: str
    uid: str
    state: PodState
