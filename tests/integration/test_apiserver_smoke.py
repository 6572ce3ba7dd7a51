"""Smoke test of the local kube-apiserver harness: the calls a binder makes, against a real API server.

Needs etcd + kube-apiserver from hack/build-k8s-binaries.sh (skipped otherwise).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from phalanx.testing.apiserver import APISERVER_MISSING_REASON, LocalApiServer, apiserver_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not apiserver_available(), reason=APISERVER_MISSING_REASON),
]

NAMESPACE = "phalanx-smoke"
NODE = "node-a"


@pytest.fixture(scope="module")
def apiserver() -> Iterator[LocalApiServer]:
    with LocalApiServer(users={"nobody": []}) as server:
        yield server


@pytest.fixture(scope="module")
def core(apiserver: LocalApiServer):  # -> kubernetes.client.CoreV1Api
    from kubernetes import client

    return client.CoreV1Api(apiserver.api_client())


def test_create_node_pod_and_bind(core) -> None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=NODE, labels={"kubernetes.io/hostname": NODE})))
    # A kubelet reports capacity through the status subresource; the main resource ignores status updates.
    resources = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "4"}
    core.patch_node_status(
        NODE,
        {
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test"}],
            }
        },
    )
    node = core.read_node(NODE)
    assert node.status.allocatable["nvidia.com/gpu"] == "4"
    assert node.status.allocatable["cpu"] == "8"
    assert not node.spec.taints  # TaintNodesByCondition is off: no not-ready taint nothing would lift

    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
    core.create_namespaced_pod(
        NAMESPACE,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="worker-0", labels={"app": "smoke"}),
            spec=client.V1PodSpec(
                scheduler_name="phalanx",
                containers=[
                    client.V1Container(
                        name="main",
                        image="registry.k8s.io/pause:3.10",
                        resources=client.V1ResourceRequirements(
                            requests={"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"},
                            limits={"nvidia.com/gpu": "1"},
                        ),
                    )
                ],
            ),
        ),
    )
    pod = core.read_namespaced_pod("worker-0", NAMESPACE)
    assert pod.spec.scheduler_name == "phalanx"
    assert pod.spec.node_name is None
    assert pod.status.phase == "Pending"

    binding = client.V1Binding(
        metadata=client.V1ObjectMeta(name="worker-0"),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name=NODE),
    )
    # _preload_content=False: the binding subresource answers with a Status, which the client tries to
    # deserialize as a V1Binding and fails on the missing `target` (kubernetes-client/python#825; with
    # kubernetes==37 a pydantic ValidationError) although the binding was made.
    response = core.create_namespaced_pod_binding("worker-0", NAMESPACE, binding, _preload_content=False)
    assert response.status == 201
    assert json.loads(response.data)["status"] == "Success"

    pod = core.read_namespaced_pod("worker-0", NAMESPACE)
    assert pod.spec.node_name == NODE
    scheduled = {c.type: c.status for c in pod.status.conditions or []}
    assert scheduled.get("PodScheduled") == "True"

    # A second binding of a bound pod conflicts: what a binder sees when it lost a race.
    with pytest.raises(ApiException) as conflict:
        core.create_namespaced_pod_binding("worker-0", NAMESPACE, binding, _preload_content=False)
    assert conflict.value.status == 409


def test_rbac_is_enforced(apiserver: LocalApiServer) -> None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    nobody = client.CoreV1Api(apiserver.api_client(user="nobody"))
    with pytest.raises(ApiException) as forbidden:
        nobody.list_node()
    assert forbidden.value.status == 403

    rbac = client.RbacAuthorizationV1Api(apiserver.api_client())
    rbac.create_cluster_role(
        client.V1ClusterRole(
            metadata=client.V1ObjectMeta(name="node-reader"),
            rules=[client.V1PolicyRule(api_groups=[""], resources=["nodes"], verbs=["get", "list"])],
        )
    )
    rbac.create_cluster_role_binding(
        client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name="nobody-reads-nodes"),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="node-reader"),
            subjects=[client.RbacV1Subject(api_group="rbac.authorization.k8s.io", kind="User", name="nobody")],
        )
    )
    # The RBAC authorizer reads through an informer cache: allow it a moment to see the new binding.
    deadline = time.monotonic() + 10
    while True:
        try:
            nobody.list_node()
            break
        except ApiException as e:
            if e.status != 403 or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
