"""The FGD paper's experiment on the placement alone: the scheduler's framework places the sampled pods
one by one on a snapshot, in arrival order, with nothing else in the way.

In that experiment pods arrive one at a time and never leave, so a pod that does not fit when it arrives
never fits later (capacity only shrinks) and the whole stack's outcome is the framework's decision pod
after pod. That makes the placement a pure function of the framework and the workload, cheap enough to
run every trace variant with every policy and ten seeds (seconds per run instead of a minute through the
services). `replay-bench` checks on one seed that the services give the same allocation.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from phalanx.framework.framework import Framework
from phalanx.framework.snapshot import Snapshot
from phalanx.intake.nodes import parse_node
from phalanx.intake.pods import parse_pod
from phalanx.model.gpu import gpu_milli
from phalanx.model.objects import NodeInfo, PodInfo
from phalanx.sim.series import DEMAND_LEVELS
from phalanx.sim.workload import load_workload
from phalanx.trace import writer


@dataclass
class SweepResult:
    allocation: dict[str, float | None]  # GPU allocation ratio at each arrived-demand level ("0.9", "1", ...)
    placed: int
    pods: int
    curve: list[tuple[float, float]]  # (arrived GPU demand, GPU allocation) at every 1% of arrived demand


def model_objects(workload: writer.Workload) -> tuple[list[NodeInfo], list[PodInfo]]:
    """The nodes and pods (in arrival order) the simulator's intake makes of a generated workload."""
    with tempfile.TemporaryDirectory(prefix="phalanx-sweep-") as tmp:
        path = Path(tmp) / "sweep.yaml"
        with path.open("w") as f:
            writer.write_workload(workload, f)
        loaded = load_workload([path])
    nodes = [parse_node(o.obj) for o in loaded.objects if o.kind == "Node"]
    pods = []
    for o in loaded.objects:
        if o.kind == "Pod":
            pod = parse_pod(o.obj, epoch=loaded.epoch)
            pod.created_at = o.at
            pods.append(pod)
    return nodes, pods


def sweep(
    framework: Framework, nodes: Sequence[NodeInfo], pods: Sequence[PodInfo], levels: Sequence[float] = DEMAND_LEVELS
) -> SweepResult:
    snap = Snapshot()
    snap.set_nodes(framework.prepare_nodes(nodes), {})
    capacity = sum(gpu_milli(n.allocatable) for n in nodes)
    arrived = allocated = placed = 0
    allocation: dict[str, float | None] = {f"{d:g}": None for d in levels}
    pending = sorted(levels)
    curve: list[tuple[float, float]] = []
    for pod in pods:
        want = gpu_milli(pod.requests)
        arrived += want
        res = framework.place(pod, snap)
        if res.node_index is not None:
            snap.reserve(res.node_index, res.requests, pod=pod)
            allocated += want
            placed += 1
        while pending and arrived >= pending[0] * capacity - 1e-6:
            level = f"{pending.pop(0):g}"
            allocation[level] = round(allocated / capacity, 6) if capacity else None
        if capacity and arrived >= (len(curve) + 1) * capacity / 100:
            curve.append((round(arrived / capacity, 4), round(allocated / capacity, 6)))
    return SweepResult(allocation, placed, len(pods), curve)
