"""The internal object model: what every declaration form and every backend is reduced to.

Quantities are integers in milli-units for every resource (cpu "500m" -> 500, memory "1Ki" -> 1_024_000,
nvidia.com/gpu "2" -> 2000), so one arithmetic serves all resources and "1.5" GPUs is representable.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum
from operator import attrgetter

from phalanx.model.pod_affinity import PodAffinitySpec

Resources = dict[str, int]


class GangMode(str, Enum):
    STRICT = "Strict"
    NON_STRICT = "NonStrict"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"  # NoSchedule | PreferNoSchedule | NoExecute


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""  # empty key with operator Exists tolerates everything
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # empty matches every effect


@dataclass(frozen=True, slots=True)
class SelectorRequirement:
    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist | Gt | Lt
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    """One nodeSelectorTerm: its requirements are ANDed; terms of an affinity are ORed."""

    match_expressions: tuple[SelectorRequirement, ...] = ()
    match_fields: tuple[SelectorRequirement, ...] = ()  # only metadata.name exists upstream


@dataclass(frozen=True, slots=True)
class Placement:
    """Everything that constrains a pod to nodes besides resources; hashable so masks can be cached."""

    node_selector: tuple[tuple[str, str], ...] = ()
    affinity_terms: tuple[SelectorTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()


@dataclass(slots=True)
class PodInfo:
    namespace: str
    name: str
    uid: str = ""
    priority: int = 0
    created_at: float = 0.0
    requests: Resources = field(default_factory=dict)
    placement: Placement = field(default_factory=Placement)
    gang: str = ""  # "namespace/name" of its gang, empty when the pod has none
    gang_created_at: float = 0.0
    node_name: str = ""  # set when the pod is already bound
    annotations: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    duration: float | None = None  # simulation only: how long it runs once started
    invalid: str = ""  # why intake refused the pod; such a pod is never scheduled
    # podAffinity, podAntiAffinity and topologySpreadConstraints; None when it declares none.
    pod_affinity: PodAffinitySpec | None = None
    # spec.preemptionPolicy: "Never" keeps the pod (and its gang) from preempting others; "" is Kubernetes'
    # default, PreemptLowerPriority.
    preemption_policy: str = ""
    # spec.schedulingGroup.podGroupName: the scheduling.k8s.io PodGroup (Kubernetes' Workload API) it names.
    # Read by the gang intake only, before the pod leaves it: not sent over gRPC.
    scheduling_group: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def copy(self) -> PodInfo:
        """A shallow copy, as dataclasses.replace(pod) makes one (the feed resolves a copy of every pending
        pod and keeps the pod as parsed): ~1 us against replace's ~5."""
        return PodInfo(*_POD_FIELDS(self))


_POD_FIELDS = attrgetter(*(f.name for f in fields(PodInfo)))  # in __init__'s order


@dataclass(slots=True)
class GangSpec:
    namespace: str
    name: str
    min_available: int
    total_number: int
    mode: GangMode = GangMode.STRICT
    groups: tuple[str, ...] = ()  # gang keys bound together, this gang included; empty: just this gang
    wait_seconds: float | None = None  # None: the scheduler's default
    min_resources: Resources = field(default_factory=dict)
    created_at: float = 0.0
    source: str = ""  # which declaration form produced it, for messages
    invalid: str = ""  # why the declaration is unusable; its pods are not scheduled
    # Koordinator match-policy: which pods count toward min_available. "once-satisfied" (default):
    # waiting pods until the gang is first satisfied, then no gang rule; "only-waiting": waiting pods
    # only; "waiting-and-running": waiting and running pods.
    match_policy: str = "once-satisfied"
    queue: str = ""  # Volcano spec.queue: the tenant its pods' DRF share counts against ("": their namespace)
    # Volcano spec.minTaskMember: role (a pod's volcano.sh/task-spec) -> how many pods of that role must be
    # placed, besides min_available, for the gang to reach its minimum. As in Volcano, roles of 0 are
    # ignored, and all of them are when they add up to more than min_available (phalanx.gang.roles).
    min_task_member: dict[str, int] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def group_keys(self) -> tuple[str, ...]:
        if not self.groups:
            return (self.key,)
        return self.groups if self.key in self.groups else (*self.groups, self.key)


@dataclass(slots=True)
class NodeInfo:
    name: str
    allocatable: Resources = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
