"""The benchmark's workload shapes, built directly as PodInfo/NodeInfo/GangSpec (no YAML: the
measurement is the scheduler, not parsing).

Shapes (Kubernetes' scheduler_perf where it has one; see docs in bench/README.md):
- basic:    SchedulingBasic. Nodes of 4 CPU / 32Gi / 110 pods; 1,000 pods placed first (not measured),
            then 10,000 measured pods of 100m CPU / 500Mi, no gangs.
- gang3:    1,000 gangs of 3 pods (100m / 100Mi), all handed over at once (throughput).
- gang1000: 10 gangs of 1,000 pods (100m / 100Mi), all handed over at once (throughput).
- gang3-latency: gangs of 3 fed one by one at a steady rate below capacity (latency).
- gpu:      nodes with 8 GPUs; Strict gangs of 8, 16 and 64 pods of 1 or 8 GPUs in a fixed cycle until the
            GPUs asked for reach the cluster's, fed at a steady rate (latency; bound GPUs / total reported).

Quantities are milli-units as everywhere in Phalanx: cpu 100m -> 100, memory 500Mi -> 500 * 2**20 * 1000,
1 GPU -> 1000, and every pod takes 1000 of its node's "pods".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from phalanx.model.gpu import GPU
from phalanx.model.objects import GangMode, GangSpec, NodeInfo, PodInfo, Resources

NAMESPACE = "bench"
MI = 2**20 * 1000  # 1Mi of memory in milli-units
GI = 2**30 * 1000
POD_SLOT = 1000

# scheduler_perf's node and pod templates.
PERF_NODE: Resources = {"cpu": 4000, "memory": 32 * GI, "pods": 110 * POD_SLOT}
BASIC_POD: Resources = {"cpu": 100, "memory": 500 * MI, "pods": POD_SLOT}
GANG_POD: Resources = {"cpu": 100, "memory": 100 * MI, "pods": POD_SLOT}
# A GPU training node (8 GPUs; CPU and memory enough for 8 one-GPU pods or one eight-GPU pod).
GPU_NODE: Resources = {"cpu": 64000, "memory": 512 * GI, "pods": 110 * POD_SLOT, GPU: 8000}
GPU_GANG_SIZES = (8, 16, 64)
GPU_PER_POD = (1, 8)


def gpu_pod_requests(gpus: int) -> Resources:
    return {"cpu": 4000 * gpus, "memory": 32 * GI * gpus, "pods": POD_SLOT, GPU: 1000 * gpus}


@dataclass
class BenchWorkload:
    """One benchmark run: nodes (and gang declarations) registered first, `initial` pods scheduled and
    bound before measuring, then the `units` (a gang's pods, or one pod) handed to the queue.

    kind "throughput": every unit at once in Add batches of `batch` pods; "latency": one Add per unit at
    `rate` units per second. `fill`: the workload asks for the whole cluster, so not every gang need fit
    (the run ends when binding settles, and reports what was bound)."""

    name: str
    shape: str
    kind: str
    nodes: list[NodeInfo]
    units: list[list[PodInfo]]
    gangs: list[GangSpec] = field(default_factory=list)
    initial: list[PodInfo] = field(default_factory=list)
    batch: int = 1000
    rate: float = 0.0
    fill: bool = False

    @property
    def pods(self) -> list[PodInfo]:
        return [p for unit in self.units for p in unit]

    @property
    def pod_count(self) -> int:
        return sum(len(u) for u in self.units)

    def total(self, resource: str) -> int:
        return sum(n.allocatable.get(resource, 0) for n in self.nodes)


def make_nodes(count: int, allocatable: Resources, prefix: str = "node") -> list[NodeInfo]:
    width = max(5, len(str(count)))
    return [NodeInfo(f"{prefix}-{i:0{width}d}", dict(allocatable)) for i in range(count)]


def make_pod(
    name: str, requests: Resources, created_at: float, gang: str = "", gang_created_at: float = 0.0
) -> PodInfo:
    return PodInfo(
        namespace=NAMESPACE,
        name=name,
        uid=f"uid-{name}",
        created_at=created_at,
        requests=dict(requests),
        gang=gang,
        gang_created_at=gang_created_at,
    )


def make_gang(name: str, size: int, created_at: float) -> GangSpec:
    return GangSpec(
        namespace=NAMESPACE,
        name=name,
        min_available=size,
        total_number=size,
        mode=GangMode.STRICT,
        created_at=created_at,
        source="bench",
    )


def basic(nodes: int = 5000, initial: int = 1000, measured: int = 10000, batch: int = 1000) -> BenchWorkload:
    """scheduler_perf SchedulingBasic: `initial` pods placed first, then `measured` pods, no gangs."""
    init = [make_pod(f"init-{i:06d}", BASIC_POD, float(i)) for i in range(initial)]
    units = [[make_pod(f"pod-{i:06d}", BASIC_POD, float(initial + i))] for i in range(measured)]
    return BenchWorkload(
        f"basic-{nodes}", "basic", "throughput", make_nodes(nodes, PERF_NODE), units, initial=init, batch=batch
    )


def gang_units(
    count: int, size: int, requests: Resources, prefix: str, start: int = 0
) -> tuple[list[GangSpec], list[list[PodInfo]]]:
    specs, units = [], []
    for g in range(start, start + count):
        name = f"{prefix}-{g:05d}"
        spec = make_gang(name, size, float(g))
        specs.append(spec)
        units.append([make_pod(f"{name}-{i:04d}", requests, float(g), spec.key, float(g)) for i in range(size)])
    return specs, units


def gangs(nodes: int = 5000, count: int = 1000, size: int = 3, batch: int = 1000) -> BenchWorkload:
    """scheduler_perf's gang shapes, all at once: throughput."""
    specs, units = gang_units(count, size, GANG_POD, f"g{size}")
    return BenchWorkload(
        f"gang{size}-{nodes}",
        f"gang{size}",
        "throughput",
        make_nodes(nodes, PERF_NODE),
        units,
        gangs=specs,
        batch=batch,
    )


def gang_latency(nodes: int = 5000, count: int = 1000, size: int = 3, rate: float = 100.0) -> BenchWorkload:
    """Gangs fed one by one at `rate` gangs/s (below capacity): latency is service time, not queueing."""
    specs, units = gang_units(count, size, GANG_POD, f"g{size}")
    return BenchWorkload(
        f"gang{size}-latency-{nodes}",
        f"gang{size}-latency",
        "latency",
        make_nodes(nodes, PERF_NODE),
        units,
        gangs=specs,
        rate=rate,
    )


def gpu_mix(total_gpus: int) -> list[tuple[int, int]]:
    """(pods, GPUs per pod) of each gang: the cycle (8,1) (16,1) (64,1) (8,8) (16,8) (64,8), skipping a
    gang that would ask for more GPUs than remain, until fewer remain than the smallest gang asks for."""
    out: list[tuple[int, int]] = []
    left = total_gpus
    smallest = min(GPU_GANG_SIZES) * min(GPU_PER_POD)
    i = 0
    while left >= smallest:
        size = GPU_GANG_SIZES[i % len(GPU_GANG_SIZES)]
        per_pod = GPU_PER_POD[(i // len(GPU_GANG_SIZES)) % len(GPU_PER_POD)]
        i += 1
        if size * per_pod <= left:
            out.append((size, per_pod))
            left -= size * per_pod
    return out


def gpu(nodes: int = 1000, rate: float = 20.0) -> BenchWorkload:
    """GPU training: gangs of 8/16/64 one- or eight-GPU pods until the GPUs asked for fill the cluster."""
    node_list = make_nodes(nodes, GPU_NODE, prefix="gpu")
    specs, units = [], []
    for g, (size, per_pod) in enumerate(gpu_mix(nodes * GPU_NODE[GPU] // 1000)):
        name = f"gpu{size}x{per_pod}-{g:05d}"
        spec = make_gang(name, size, float(g))
        specs.append(spec)
        units.append(
            [make_pod(f"{name}-{i:03d}", gpu_pod_requests(per_pod), float(g), spec.key, float(g)) for i in range(size)]
        )
    return BenchWorkload(f"gpu-{nodes}", "gpu", "latency", node_list, units, gangs=specs, rate=rate, fill=True)


# -- the suites ---------------------------------------------------------------------------------------
FULL_SIZES = (500, 1000, 2000, 5000)
QUICK_SIZES = (100,)


def suite(
    quick: bool = False, sizes: tuple[int, ...] | None = None, rate: float = 100.0, gpu_rate: float = 20.0
) -> list[BenchWorkload]:
    """Every shape at every size (the issue's growth runs). The full suite's headline rows are the
    5,000-node ones for basic/gang3/gang1000/gang3-latency and the 1,000-node one for gpu."""
    out: list[BenchWorkload] = []
    if quick:
        for n in sizes or QUICK_SIZES:
            out += [
                basic(n, initial=100, measured=2000),
                gangs(n, count=300, size=3),
                gangs(n, count=4, size=250),
                gang_latency(n, count=200, size=3, rate=rate),
                gpu(max(8, n // 4), rate=gpu_rate),
            ]
        return out
    for n in sizes or FULL_SIZES:
        out += [
            basic(n),
            gangs(n, count=1000, size=3),
            gangs(n, count=10, size=1000),
            gang_latency(n, count=1000, size=3, rate=rate),
            gpu(n, rate=gpu_rate),
        ]
    return out
