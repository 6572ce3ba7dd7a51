"""bench-k8s's workloads: the shapes measured, and the objects each run creates before the launch.

Fake Nodes (no kubelet: capacity through the status subresource), one namespace, one scheduling.x-k8s.io
PodGroup per gang and its pods labelled scheduling.x-k8s.io/pod-group; the same objects for both schedulers,
only the pods' schedulerName differs. A steady-arrival shape creates only the nodes and a warm-up gang
before the launch; its gangs are created during the run at a fixed rate (arrival.py).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    arrival_gps: float = 0.0  # steady arrival: gangs created per second after the warm-up gang is bound
    arrival_s: float = 0.0  # ... for this many seconds (gangs = arrival_gps * arrival_s)
    status_timeout: float = 30.0  # seconds after the last binding to wait for Events / PodGroup statuses

    @property
    def steady(self) -> bool:
        return self.arrival_gps > 0

    @property
    def warmup_pods(self) -> int:
        """A steady shape's warm-up gang (created before the launch; arrivals start once it is bound)."""
        return self.gang_size if self.steady else 0

    @property
    def pods(self) -> int:
        return self.gangs * self.gang_size + self.plain_pods + self.warmup_pods

    @property
    def pods_before_launch(self) -> int:
        return self.warmup_pods if self.steady else self.pods

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
        if self.steady:
            return (
                f"{node}, a warm-up gang of {self.gang_size} at launch; once it is bound, {self.gangs:,} gangs of "
                f"{self.gang_size} (minMember {self.gang_size}) created at {self.arrival_gps:g} gangs/s "
                f"({self.arrival_gps * self.gang_size:g} pods/s) for {self.arrival_s:g} s, {per_pod}"
            )
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


def steady(name: str, nodes: int, gangs_per_s: float, seconds: float, timeout: float) -> Shape:
    """Gangs of 3 arriving at `gangs_per_s` for `seconds` once a warm-up gang is bound (arrival.py)."""
    gangs = int(round(gangs_per_s * seconds))
    return Shape(
        name,
        nodes=nodes,
        gangs=gangs,
        gang_size=3,
        expected_bound=(gangs + 1) * 3,
        timeout=timeout,
        arrival_gps=gangs_per_s,
        arrival_s=seconds,
    )


def workloads(quick: bool = False, large: bool = False) -> list[Shape]:
    if quick:
        return [
            Shape("gang-20n-30x3", nodes=20, gangs=30, gang_size=3, expected_bound=90, timeout=60),
            Shape("basic-10n-60", nodes=10, plain_pods=60, expected_bound=60, timeout=60),
            _gpu_contention("gpu-contention-3n-5x4", nodes=3, gangs=5, timeout=30),
            steady("steady-20n-5gps", nodes=20, gangs_per_s=5, seconds=4, timeout=60),
        ]
    out = [
        Shape("gang-500n-1000x3", nodes=500, gangs=1000, gang_size=3, expected_bound=3000),
        Shape("basic-200n-2000", nodes=200, plain_pods=2000, expected_bound=2000),
        _gpu_contention("gpu-contention-20n-30x4", nodes=20, gangs=30, timeout=90),
        # 60 pods/s: a fifth of what either scheduler binds at most here, well inside the API server's means.
        steady("steady-500n-20gps", nodes=500, gangs_per_s=20, seconds=30, timeout=180),
    ]
    if large:
        out += [
            Shape(
                "gang-5000n-10000x3",
                nodes=5000,
                gangs=10000,
                gang_size=3,
                expected_bound=30000,
                timeout=3600,  # the peer took 1,722 s on 2 shared cores (bench/k8s-large.txt)
                status_timeout=180,
            ),
            Shape("basic-5000n-2000", nodes=5000, plain_pods=2000, expected_bound=2000, timeout=600),
        ]
    return out


WARMUP_GANG = "warmup"


def gang_names(shape: Shape) -> dict[str, int]:
    """Every gang of a run (a steady shape's warm-up gang first) and its minMember."""
    gangs = {WARMUP_GANG: shape.gang_size} if shape.steady else {}
    gangs.update({f"gang-{g:05d}": shape.gang_size for g in range(shape.gangs)})
    return gangs


def podgroup_body(name: str, min_member: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{PG_GROUP}/{PG_VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"minMember": min_member},
    }


def pod_body(shape: Shape, name: str, gang: str, scheduler_name: str) -> dict[str, Any]:
    requests = {"cpu": f"{POD_CPU_MILLI}m", "memory": POD_MEMORY}
    limits: dict[str, str] = {}
    if shape.pod_gpus:
        requests[GPU] = limits[GPU] = str(shape.pod_gpus)
    return {
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
    }


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

    gangs = gang_names(shape)
    before = [WARMUP_GANG] if shape.steady else list(gangs)  # a steady shape's other gangs arrive later

    def podgroup(name: str) -> None:
        call(api, "POST", PODGROUPS_PATH, podgroup_body(name, gangs[name]))

    def pod(spec: tuple[str, str]) -> None:
        call(api, "POST", PODS_PATH, pod_body(shape, spec[0], spec[1], scheduler_name))

    call(api, "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    pods = [(f"{g}-{i}", g) for g in before for i in range(gangs[g])]
    pods += [(f"pod-{i:05d}", "") for i in range(shape.plain_pods)]
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(node, range(shape.nodes)))
        list(pool.map(podgroup, before))
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
