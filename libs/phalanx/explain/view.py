"""What `phalanx explain` reads, whichever the source: a live cluster or a simulation report.

Both sources (cluster.py, report.py) reduce what they read to these shapes; the analysis (analysis.py)
never knows which one it is looking at. Times are seconds on the source's clock: Unix time for a cluster,
virtual seconds for a simulation (`Clock`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from phalanx.model.objects import GangSpec, NodeInfo, PodInfo
from phalanx.model.status import TERMINAL_POD_PHASES, PodPhase

Clock = Literal["wall", "virtual"]


class SourceError(Exception):
    """The input cannot be read at all; the message names the file or the cluster."""


@dataclass(frozen=True, slots=True)
class Holder:
    """Who a running pod belongs to, for grouping what holds a node: its gang, else its controller."""

    kind: str  # "gang", a controller's kind ("Job", "ReplicaSet", ...), or "pod"
    key: str  # namespace/name


@dataclass(frozen=True, slots=True)
class Condition:
    """The PodScheduled=False condition Phalanx writes: the scheduler's last word on the pod."""

    message: str
    reason: str = ""
    at: float | None = None


@dataclass(slots=True)
class PodState:
    namespace: str
    name: str
    info: PodInfo | None  # None when the pod could not be read (then `error`), or the source has no spec
    ours: bool  # spec.schedulerName is the scheduler being explained
    node: str = ""
    phase: str = ""  # a PodPhase, or "" when not known
    holder: Holder | None = None
    gang: str = ""  # the gang it resolves to (our pods only)
    created_at: float | None = None
    started_at: float | None = None
    ends_at: float | None = None
    end_basis: str = ""  # where ends_at comes from, e.g. "activeDeadlineSeconds"
    condition: Condition | None = None
    timed_out: bool = False  # Phalanx marked it: its gang ran out of time
    deleting: bool = False
    error: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def holds_capacity(self) -> bool:
        return bool(self.node) and self.phase not in TERMINAL_POD_PHASES

    @property
    def pending(self) -> bool:
        return not self.node and self.phase not in TERMINAL_POD_PHASES and not self.deleting


@dataclass(slots=True)
class PodGroupStatus:
    """A PodGroup's status as its API group writes it (scheduler-plugins or Volcano)."""

    api_group: str
    phase: str = ""
    conditions: list[dict[str, Any]] = field(default_factory=list)  # type, status, reason, message
    schedule_start_time: float | None = None
    scheduled: int | None = None
    running: int | None = None


@dataclass(frozen=True, slots=True)
class JobStatus:
    """The PhalanxJob whose gang this is (phalanx-controller's: the Volcano PodGroup of the job's name), as
    its status says."""

    stage: str
    schedule_state: str
    restarts: int
    message: str  # the condition of its stage (why it is there), else ""


@dataclass(slots=True)
class GangState:
    namespace: str
    name: str
    spec: GangSpec | None = None
    error: str = ""  # the declaration was refused: names the object and the field
    waiting_for: str = ""  # the PodGroup or ConfigMap it names does not exist yet
    pods: list[PodState] = field(default_factory=list)
    # Counts, for a source that knows them without knowing the pods (a report read without its workload).
    min_member: int | None = None
    bound_count: int | None = None
    timed_out: bool = False
    podgroup: PodGroupStatus | None = None
    job: JobStatus | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def minimum(self) -> int | None:
        if self.spec is not None and not self.spec.invalid:
            return self.spec.min_available
        return self.min_member

    @property
    def bound(self) -> int:
        if self.bound_count is not None:
            return self.bound_count
        return sum(1 for p in self.pods if p.node and p.phase != PodPhase.FAILED)

    @property
    def pending_pods(self) -> list[PodState]:
        return [p for p in self.pods if p.pending]


@dataclass(slots=True)
class ClusterState:
    """Everything one explanation is computed from."""

    clock: Clock
    now: float
    source: dict[str, Any]  # what was read: kind "cluster" (context, namespace) or "report" (paths)
    scheduler_name: str
    default_wait: float  # the scheduler's wait for gangs that declare none
    nodes: list[NodeInfo] | None  # None: the source has no node capacity (a report without its workload)
    pods: list[PodState] = field(default_factory=list)
    gangs: dict[str, GangState] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # objects that could not be read, each named
    notes: list[str] = field(default_factory=list)  # limits of what was read (e.g. a PodGroup API not served)

    def gang(self, key: str) -> GangState:
        """The gang `namespace/name`, added (empty) when first named."""
        found = self.gangs.get(key)
        if found is None:
            namespace, _, name = key.partition("/")
            found = self.gangs[key] = GangState(namespace, name)
        return found
