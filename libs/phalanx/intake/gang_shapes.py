"""The shapes a gang declaration is read into, and the names of the forms that declare gangs.

A pod's link to its gang (LinkSite, then GangLink), the gang object it names (ObjectRef), and the parameters
each layer declares (GangParams of Declared values, which remember where each was written so a later
conflict names the right field).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from dataclasses import fields as dataclass_fields
from typing import Generic, TypeVar

from phalanx.intake.errors import IntakeError, Subject
from phalanx.intake.gang_kinds import PODGROUP_KIND
from phalanx.model.objects import GangMode, Resources

# The forms' names as GangSpec.source has them (a PodGroup's is "podgroup/<its API group>").
KOORDINATOR_ANNOTATIONS = "koordinator-annotations"
LIGHTWEIGHT = "lightweight-coscheduling"
KUBE_BATCH = "kube-batch-annotations"
DELAYED_BINDING = "delayed-binding-annotations"
CONFIGMAP = "configmap"
SCHEDULING_GROUP_FIELD = "spec.schedulingGroup.podGroupName"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Declared(Generic[T]):
    """A gang parameter and where it was written, so a later conflict can name the right field."""

    value: T
    subject: Subject
    field: str

    def error(self, message: str) -> IntakeError:
        return self.subject.error(self.field, message)


@dataclass(frozen=True, slots=True)
class GangParams:
    """The parameters one declaration gives; None means "not said here", so layers can be overlaid."""

    min_available: Declared[int] | None = None
    total_number: Declared[int] | None = None
    mode: Declared[GangMode] | None = None
    wait_seconds: Declared[float] | None = None
    groups: Declared[tuple[str, ...]] | None = None
    match_policy: Declared[str] | None = None
    min_resources: Resources | None = None
    queue: str | None = None
    min_task_member: dict[str, int] | None = None  # Volcano PodGroups only

    def overridden_by(self, other: GangParams) -> GangParams:
        # Called for every pod's gang resolution (twice for a linked pod): the field names are read once, and
        # a layer that says nothing costs no copy.
        if other is NOTHING_SAID:
            return self
        said = {name: value for name in _PARAM_NAMES if (value := getattr(other, name)) is not None}
        return replace(self, **said) if said else self


_PARAM_NAMES = tuple(f.name for f in dataclass_fields(GangParams))
NOTHING_SAID = GangParams()  # a layer that declares nothing (frozen: shared)


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """A PodGroup or ConfigMap that declares a gang; the gang key is its namespace/name."""

    kind: str  # "PodGroup" | "ConfigMap"
    group: str  # API group; "" for the core ConfigMap
    namespace: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def source(self) -> str:
        return f"podgroup/{self.group}" if self.kind == PODGROUP_KIND else CONFIGMAP

    def describe(self) -> str:
        suffix = f" ({self.group})" if self.group else ""
        return f"{self.kind} {self.namespace}/{self.name}{suffix}"


@dataclass(frozen=True, slots=True)
class LinkSite:
    """Where a pod names its gang, before anything is validated."""

    form: str
    name: str
    field: str  # e.g. metadata.labels[scheduling.x-k8s.io/pod-group]


@dataclass(frozen=True, slots=True)
class GangLink:
    """A pod's validated gang declaration."""

    name: str
    source: str
    params: GangParams  # self-contained: the whole declaration; object link: the pod's overrides
    ref: ObjectRef | None = None  # None when the pod declares the gang by itself
    min_field: Declared[None] | None = None  # where min-available belongs, for "is required"
