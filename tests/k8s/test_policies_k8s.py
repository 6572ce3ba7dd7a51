"""Issue 12's policies against a real kube-apiserver: inter-pod anti-affinity read from pods the API server
stored (its own validation first), a gang kept whole when its rule cannot hold, and a
DRF job of the tenant holding nothing placed before an older job of the tenant holding the cluster."""

from __future__ import annotations

import pytest
from waiting import wait_for

from phalanx.model.keys import JOB_QUEUE_POLICY, KOORD_MIN_AVAILABLE, KOORD_NAME, KOORD_WAITING_TIME
from phalanx.testing.apiserver import APISERVER_MISSING_REASON, apiserver_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not apiserver_available(), reason=APISERVER_MISSING_REASON),
]

BIND = 20.0
HOST = "kubernetes.io/hostname"


def _gang(name: str, size: int, **extra: str) -> dict[str, str]:
    return {KOORD_NAME: name, KOORD_MIN_AVAILABLE: str(size), KOORD_WAITING_TIME: "60s", **extra}


def _apart(job: str) -> dict[str, object]:
    """A pod spec's affinity: no two pods labelled job=`job` on one node."""
    term = {"labelSelector": {"matchLabels": {"job": job}}, "topologyKey": HOST}
    return {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}


def test_anti_affinity_from_the_api_server(cluster, phalanx) -> None:
    ns = cluster.namespace()
    nodes = [cluster.node(f"n{i}", gpus=8) for i in range(3)]
    anti = _apart("spread")
    spread = [f"spread-{i}" for i in range(3)]
    for name in spread:
        cluster.pod(ns, name, gpus=1, labels={"job": "spread"}, annotations=_gang("spread", 3), spec=anti)
    placed = wait_for(lambda: cluster.all_bound(ns, spread), BIND, "the anti-affine gang bound")
    assert sorted(placed.values()) == sorted(nodes)  # one pod per node; the default would pack them

    # Four pods that may not share a node, on three nodes: none is bound, and each says why.
    anti_big = _apart("big")
    big = [f"big-{i}" for i in range(4)]
    for name in big:
        cluster.pod(ns, name, gpus=1, labels={"job": "big"}, annotations=_gang("big", 4), spec=anti_big)
    judged = wait_for(lambda: cluster.condition(ns, "big-3") or None, BIND, "a condition on the gang's pods")
    assert judged["status"] == "False" and "anti-affinity" in judged["message"], judged
    assert all(cluster.node_of(ns, n) == "" for n in big)  # no partial gang


def test_drf_places_the_job_of_the_tenant_holding_nothing_first(cluster, phalanx) -> None:
    rich, poor = cluster.namespace("rich"), cluster.namespace("poor")
    n1 = cluster.node("n1", gpus=4)
    cluster.pod(rich, "running", gpus=4, scheduler="default-scheduler")
    cluster.bind(rich, "running", n1)  # the rich tenant holds every GPU there is
    drf = {JOB_QUEUE_POLICY: "DRF"}
    cluster.pod(rich, "older-0", gpus=2, annotations=_gang("older", 1, **drf))
    cluster.pod(poor, "newer-0", gpus=2, annotations=_gang("newer", 1, **drf))
    wait_for(lambda: cluster.condition(poor, "newer-0") or None, BIND, "both jobs judged unschedulable")
    wait_for(lambda: cluster.condition(rich, "older-0") or None, BIND, "both jobs judged unschedulable")
    n2 = cluster.node("n2", gpus=2)  # room for one of them
    assert wait_for(lambda: cluster.node_of(poor, "newer-0") or None, BIND, "the poor tenant's job bound") == n2
    assert cluster.node_of(rich, "older-0") == ""


def test_topology_spread_from_the_api_server(cluster, phalanx) -> None:
    ns = cluster.namespace()
    zone = "topology.kubernetes.io/zone"
    zones = {}
    for i, z in enumerate("aabb"):
        node = cluster.node(f"z{i}", gpus=8)
        cluster.core.patch_node(node, {"metadata": {"labels": {zone: z}}})
        zones[node] = z
    spread = {
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": zone,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"job": "even"}},
            }
        ]
    }
    names = [f"even-{i}" for i in range(4)]
    for name in names:
        cluster.pod(ns, name, gpus=1, labels={"job": "even"}, annotations=_gang("even", 4), spec=spread)
    placed = wait_for(lambda: cluster.all_bound(ns, names), BIND, "the spread gang bound")
    per_zone = {"a": 0, "b": 0}
    for node in placed.values():
        per_zone[zones[node]] += 1
    assert per_zone == {"a": 2, "b": 2}  # the default alone would pack the four 1-GPU pods on one node
