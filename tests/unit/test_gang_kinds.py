"""The one list of gang-declaring kinds (phalanx.intake.gang_kinds) and what reads it."""

from __future__ import annotations

import pytest

from phalanx.intake.gang_kinds import GANG_KINDS, GANG_OBJECT_KINDS, PODGROUP_KINDS, is_podgroup_api, podgroup_apis
from phalanx.kube import podgroups
from phalanx.model import keys
from phalanx.sim import workload


def test_the_podgroup_apis_are_the_ones_the_kube_layer_watches() -> None:
    # Until the cluster feed lists its collections from GANG_KINDS, the two must not drift apart.
    assert {k.group: k.version for k in PODGROUP_KINDS} == podgroups.WATCHED_VERSIONS


def test_kinds() -> None:
    assert GANG_OBJECT_KINDS == {"PodGroup", "ConfigMap"}
    assert [k.api_version for k in GANG_KINDS if k.kind == "ConfigMap"] == ["v1"]
    assert GANG_OBJECT_KINDS < workload.KINDS


@pytest.mark.parametrize(
    ("api_version", "reads"),
    [
        (f"{keys.GROUP_SIGS}/v1alpha1", True),
        (f"{keys.GROUP_X_K8S}/v1beta9", True),  # the community groups' fields do not change with the version
        (f"{keys.GROUP_VOLCANO}/v1beta1", True),
        (f"{keys.GROUP_K8S}/{keys.GROUP_K8S_VERSION}", True),
        (f"{keys.GROUP_K8S}/v1alpha1", False),  # the Workload API's shape is known at one version
        ("v1alpha1", False),
        ("example.com/v1", False),
        (None, False),
    ],
)
def test_podgroup_apis(api_version: object, reads: bool) -> None:
    assert is_podgroup_api(api_version) is reads


def test_the_error_lists_the_apis_read() -> None:
    assert podgroup_apis() == (
        "scheduling.sigs.k8s.io, scheduling.x-k8s.io, scheduling.volcano.sh, scheduling.k8s.io/v1alpha2"
    )
