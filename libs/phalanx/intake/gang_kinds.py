"""Which Kubernetes objects declare gangs: the one list the intake, the simulator, the feed and explain read.

A PodGroup of one of four API groups (each read at one version), or a core ConfigMap (seed 003's form; only
one whose data has minAvailable declares a gang, which phalanx.intake.gangs.is_gang_object decides from its
content). The order is the one errors list them in; the watches' order does not matter (a gang object is
known by its group, namespace and name).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from phalanx.model import keys

PODGROUP_KIND = "PodGroup"
CONFIGMAP_KIND = "ConfigMap"


@dataclass(frozen=True, slots=True)
class GangKind:
    """One (API group, kind) that declares gangs, and the version Phalanx reads and watches it at."""

    group: str  # "" for the core API (ConfigMap)
    kind: str
    version: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


GANG_KINDS: tuple[GangKind, ...] = (
    GangKind(keys.GROUP_SIGS, PODGROUP_KIND, "v1alpha1"),
    GangKind(keys.GROUP_X_K8S, PODGROUP_KIND, "v1alpha1"),
    GangKind(keys.GROUP_VOLCANO, PODGROUP_KIND, "v1beta1"),
    # Kubernetes' own Workload API PodGroup: only at the 1.36 version, the one shape known.
    GangKind(keys.GROUP_K8S, PODGROUP_KIND, keys.GROUP_K8S_VERSION),
    GangKind("", CONFIGMAP_KIND, "v1"),
)

PODGROUP_KINDS: tuple[GangKind, ...] = tuple(k for k in GANG_KINDS if k.kind == PODGROUP_KIND)
PODGROUP_GROUPS: tuple[str, ...] = tuple(k.group for k in PODGROUP_KINDS)
# The kinds alone ("PodGroup", "ConfigMap"): what a workload file's `kind:` must be to declare a gang.
GANG_OBJECT_KINDS: frozenset[str] = frozenset(k.kind for k in GANG_KINDS)

# Groups whose PodGroups are read at any version (their fields are the same across versions); the
# Workload API's changes shape between versions, so only the listed one is read.
_ANY_VERSION = frozenset({keys.GROUP_X_K8S, keys.GROUP_SIGS, keys.GROUP_VOLCANO})


def is_podgroup_api(api_version: Any) -> bool:
    """A PodGroup apiVersion ("group/version") that declares gangs."""
    if not isinstance(api_version, str):
        return False
    group, _, version = api_version.rpartition("/")
    return any(k.group == group and (group in _ANY_VERSION or k.version == version) for k in PODGROUP_KINDS)


def podgroup_apis() -> str:
    """The PodGroup APIs read, for an error message."""
    return ", ".join(k.group if k.group in _ANY_VERSION else k.api_version for k in PODGROUP_KINDS)
