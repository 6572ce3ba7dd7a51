"""Kubernetes' own gang API (KEP-4671, the Workload API, alpha in 1.36) against a real kube-apiserver 1.36.

The test server serves scheduling.k8s.io/v1alpha2 (phalanx.testing.apiserver: the GenericWorkload feature
gate and the runtime-config). A Workload holds pod group templates; a PodGroup is one runtime instance of
a template (a controller copies the template's policy into it); a pod names its PodGroup in
spec.schedulingGroup.podGroupName. Phalanx reads the PodGroup: `gang` {minCount} is a gang, `basic` none.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from waiting import wait_for

from phalanx.model.keys import GROUP_K8S, KOORD_TOTAL_NUMBER
from phalanx.testing.apiserver import APISERVER_MISSING_REASON, apiserver_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not apiserver_available(), reason=APISERVER_MISSING_REASON),
]

VERSION = "v1alpha2"
BIND = 20.0  # seconds allowed for something to happen that needs only a few scheduling rounds


def workload(cluster: Any, namespace: str, name: str, templates: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A Workload with one pod group template per entry: template name -> schedulingPolicy."""
    body = {
        "apiVersion": f"{GROUP_K8S}/{VERSION}",
        "kind": "Workload",
        "metadata": {"name": name},
        "spec": {"podGroupTemplates": [{"name": t, "schedulingPolicy": p} for t, p in templates.items()]},
    }
    return cluster.custom.create_namespaced_custom_object(GROUP_K8S, VERSION, namespace, "workloads", body)  # type: ignore[no-any-return]


