"""bench-k8s's workloads: the shapes measured, and the objects each run creates before the launch.

Fake Nodes (no kubelet: capacity through the status subresource), one namespace, one scheduling.x-k8s.io
PodGroup per gang and its pods labelled scheduling.x-k8s.io/pod-group; the same objects for both schedulers,
only the pods' schedulerName differs.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from phalanx.bench.k8s.kubeapi import BenchK8sError, call, served
from phalanx.kube.api import MERGE_PATCH, KubeApi
from phalanx.model.gpu import GPU

REPO = Path(__file__).resolve().parents[4]
PG_GROUP, PG_VERSION = "scheduling.x-k8s.io", "v1alpha1"
PG_LABEL = "scheduling.x-k8s.io/pod-group"
NAMESPACE = "bench"
PHALANX = "phalanx"
PEER = "peer"
SCHEDULER_NAMES = {PHALANX: "phalanx-bench", PEER: "peer-scheduler"}
POD_CPU_MILLI = 100
POD_MEMORY = "128Mi"
NODE_MEMORY = "256Gi"
NODE_PODS = 110
PODS_PATH = f"/api/v1/namespaces/{NAMESPACE}/pods"
EVENTS_PATH = f"/api/v1/namespaces/{NAMESPACE}/events"
PODGROUPS_PATH = f"/apis/{PG_GROUP}/{PG_VERSION}/namespaces/{NAMESPACE}/podgroups"


@dataclass(frozen=True)
class Shape:
    name: str
    nodes: int
    node_cpu: int = 32
    node_gpus: int = 0
    gangs: int = 0
    gang_size: int = 0
    plain_pods: int = 0
    pod_gpus: int = 0
    expected_bound: int = 0  # pods that fit (all, unless the workload is a contention case)
    timeout: float = 300.0  # seconds from launch to give up waiting for expected_bound

    @property
    def pods(self) -> int:
        return self.gangs * self.gang_size + self.plain_pods

    @property
    def contention(self) -> bool:
        return self.expected_bound < self.pods

    def describe(self) -> str:
        node = f"{self.nodes:,} nodes ({self.node_cpu} cpu{f', {self.node_gpus} GPUs' if self.node_gpus else ''})"
        per_pod = f"{POD_CPU_MILLI}m cpu{f' + {self.pod_gpus} GPUs' if self.pod_gpus else ''} per pod"
        if self.gangs:
            what = f"{self.gangs:,} gangs of {self.gang_size} (minMember {self.gang_size}) = {self.pods:,} pods"
        else:
            what = f"{self.plain_pods:,} plain pods"
        fit = (
            f"; {self.expected_bound:,} pods ({self.expected_bound // max(self.gang_size, 1)} gangs) fit"
            if self.contention
            else ""
        )
        return f"{node}, {what}, {per_pod}{fit}"


def _gpu_contention(name: str, nodes: int, gangs: int, timeout: float) -> Shape:
    # 8 GPUs a node, gangs of 4 pods x 2 GPUs: each gang fills one node's worth, so exactly `nodes` gangs fit.
    return Shape(
        name,
        nodes=nodes,
        node_gpus=8,
        gangs=gangs,
        gang_size=4,
        pod_gpus=2,
        expected_bound=min(gangs, nodes) * 4,
        timeout=timeout,
    )


def workloads(quick: bool = False, large: bool = False) -> list[Shape]:
    if quick:
        return [
            Shape("gang-20n-30x3", nodes=20, gangs=30, gang_size=3, expected_bound=90, timeout=60),
            Shape("basic-10n-60", nodes=10, plain_pods=60, expected_bound=60, timeout=60),
            _gpu_contention("gpu-contention-3n-5x4", nodes=3, gangs=5, timeout=30),
        ]
    out = [
        Shape("gang-500n-1000x3", nodes=500, gangs=1000, gang_size=3, expected_bound=3000),
        Shape("basic-200n-2000", nodes=200, plain_pods=2000, expected_bound=2000),
        _gpu_contention("gpu-contention-20n-30x4", nodes=20, gangs=30, timeout=90),
    ]
    if large:
        out += [
            Shape("gang-5000n-1000x3", nodes=5000, gangs=1000, gang_size=3, expected_bound=3000, timeout=600),
            Shape("basic-5000n-2000", nodes=5000, plain_pods=2000, expected_bound=2000, timeout=600),
        ]
    return out


def create_objects(api: KubeApi, shape: Shape, scheduler_name: str, workers: int) -> dict[str, int]:
    """Nodes, namespace, PodGroups, pods. Returns the gangs' minMember by name."""

    def node(i: int) -> None:
        name = f"node-{i:05d}"
        call(
            api,
            "POST",
            "/api/v1/nodes",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            },
        )
        res = {"cpu": str(shape.node_cpu), "memory": NODE_MEMORY, "pods": str(NODE_PODS), GPU: str(shape.node_gpus)}
        call(
            api, "PATCH", f"/api/v1/nodes/{name}/status", {"status": {"capacity": res, "allocatable": res}}, MERGE_PATCH
        )

    gangs = {f"gang-{g:05d}": shape.gang_size for g in range(shape.gangs)}

    def podgroup(name: str) -> None:
        call(
            api,
            "POST",
            PODGROUPS_PATH,
            {
                "apiVersion": f"{PG_GROUP}/{PG_VERSION}",
                "kind": "PodGroup",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {"minMember": shape.gang_size},
            },
        )

    def pod(spec: tuple[str, str]) -> None:
        name, gang = spec
        requests = {"cpu": f"{POD_CPU_MILLI}m", "memory": POD_MEMORY}
        limits: dict[str, str] = {}
        if shape.pod_gpus:
            requests[GPU] = limits[GPU] = str(shape.pod_gpus)
        call(
            api,
            "POST",
            PODS_PATH,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": NAMESPACE, "labels": {PG_LABEL: gang} if gang else {}},
                "spec": {
                    "schedulerName": scheduler_name,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": requests, "limits": limits},
                        }
                    ],
                },
            },
        )

    call(api, "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    pods = [(f"{g}-{i}", g) for g in gangs for i in range(shape.gang_size)]
    pods += [(f"pod-{i:05d}", "") for i in range(shape.plain_pods)]
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(node, range(shape.nodes)))
        list(pool.map(podgroup, gangs))
        list(pool.map(pod, pods))
    return gangs


def install_podgroup_crd(api: KubeApi, timeout: float = 30.0) -> None:
    """Only the scheduling.x-k8s.io PodGroup CRD (deploy/crds; the upstream schema's fields): what a cluster
    running scheduler-plugins has. Phalanx's watches of the other PodGroup APIs see 404 and back off."""
    import yaml

    crd = yaml.safe_load((REPO / "deploy" / "crds" / f"{PG_GROUP}_podgroups.yaml").read_text())
    call(api, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    deadline = time.monotonic() + timeout
    while not served(api, f"/apis/{PG_GROUP}/{PG_VERSION}/podgroups"):
        if time.monotonic() > deadline:
            raise BenchK8sError(f"CRD podgroups.{PG_GROUP} not served after {timeout:g}s")
        time.sleep(0.05)
