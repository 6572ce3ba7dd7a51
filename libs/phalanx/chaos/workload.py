"""A trial's seeded workload: nodes sized to hold about 60% of the pods at once, and gangs of one-GPU or
CPU-only pods declared with Koordinator annotations, created over the first seconds with gangs interleaved.

The same seed always gives the same nodes, gangs, creation order and run times, so a failing trial can
be re-run as it was.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from phalanx.chaos.snapshot import TRIAL_LABEL
from phalanx.model.gpu import GPU
from phalanx.model.keys import KOORD_MIN_AVAILABLE, KOORD_NAME, KOORD_WAITING_TIME

GANG_LABEL = "chaos.phalanx.dev/gang"


@dataclass
class WorkloadShape:
    gangs: int = 100
    min_size: int = 2
    max_size: int = 16
    gpu_gang_fraction: float = 0.15
    gpu_nodes: int = 8
    gpus_per_node: int = 8
    node_cpu: int = 32  # cores of every node, GPU nodes included
    fit_fraction: float = 0.6  # of the pods the cluster holds at once
    create_seconds: float = 6.0  # pods are created over this long
    namespaces: int = 2
    run_seconds: tuple[float, float] = (2.0, 5.0)  # how long a gang runs once bound
    waiting_time: str = "600s"


GPU_POD_CPU_MILLI = 500  # a GPU pod asks 500m and one GPU
CPU_POD_CPU_MILLI = 1000  # a CPU-only pod asks one core


@dataclass(frozen=True)
class GangPlan:
    namespace: str
    name: str
    size: int
    gpu: bool
    run_seconds: float
    finish_by_delete: bool  # else its pods are marked Succeeded

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def pod_names(self) -> list[str]:
        return [f"{self.name}-{i}" for i in range(self.size)]


@dataclass(frozen=True)
class PodPlan:
    at: float  # seconds after the trial's start
    gang: GangPlan
    name: str


@dataclass
class NodePlan:
    name: str
    cpu: int
    gpus: int


@dataclass
class Workload:
    trial: str
    scheduler_name: str
    namespaces: list[str]
    nodes: list[NodePlan]
    gangs: dict[str, GangPlan]
    pods: list[PodPlan] = field(default_factory=list)  # in creation order

    @property
    def pod_count(self) -> int:
        return sum(g.size for g in self.gangs.values())


def gang_size(rng: random.Random, shape: WorkloadShape) -> int:
    # Skewed to small gangs (mean about 7 for 2..16), as jobs are; a few reach the maximum.
    return min(shape.max_size, int(rng.triangular(shape.min_size, shape.max_size + 1, shape.min_size)))


def make_gang(rng: random.Random, shape: WorkloadShape, namespace: str, name: str) -> GangPlan:
    return GangPlan(
        namespace,
        name,
        gang_size(rng, shape),
        rng.random() < shape.gpu_gang_fraction,
        rng.uniform(*shape.run_seconds),
        rng.random() < 0.5,
    )


def size_nodes(trial: str, shape: WorkloadShape, gangs: list[GangPlan]) -> list[NodePlan]:
    """The GPU nodes of the shape, plus CPU nodes enough for fit_fraction of the CPU-only pods (after
    what the GPU nodes have left once their GPU pods run)."""
    gpu_pods = sum(g.size for g in gangs if g.gpu)
    cpu_pods = sum(g.size for g in gangs if not g.gpu)
    nodes = [NodePlan(f"{trial}-gpu-{i}", shape.node_cpu, shape.gpus_per_node) for i in range(shape.gpu_nodes)]
    gpu_total = shape.gpu_nodes * shape.gpus_per_node
    spare_cpu = shape.gpu_nodes * shape.node_cpu * 1000 - min(gpu_pods, gpu_total) * GPU_POD_CPU_MILLI
    needed = shape.fit_fraction * cpu_pods * CPU_POD_CPU_MILLI - spare_cpu
    cpu_nodes = max(1, math.ceil(needed / (shape.node_cpu * 1000)))
    nodes += [NodePlan(f"{trial}-cpu-{i}", shape.node_cpu, 0) for i in range(cpu_nodes)]
    return nodes


def interleave(rng: random.Random, shape: WorkloadShape, gangs: list[GangPlan], start: float = 0.0) -> list[PodPlan]:
    """Creation times spread evenly over create_seconds; each gang's pods in a random order among others'."""
    slots = [g for g in gangs for _ in range(g.size)]
    rng.shuffle(slots)
    seen: dict[str, int] = {}
    out = []
    step = shape.create_seconds / max(1, len(slots))
    for i, gang in enumerate(slots):
        n = seen.get(gang.key, 0)
        seen[gang.key] = n + 1
        out.append(PodPlan(start + i * step, gang, gang.pod_names()[n]))
    return out


def make_workload(trial: str, scheduler_name: str, seed: int, shape: WorkloadShape) -> Workload:
    rng = random.Random(seed)
    namespaces = [f"{trial}-ns{i}" for i in range(shape.namespaces)]
    gangs = [make_gang(rng, shape, namespaces[i % len(namespaces)], f"g{i:03d}") for i in range(shape.gangs)]
    return Workload(
        trial,
        scheduler_name,
        namespaces,
        size_nodes(trial, shape, gangs),
        {g.key: g for g in gangs},
        interleave(rng, shape, gangs),
    )


def pod_body(workload: Workload, gang: GangPlan, name: str, waiting_time: str) -> dict[str, Any]:
    if gang.gpu:
        requests = {"cpu": f"{GPU_POD_CPU_MILLI}m", GPU: "1"}
        limits = {GPU: "1"}
    else:
        requests = {"cpu": f"{CPU_POD_CPU_MILLI}m"}
        limits = {}
    return {
        "metadata": {
            "name": name,
            "labels": {TRIAL_LABEL: workload.trial, GANG_LABEL: gang.name},
            "annotations": {
                KOORD_NAME: gang.name,
                KOORD_MIN_AVAILABLE: str(gang.size),
                KOORD_WAITING_TIME: waiting_time,
            },
        },
        "spec": {
            "schedulerName": workload.scheduler_name,
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
