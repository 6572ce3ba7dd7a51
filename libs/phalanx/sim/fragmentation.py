"""GPU fragmentation over a simulation: free GPU capacity that none of the waiting pods could use.

At each sample, a node's free GPU (milli-units, whole devices and shares alike) counts as fragmented when
no waiting pod (arrived, not bound) that asks for GPUs fits on that node: by its GPUs, its cpu and its
memory. The simulator knows what bound pods use per node, not which devices GPUShare gave them, so devices
are counted from per-node totals with the shares packed on as few devices as they fill (as GPUShare packs
them): a pod asking n whole GPUs needs n devices free that way, a share needs a free device or that much
left on the devices the shares use. That count is never below the true one, and node constraints (a GPU
model) are not checked, so the figure is at most the true fragmentation, never more. Capacity reserved for a
waiting gang and not bound counts as free (the `reserved` series shows it). With no GPU pod waiting nothing
is unusable by the waiting pods: the sample's fragmentation is 0.

Cost: the state is sampled on a grid of at most MAX_SAMPLES instants of virtual time (so a plain mean over
the samples is a mean over time), computed only when it changed, with the waiting pods grouped by shape
and every node checked against every shape at once.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from phalanx.model.gpu import GPU, GPU_SHARE, WHOLE

MAX_SAMPLES = 400
SHAPE_CHUNK = 256  # shapes checked at once: bounds the nodes x shapes matrix

Shape = tuple[int, int, int, int]  # whole GPUs, share milli, cpu milli, memory milli


def shape_of(requests: dict[str, int]) -> Shape:
    return (
        requests.get(GPU, 0) // WHOLE,
        requests.get(GPU_SHARE, 0),
        requests.get("cpu", 0),
        requests.get("memory", 0),
    )


def _minimal(shapes: list[Shape]) -> list[Shape]:
    """The shapes no other one undercuts in every request: a node fits some waiting pod exactly when it fits
    one of these (fitting only gets harder as a request grows). Per GPU ask, the cpu-memory frontier: a
    trace's waiting pods come down from thousands of shapes to a few dozen."""
    by_gpu: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for whole, share, cpu, mem in shapes:
        by_gpu.setdefault((whole, share), []).append((cpu, mem))
    out: list[Shape] = []
    for (whole, share), asks in by_gpu.items():
        least_mem: int | None = None
        for cpu, mem in sorted(asks):  # by cpu: each kept one needs less memory than all before it
            if least_mem is None or mem < least_mem:
                out.append((whole, share, cpu, mem))
                least_mem = mem
    return out


@dataclass(frozen=True)
class Sample:
    t: float
    free_milli: int
    fragmented_milli: int
    waiting_gpu_pods: int

    def as_json(self) -> dict[str, Any]:
        ratio = self.fragmented_milli / self.free_milli if self.free_milli else 0.0
        return {
            "t": round(self.t, 6),
            "freeMilli": self.free_milli,
            "fragmentedMilli": self.fragmented_milli,
            "fragmentedRatio": round(ratio, 6),
            "waitingGpuPods": self.waiting_gpu_pods,
        }


