"""`phalanx explain` against a real kube-apiserver, with Phalanx's services scheduling on it.

A running gang holds most of the GPUs; a second gang cannot fit and gets the scheduler's PodScheduled=False
condition; explain, run as a user who may only get and list, must name the short resource, the free GPUs on
the best nodes (as the running gang's placement left them), the nodes its pods may not use and why, and the
running gang as the holder, ending when its pods' activeDeadlineSeconds run out.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from waiting import wait_for

from phalanx.cli.main import main
from phalanx.kube.podgroups import VERSIONS
from phalanx.model.keys import GROUP_X_K8S, KOORD_MIN_AVAILABLE, KOORD_NAME, LABEL_X_K8S_PODGROUP
from phalanx.testing.apiserver import APISERVER_MISSING_REASON, apiserver_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not apiserver_available(), reason=APISERVER_MISSING_REASON),
]

GPU = "nvidia.com/gpu"
GPUS_PER_NODE = 4
DEADLINE = 3600  # activeDeadlineSeconds of the running gang's pods
BIND = 20.0


def _pod(
    cluster: Any,
    namespace: str,
    name: str,
    gpus: int,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    deadline: int | None = None,
) -> None:
    spec: dict[str, Any] = {
        "schedulerName": cluster.scheduler_name,
        "containers": [
            {
                "name": "main",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "100m"}, "limits": {GPU: str(gpus)}},
            }
        ],
    }
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    body = {"metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}}, "spec": spec}
    cluster.core.create_namespaced_pod(namespace, body, _preload_content=False)


def _start(cluster: Any, namespace: str, name: str, at: datetime) -> None:
    """What the kubelet would write once the pod runs."""
    status = {"phase": "Running", "startTime": at.strftime("%Y-%m-%dT%H:%M:%SZ")}
    cluster.core.patch_namespaced_pod_status(
        name, namespace, {"status": status}, _content_type="application/merge-patch+json"
    )


def _viewer_kubeconfig(apiserver: Any, cluster: Any, namespace: str, path: Path) -> Path:
    """A kubeconfig whose context `viewer` is a service account that may only get and list what explain
    reads (any write would be refused), beside the admin's current context."""
    from kubernetes import client

    rbac = client.RbacAuthorizationV1Api(apiserver.api_client())
    name = f"{cluster.tid}-explain-viewer"
    cluster.core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    rules = [
        {"apiGroups": [""], "resources": ["nodes", "pods", "configmaps"], "verbs": ["get", "list"]},
        {"apiGroups": list(VERSIONS), "resources": ["podgroups"], "verbs": ["get", "list"]},
    ]
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": rules})
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        }
    )
    token = cluster.core.create_namespaced_service_account_token(
        name, namespace, {"spec": {"expirationSeconds": 3600}}
    ).status.token
    config = json.loads(apiserver.kubeconfig_path.read_text())
    config["users"].append({"name": "viewer", "user": {"token": token}})
    config["contexts"].append(
        {"name": "viewer", "context": {"cluster": config["clusters"][0]["name"], "user": "viewer"}}
    )
    path.write_text(json.dumps(config))
    return path