def podgroup(
    cluster: Any,
    namespace: str,
    name: str,
    policy: dict[str, Any],
    *,
    template: tuple[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A PodGroup, made from the Workload template `template` (workload, template) as a controller would."""
    spec: dict[str, Any] = {"schedulingPolicy": policy}
    if template is not None:
        spec["podGroupTemplateRef"] = {"workload": {"workloadName": template[0], "podGroupTemplateName": template[1]}}
    body = {
        "apiVersion": f"{GROUP_K8S}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": spec,
    }
    return cluster.custom.create_namespaced_custom_object(GROUP_K8S, VERSION, namespace, "podgroups", body)  # type: ignore[no-any-return]


def members(cluster: Any, namespace: str, group: str, count: int, *, start: int = 0, gpus: int = 1) -> list[str]:
    names = [f"{group}-{i}" for i in range(start, start + count)]
    for name in names:
        cluster.pod(namespace, name, gpus=gpus, spec={"schedulingGroup": {"podGroupName": group}})
    return names


def gang(namespace: str, name: str = "train-workers") -> str:
    return f"{namespace}/{name}"


# --- the API as the test server serves it -------------------------------------------------------------------


def test_the_api_server_serves_the_workload_api(apiserver, cluster) -> None:
    """What Phalanx relies on: the group version discovered with both resources, the pod field kept, and
    the API server's own validation of the policy (a malformed Workload or PodGroup never gets stored)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    api = apiserver.api_client()
    [group] = [g for g in client.ApisApi(api).get_api_versions().groups if g.name == GROUP_K8S]
    assert VERSION in [v.version for v in group.versions]
    resources = client.CustomObjectsApi(api).get_api_resources(GROUP_K8S, VERSION)
    assert {r.name for r in resources.resources} >= {"workloads", "podgroups", "podgroups/status"}

    ns = cluster.namespace()
    stored = workload(cluster, ns, "train", {"workers": {"gang": {"minCount": 3}}, "driver": {"basic": {}}})
    assert [t["name"] for t in stored["spec"]["podGroupTemplates"]] == ["workers", "driver"]
    assert "status" not in stored  # a Workload has no status: nothing for a scheduler to report on it
    pg = podgroup(cluster, ns, "train-workers", {"gang": {"minCount": 3}}, template=("train", "workers"))
    assert pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    pod = cluster.pod(ns, "p", gpus=0, spec={"schedulingGroup": {"podGroupName": "train-workers"}})
    assert pod["spec"]["schedulingGroup"] == {"podGroupName": "train-workers"}  # dropped without the gate

    for bad, message in [
        ({"gang": {"minCount": 2}, "basic": {}}, "must specify exactly one of: `basic`, `gang`"),
        ({}, "must specify one of: `basic`, `gang`"),
        ({"gang": {"minCount": 0}}, "spec.podGroupTemplates[0].schedulingPolicy.gang.minCount"),
    ]:
        with pytest.raises(ApiException) as caught:
            workload(cluster, ns, "bad", {"workers": bad})
        assert caught.value.status == 422 and message in json.loads(caught.value.body)["message"]


# --- gangs ---------------------------------------------------------------------------------------------------


def test_a_workload_gang_binds_together(cluster, phalanx) -> None:
    ns = cluster.namespace()
    n1, n2 = cluster.node("n1", gpus=2), cluster.node("n2", gpus=2)
    workload(cluster, ns, "train", {"workers": {"gang": {"minCount": 3}}})
    podgroup(cluster, ns, "train-workers", {"gang": {"minCount": 3}}, template=("train", "workers"))
    names = members(cluster, ns, "train-workers", 3)

    nodes = wait_for(lambda: cluster.all_bound(ns, names), BIND, "the gang bound")
    assert set(nodes.values()) <= {n1, n2}
    assert all(v <= 2 for v in cluster.gpus_by_node(ns, names).values())
    spec = phalanx.store.load_gangs()[gang(ns)]
    assert (spec.min_available, spec.total_number, spec.source) == (3, 3, "podgroup/scheduling.k8s.io")


def test_two_of_three_bind_nothing_until_the_third_arrives(cluster, phalanx) -> None:
    ns = cluster.namespace()
    cluster.node("n1", gpus=8)
    podgroup(cluster, ns, "train-workers", {"gang": {"minCount": 3}})
    first = members(cluster, ns, "train-workers", 2)

    wait_for(lambda: {f"{ns}/{n}" for n in first} <= set(phalanx.reserved()), BIND, "two pods reserved")
    cluster.canary()
    # All or nothing: placed, held for the gang, not bound; and, as kube-scheduler in Permit, nothing written
    # on them (a job operator would repeat any PodScheduled=False as a Warning on its job).
    assert all(cluster.node_of(ns, n) == "" for n in first)
    assert all(cluster.condition(ns, n) == {} for n in first)
    assert all(state == "assumed" for k, (_, state) in phalanx.reserved().items() if k.startswith(f"{ns}/"))

    third = members(cluster, ns, "train-workers", 1, start=2)
    wait_for(lambda: cluster.all_bound(ns, first + third), BIND, "the whole gang bound once the third arrived")


def test_pods_wait_for_their_podgroup(cluster, phalanx) -> None:
    """A Job's pods often come before their PodGroup: they wait for it (kube-scheduler's gang plugin too)."""
    ns = cluster.namespace()
    cluster.node("n1", gpus=4)
    names = members(cluster, ns, "train-workers", 2)
    waiting = wait_for(
        lambda: "does not exist yet" in (c := cluster.condition(ns, names[0])).get("message", "") and c,
        BIND,
        "the pods told their PodGroup is missing",
    )
    assert f"PodGroup {ns}/train-workers ({GROUP_K8S})" in waiting["message"]
    assert cluster.node_of(ns, names[0]) == ""
    podgroup(cluster, ns, "train-workers", {"gang": {"minCount": 2}})
    wait_for(lambda: cluster.all_bound(ns, names), BIND, "the gang bound once its PodGroup exists")


def test_a_basic_pod_group_is_no_gang(cluster, phalanx) -> None:
    ns = cluster.namespace()
    cluster.node("n1", gpus=4)
    workload(cluster, ns, "svc", {"replicas": {"basic": {}}})
    podgroup(cluster, ns, "svc-replicas", {"basic": {}}, template=("svc", "replicas"))
    [name] = members(cluster, ns, "svc-replicas", 1)
    wait_for(lambda: cluster.node_of(ns, name), BIND, "the lone pod of a basic group bound")
    assert gang(ns, "svc-replicas") not in phalanx.store.load_gangs()


def test_a_malformed_podgroup_is_reported_and_other_gangs_go_on(cluster, phalanx) -> None:
    """The API server refuses a malformed policy itself (above); what it accepts but Phalanx cannot use (a
    total below the minimum, from Koordinator's annotation) is refused by name on the PodGroup's pods, and
    fixed in place, it is used."""
    ns = cluster.namespace()
    cluster.node("n1", gpus=8)
    podgroup(cluster, ns, "bad", {"gang": {"minCount": 3}}, annotations={KOORD_TOTAL_NUMBER: "2"})
    bad = members(cluster, ns, "bad", 3)
    podgroup(cluster, ns, "train-workers", {"gang": {"minCount": 2}})
    good = members(cluster, ns, "train-workers", 2)

    wait_for(lambda: cluster.all_bound(ns, good), BIND, "the valid gang bound")
    refused = wait_for(lambda: cluster.condition(ns, bad[0]), BIND, "a condition on a pod of the invalid PodGroup")
    assert (refused["status"], refused["reason"]) == ("False", "Unschedulable")
    assert refused["message"] == (
        f"PodGroup {ns}/bad: metadata.annotations[{KOORD_TOTAL_NUMBER}]: 2 is below min-available 3"
    )
    wait_for(lambda: "FailedScheduling" in cluster.reasons(ns, bad[0]), 5, "an event on the refused pod")
    assert all(cluster.node_of(ns, n) == "" for n in bad)

    # Its spec is immutable, its annotations are not: fixed, the gang is scheduled.
    cluster.custom.patch_namespaced_custom_object(
        GROUP_K8S, VERSION, ns, "podgroups", "bad", {"metadata": {"annotations": {KOORD_TOTAL_NUMBER: "3"}}}
    )
    wait_for(lambda: cluster.all_bound(ns, bad), BIND, "the fixed gang bound")


def test_a_gang_is_forgotten_once_its_podgroup_and_pods_are_gone(cluster, phalanx) -> None:
    ns = cluster.namespace()
    cluster.node("n1", gpus=4)
    podgroup(cluster, ns, "train-workers", {"gang": {"minCount": 1}})
    [name] = members(cluster, ns, "train-workers", 1)
    wait_for(lambda: cluster.node_of(ns, name), BIND, "the pod bound")
    cluster.delete_pod(ns, name)
    wait_for(lambda: f"{ns}/{name}" not in phalanx.reserved(), BIND, "the pod's reservation released")
    assert gang(ns) in phalanx.store.load_gangs()  # the PodGroup still declares it
    cluster.custom.delete_namespaced_custom_object(GROUP_K8S, VERSION, ns, "podgroups", "train-workers")
    # The API server's PodGroupProtection admission put a finalizer on it, which kube-controller-manager's
    # podgroup-protection controller lifts once no pod uses the group. There is no controller here: as it,
    deleting = cluster.custom.get_namespaced_custom_object(GROUP_K8S, VERSION, ns, "podgroups", "train-workers")
    assert deleting["metadata"]["finalizers"] == ["scheduling.k8s.io/podgroup-protection"]
    cluster.custom.patch_namespaced_custom_object(
        GROUP_K8S, VERSION, ns, "podgroups", "train-workers", {"metadata": {"finalizers": None}}
    )
    wait_for(lambda: gang(ns) not in phalanx.store.gang_keys_with_state(), BIND, "the gang's state deleted")