class _Nodes:
    """Each node's allocatable and what its bound pods use."""

    def __init__(self, nodes: dict[str, dict[str, int]]) -> None:
        self.index = {name: i for i, name in enumerate(nodes)}
        alloc = list(nodes.values())
        self.devices = np.array([a.get(GPU, 0) // WHOLE for a in alloc], dtype=np.int64)
        self.cpu = np.array([a.get("cpu", 0) for a in alloc], dtype=np.int64)
        self.memory = np.array([a.get("memory", 0) for a in alloc], dtype=np.int64)
        # Used by bound pods, one column per Shape field, as Python ints: an event costs no numpy call.
        self.used = [[0] * len(alloc) for _ in range(4)]

    def apply(self, node: str, shape: Shape, sign: int) -> bool:
        i = self.index.get(node)
        if i is None:  # a node the recorder was not told of: nothing to count it against
            return False
        for column, v in zip(self.used, shape):
            column[i] += sign * v
        return True

    def measure(self, waiting: Counter[Shape]) -> tuple[int, int]:
        """(free GPU milli, of which fragmented) on the GPU nodes."""
        gpu = self.devices > 0
        devices = self.devices[gpu]
        used = np.array(self.used, dtype=np.int64).T[gpu]
        share_devices = -(-np.maximum(used[:, 1], 0) // WHOLE)  # the fewest devices the shares can fill
        whole_free = np.maximum(devices - used[:, 0] - share_devices, 0)
        partial_free = np.maximum(share_devices * WHOLE - used[:, 1], 0)
        free = whole_free * WHOLE + partial_free
        shapes = _minimal([s for s, n in waiting.items() if n > 0 and (s[0] or s[1])])
        if not shapes:
            return int(free.sum()), 0
        cpu_free = (self.cpu[gpu] - used[:, 2])[:, None]
        mem_free = (self.memory[gpu] - used[:, 3])[:, None]
        usable = np.zeros(len(devices), dtype=bool)
        for lo in range(0, len(shapes), SHAPE_CHUNK):
            whole, share, cpu, mem = np.array(shapes[lo : lo + SHAPE_CHUNK], dtype=np.int64).T
            left = whole_free[:, None] - whole  # devices free after the whole GPUs
            fits = (left >= 0) & (cpu_free >= cpu) & (mem_free >= mem)
            # A share needs one more free device, or that much left where the shares are.
            fits &= (share == 0) | (left >= 1) | (partial_free[:, None] >= share)
            usable |= fits.any(axis=1)
            if usable.all():
                break
        return int(free.sum()), int(free[~usable].sum())


@dataclass
class FragmentationTracker:
    """Folded with the series' events in time order: call `advance(at)` before applying the events at `at`,
    and `advance(inf)` after the last one."""

    nodes: dict[str, dict[str, int]]
    start: float
    end: float
    samples: list[Sample] = field(default_factory=list)
    _waiting: Counter[Shape] = field(default_factory=Counter)
    _last: tuple[int, int, int] | None = None  # the measure of the current state, while it holds
    _k: int = 0

    def __post_init__(self) -> None:
        self._state = _Nodes(self.nodes)
        self._on = bool(self._state.devices.sum())
        self._count = 1 if self.end <= self.start else MAX_SAMPLES

    def _grid(self, k: int) -> float:
        if self._count == 1:
            return self.start
        return self.end if k == self._count - 1 else self.start + (self.end - self.start) * k / (self._count - 1)

    def advance(self, at: float) -> None:
        """Samples every grid instant before `at`: the state holds from the last event until `at`."""
        while self._on and self._k < self._count and self._grid(self._k) < at:
            if self._last is None:
                free, fragmented = self._state.measure(self._waiting)
                waiting = sum(n for s, n in self._waiting.items() if n > 0 and (s[0] or s[1]))
                self._last = (free, fragmented, waiting)
            self.samples.append(Sample(self._grid(self._k), *self._last))
            self._k += 1

    def arrived(self, shape: Shape) -> None:
        self._waiting[shape] += 1
        self._last = None

    def bound(self, node: str, shape: Shape) -> None:
        self._waiting[shape] -= 1
        if self._waiting[shape] <= 0:
            del self._waiting[shape]
        self._state.apply(node, shape, 1)
        self._last = None

    def finished(self, node: str, shape: Shape) -> None:
        if self._state.apply(node, shape, -1):
            self._last = None

    def report(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The samples, and the summary: the fragmented share of free GPU over the whole run (fragmented
        over free, both summed over the samples) and at its last sample."""
        if not self.samples:
            return [], {}
        free = sum(s.free_milli for s in self.samples)
        fragmented = sum(s.fragmented_milli for s in self.samples)
        last = self.samples[-1].as_json()
        return [s.as_json() for s in self.samples], {
            "meanFragmentedRatio": round(fragmented / free, 6) if free else 0.0,
            "meanFragmentedMilli": round(fragmented / len(self.samples), 3),
            "meanFreeMilli": round(free / len(self.samples), 3),
            "endFragmentedRatio": last["fragmentedRatio"],
            "endFragmentedMilli": last["fragmentedMilli"],
            "endFreeMilli": last["freeMilli"],
            "samples": len(self.samples),
        }