def _explain(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(["explain", *args])
    out, err = capsys.readouterr()
    assert exit_.value.code == 0, err
    return out


def test_explain_names_the_shortfall_the_free_gpus_and_the_holder(
    apiserver, cluster, phalanx, tmp_path, capsys
) -> None:
    ns = cluster.namespace()
    gpu_nodes = [cluster.node(f"gpu{i}", gpus=GPUS_PER_NODE) for i in range(3)]
    tainted = cluster.node("tainted", gpus=GPUS_PER_NODE)
    cluster.core.patch_node(
        tainted, {"spec": {"taints": [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]}}
    )
    cordoned = cluster.node("cordoned", gpus=GPUS_PER_NODE)
    cluster.core.patch_node(cordoned, {"spec": {"unschedulable": True}})

    # The running gang: 4 pods of 2 GPUs, bound by Phalanx itself, then "started" as a kubelet would.
    cluster.podgroup(GROUP_X_K8S, ns, "train-a", 4)
    running = [f"train-a-{i}" for i in range(4)]
    for name in running:
        _pod(cluster, ns, name, 2, labels={LABEL_X_K8S_PODGROUP: "train-a"}, deadline=DEADLINE)
    placement = wait_for(lambda: cluster.all_bound(ns, running), BIND, "the running gang to be bound")
    started = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=10)
    for name in running:
        _start(cluster, ns, name, started)

    # The waiting gang: 3 pods of 2 GPUs, more than the schedulable nodes have left.
    cluster.podgroup(GROUP_X_K8S, ns, "train-b", 3, timeout_seconds=3600)
    waiting = [f"train-b-{i}" for i in range(3)]
    for name in waiting:
        _pod(cluster, ns, name, 2, labels={LABEL_X_K8S_PODGROUP: "train-b"})
    # And a gang whose declaration is malformed: the scheduler refuses it, explain names the field.
    _pod(cluster, ns, "broken-0", 1, annotations={KOORD_NAME: "broken", KOORD_MIN_AVAILABLE: "many"})
    for name in (*waiting, "broken-0"):
        wait_for(
            lambda: cluster.condition(ns, name).get("status") == "False",
            BIND,
            f"the scheduler's PodScheduled=False on {name}",
        )

    kubeconfig = _viewer_kubeconfig(apiserver, cluster, ns, tmp_path / "kubeconfig")
    common = [
        "--kubeconfig",
        str(kubeconfig),
        "--context",
        "viewer",
        "-n",
        ns,
        "--scheduler-name",
        cluster.scheduler_name,
    ]
    doc = json.loads(_explain(capsys, *common, "-o", "json"))
    text = _explain(capsys, *common)

    # What the running gang's placement left free, from where the scheduler put it.
    used = {n: 0 for n in gpu_nodes}
    for node in placement.values():
        used[node] += 2
    free = sorted((GPUS_PER_NODE - u for u in used.values()), reverse=True)
    gangs = {g["name"]: g for g in doc["gangs"]}
    assert set(gangs) == {"train-b", "broken"}  # train-a runs: not listed

    b = gangs["train-b"]
    assert (b["state"], b["minMember"], b["bound"], b["pending"]) == ("Waiting", 3, 0, 3)
    assert b["reason"]["message"] == cluster.condition(ns, b["reason"]["pod"].split("/")[1])["message"]
    assert b["podGroup"]["apiGroup"] == GROUP_X_K8S
    # The wait runs from the PodGroup's scheduleStartTime (as the binder wrote it) for its declared timeout.
    start = cluster.podgroup_status(GROUP_X_K8S, ns, "train-b")["scheduleStartTime"]
    assert b["timeoutAt"] == datetime.fromisoformat(start.replace("Z", "+00:00")).timestamp() + 3600
    cap = b["capacity"]
    assert cap["short"] == [GPU]
    assert cap["fitNow"] == sum(f // 2 for f in free) < 3
    assert [n["free"][GPU] for n in cap["bestNodes"]] == free
    assert {n["node"] for n in cap["bestNodes"]} == set(gpu_nodes)
    excluded = {x["filter"]: x for x in cap["excluded"]}
    assert excluded["TaintToleration"]["nodes"] == [tainted]
    assert excluded["TaintToleration"]["details"][tainted] == "dedicated=infer:NoSchedule"
    assert excluded["NodeUnschedulable"]["nodes"] == [cordoned]
    holder = {h["key"]: h for h in cap["heldBy"]}[f"{ns}/train-a"]
    assert (holder["kind"], holder["pods"], holder["holds"][GPU]) == ("gang", 4, 8)
    assert holder["endBasis"] == "activeDeadlineSeconds"
    assert holder["endsAt"] == started.timestamp() + DEADLINE
    assert [h["key"] for h in cap["runsAfter"]] == [f"{ns}/train-a"]
    assert cap["runsAt"] == started.timestamp() + DEADLINE

    broken = gangs["broken"]
    assert broken["state"] == "Invalid"
    assert broken["error"] == (
        f'Pod {ns}/broken-0: metadata.annotations[{KOORD_MIN_AVAILABLE}]: "many" is not a positive integer'
    )

    assert f"{ns}/train-b  Waiting" in text
    assert f"the best 3 nodes have {', '.join(str(f) for f in free)} free" in text
    assert f"gang {ns}/train-a: 4 pods on" in text and "[activeDeadlineSeconds]" in text
    assert f"{tainted} (dedicated=infer:NoSchedule)" in text
    assert f"{ns}/broken  Invalid" in text

    # By name, across namespaces (the PodGroups and pods are then listed cluster-wide).
    named = json.loads(
        _explain(
            capsys,
            "--kubeconfig",
            str(kubeconfig),
            "--context",
            "viewer",
            "--scheduler-name",
            cluster.scheduler_name,
            "-o",
            "json",
            "train-b",
        )
    )
    assert [(g["namespace"], g["name"]) for g in named["gangs"]] == [(ns, "train-b")]
    assert named["gangs"][0]["capacity"]["bestNodes"] == cap["bestNodes"]

    as_yaml = yaml.safe_load(_explain(capsys, *common, "-o", "yaml"))
    assert as_yaml["schemaVersion"] == doc["schemaVersion"] == 1
    assert [g["capacity"] and g["capacity"]["bestNodes"] for g in as_yaml["gangs"]] == [
        g["capacity"] and g["capacity"]["bestNodes"] for g in doc["gangs"]
    ]
