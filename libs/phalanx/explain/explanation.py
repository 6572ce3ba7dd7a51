"""What explain says of each gang: the shapes of its answer (text.py and schema.py render them), and where
a gang stands.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from phalanx.explain.capacity import Exclusion
from phalanx.explain.view import Condition, GangState, JobStatus, PodGroupStatus
from phalanx.model.gpu import GPU


class Standing(StrEnum):
    """Where a gang stands, as explain judges it (the `state` of its JSON and text output)."""

    WAITING = "Waiting"
    TIMED_OUT = "TimedOut"
    INVALID = "Invalid"
    UNDECLARED = "Undeclared"
    SATISFIED = "Satisfied"


NOT_RUNNING = (Standing.WAITING, Standing.TIMED_OUT, Standing.INVALID, Standing.UNDECLARED)


@dataclass(slots=True)
class NodeRoom:
    node: str
    free: dict[str, int]  # milli-units of the resources the gang asks for
    pods_fit: int  # pods of the gang this node alone holds now


@dataclass(slots=True)
class HolderGroup:
    kind: str
    key: str
    pods: int
    nodes: list[str]
    holds: dict[str, int]  # milli-units of the gang's resources, on the nodes listed
    ends_at: float | None
    end_basis: str


@dataclass(slots=True)
class CapacityReport:
    pods_to_place: int
    per_pod: dict[str, int]  # the largest pod's needs (equal for every pod when `uniform`)
    uniform: bool
    total: dict[str, int]
    fit_now: int
    short: list[str]
    nodes_total: int
    eligible_nodes: list[str]
    exclusions: list[Exclusion]
    free_on_eligible: dict[str, int]
    best_nodes: list[NodeRoom]
    held_by: list[HolderGroup]  # on the best nodes
    runs_after: list[HolderGroup] | None  # None: not even with every eligible node emptied
    runs_at: float | None  # when the last of runs_after ends; None when one of them has no known end
    fit_when_emptied: int | None = None  # pods placed with every holder on the eligible nodes gone
    min_resources_short: dict[str, tuple[int, int]] = field(default_factory=dict)  # resource -> (wanted, free)


@dataclass(slots=True)
class GangExplanation:
    namespace: str
    name: str
    state: Standing
    declared_by: str
    mode: str
    error: str
    waiting_for: str
    min_member: int | None
    total_number: int | None
    pods: int
    bound: int
    pending: int
    placed: int | None
    waiting_since: float | None
    wait_seconds: float | None
    timer_started: float | None
    timeout_at: float | None
    reason: Condition | None
    reason_pod: str
    podgroup: PodGroupStatus | None
    capacity: CapacityReport | None
    capacity_note: str  # why there is no capacity analysis, or what limits it
    verdict: str  # the answer in one sentence
    preemption: str = ""  # what the scheduler said about preempting for it ("" when it said nothing)
    # The gangs of its deadlock, itself first, each waiting for the next (the last for it); [] when none.
    deadlock: list[str] = field(default_factory=list)
    job: JobStatus | None = None  # the PhalanxJob it is the gang of

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(slots=True)
class Explanation:
    clock: str
    now: float
    source: dict[str, object]
    scheduler_name: str
    gangs: list[GangExplanation]
    errors: list[str]
    notes: list[str]


def gang_state(g: GangState) -> Standing:
    if g.error:
        return Standing.INVALID
    if g.waiting_for:
        return Standing.UNDECLARED
    if g.timed_out or any(p.timed_out and p.pending for p in g.pods):
        return Standing.TIMED_OUT
    minimum = g.minimum
    if minimum is not None and g.bound >= minimum:
        return Standing.SATISFIED
    return Standing.WAITING


def resource_order(resources: Iterable[str]) -> list[str]:
    """GPUs first (usually what a gang waits for), then by name."""
    return sorted(resources, key=lambda r: (r != GPU, r))
