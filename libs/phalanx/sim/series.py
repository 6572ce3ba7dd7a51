"""Time series of a simulation, kept incrementally (O(1) per event) and sampled after every step.

- allocation of each resource (cpu, memory, GPUs) over virtual time, absolute and as a share of the
  cluster's allocatable; GPUs count whole GPUs and shares of one (phalanx.dev/gpu-share) alike;
- what waiting gangs hold: capacity reserved for their pods and not bound yet, the same way (it is what
  makes other pods wait while nothing runs on it);
- pending pods and pending gangs over time;
- each gang's wait: from its first pod's arrival to the moment its minimum was bound;
- the GPU allocation ratio as a function of arrived GPU demand (the FGD paper's metric: allocated GPU
  over all GPUs, against the GPUs requested by all pods arrived so far over all GPUs), and whether this run
  is the sweep that metric is read from (`gpuDemandSweep`);
- GPU fragmentation: free GPU that none of the waiting pods could use, per node (phalanx.sim.fragmentation),
  which needs the nodes and the binds by name (without names every node counts as one).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from phalanx.model.gpu import GPU, gpu_milli
from phalanx.sim.fragmentation import FragmentationTracker, shape_of

TRACKED = (GPU, "cpu", "memory")


def _tracked(requests: dict[str, int]) -> dict[str, int]:
    return {GPU: gpu_milli(requests), "cpu": requests.get("cpu", 0), "memory": requests.get("memory", 0)}


MAX_POINTS = 2000  # reports stay small on long traces; the last value of each bucket is kept
DEMAND_LEVELS = (0.9, 1.0, 1.1, 1.3)  # arrived GPU demand, as a share of the GPUs, where the FGD metric is read
# The largest arrival, as a share of the GPUs, that still tells the levels apart (10 points between the
# closest two): a run whose demand jumps past a level in one step cannot say what was allocated at it.
SWEEP_STEP = 0.05


@dataclass
class SeriesRecorder:
    """Records timestamped events; the series are folded from them at the end, so events may be
    recorded out of order (the simulator learns of a run of quiet instants only after it ran)."""

    capacity: dict[str, int] = field(default_factory=dict)
    events: list[tuple[float, int, str, Any]] = field(default_factory=list)
    points: list[dict[str, float]] = field(default_factory=list)
    gang_waits: dict[str, float] = field(default_factory=dict)
    nodes: dict[str, dict[str, int]] = field(default_factory=dict)  # name -> tracked allocatable
    fragmentation: FragmentationTracker | None = None  # folded with the series

    # -- events ------------------------------------------------------------------------------------
    def _log(self, at: float, kind: str, data: Any) -> None:
        self.events.append((at, len(self.events), kind, data))

    def node_added(self, allocatable: dict[str, int], name: str = "") -> None:
        node = self.nodes.setdefault(name, {})
        for r in TRACKED:
            self.capacity[r] = self.capacity.get(r, 0) + allocatable.get(r, 0)
            node[r] = node.get(r, 0) + allocatable.get(r, 0)

    def pod_arrived(self, requests: dict[str, int], gang: str, at: float) -> None:
        self._log(at, "arrived", (gpu_milli(requests), gang, shape_of(requests)))

    def pod_bound(self, requests: dict[str, int], at: float, node: str = "") -> None:
        self._log(at, "bound", (_tracked(requests), shape_of(requests), node))

    def pod_finished(self, requests: dict[str, int], at: float, node: str = "") -> None:
        self._log(at, "finished", (_tracked(requests), shape_of(requests), node))

    def pod_finish_moved(self, requests: dict[str, int], was: float, at: float, node: str = "") -> None:
        """A pod whose finish was recorded ahead (at `was`) ended earlier, at `at` (preempted)."""
        data = (_tracked(requests), shape_of(requests), node)
        for i, (t, _, kind, d) in enumerate(self.events):
            if t == was and kind == "finished" and d == data:
                del self.events[i]
                break
        self._log(at, "finished", data)

    def gang_started(self, gang: str, at: float) -> None:
        self._log(at, "started", gang)

    def gang_reserved(self, gang: str, requests: dict[str, int], at: float) -> None:
        """What the gang holds reserved and not bound from `at` on (the sum of its reserved pods' requests;
        empty once it bound or let go)."""
        self._log(at, "reserved", (gang, _tracked(requests)))

    def _fold(self) -> None:
        """One point per distinct time, after every event at that time."""
        allocated: dict[str, int] = {}
        reserved: dict[str, int] = {}
        held: dict[str, dict[str, int]] = {}  # gang -> what it holds reserved
        arrived_gpu = pending = gpu_freed = 0
        pending_gangs: set[str] = set()
        first_arrival: dict[str, float] = {}
        self.points, self.gang_waits = [], {}
        events = sorted(self.events)
        frag = FragmentationTracker(self.nodes, events[0][0] if events else 0.0, events[-1][0] if events else 0.0)
        for at, _, kind, data in events:
            frag.advance(at)
            if kind == "arrived":
                gpu, gang, shape = data
                frag.arrived(shape)
                pending += 1
                arrived_gpu += gpu
                if gang:
                    first_arrival.setdefault(gang, at)
                    if gang not in self.gang_waits:
                        pending_gangs.add(gang)
            elif kind == "bound":
                tracked, shape, node = data
                frag.bound(node, shape)
                pending -= 1
                for r, v in tracked.items():
                    allocated[r] = allocated.get(r, 0) + v
            elif kind == "finished":
                tracked, shape, node = data
                frag.finished(node, shape)
                for r, v in tracked.items():
                    allocated[r] = allocated.get(r, 0) - v
                gpu_freed += tracked[GPU]
            elif kind == "reserved":
                gang, now_held = data
                before = held.pop(gang, {})
                for r in TRACKED:
                    reserved[r] = reserved.get(r, 0) + now_held[r] - before.get(r, 0)
                if any(now_held.values()):
                    held[gang] = now_held
            elif kind == "started":
                pending_gangs.discard(data)
                self.gang_waits.setdefault(data, at - first_arrival.get(data, at))
            point = {
                "t": at,
                "pendingPods": float(pending),
                "pendingGangs": float(len(pending_gangs)),
                "arrivedGpuDemand": self._ratio(arrived_gpu, GPU),
                "gpuFreed": float(gpu_freed),
            }
            for r in TRACKED:
                point[f"allocated:{r}"] = float(allocated.get(r, 0))
                point[f"reserved:{r}"] = float(reserved.get(r, 0))
            if self.points and self.points[-1]["t"] == at:
                self.points[-1] = point
            else:
                self.points.append(point)
        frag.advance(float("inf"))
        self.fragmentation = frag

    def _ratio(self, value: int, resource: str) -> float:
        cap = self.capacity.get(resource, 0)
        return value / cap if cap else 0.0

    # -- output ------------------------------------------------------------------------------------
    def report(self) -> dict[str, Any]:
        self._fold()
        points = _downsample(self.points, MAX_POINTS)
        series: dict[str, Any] = {
            "t": [p["t"] for p in points],
            "pendingPods": [p["pendingPods"] for p in points],
            "pendingGangs": [p["pendingGangs"] for p in points],
            "arrivedGpuDemand": [round(p["arrivedGpuDemand"], 6) for p in points],
            # Natural units (cores, bytes, GPUs), not the milli-units used inside.
            "allocated": {r: [p[f"allocated:{r}"] / 1000 for p in points] for r in TRACKED if self.capacity.get(r)},
            "allocatedRatio": {
                r: [round(p[f"allocated:{r}"] / self.capacity[r], 6) for p in points]
                for r in TRACKED
                if self.capacity.get(r)
            },
            # Read from Redis as each step ends (see Simulation._read_gang_reports), exact at every instant.
            "reserved": {r: [p[f"reserved:{r}"] / 1000 for p in points] for r in TRACKED if self.capacity.get(r)},
            "reservedRatio": {
                r: [round(p[f"reserved:{r}"] / self.capacity[r], 6) for p in points]
                for r in TRACKED
                if self.capacity.get(r)
            },
            "capacity": {r: v / 1000 for r, v in self.capacity.items() if v},
        }
        waits = sorted(self.gang_waits.values())
        fragmentation, fragmentation_summary = self.fragmentation.report() if self.fragmentation else ([], {})
        return {
            "series": series,
            "gangWaits": [{"gang": g, "waitSeconds": w} for g, w in sorted(self.gang_waits.items())],
            "gangWaitPercentiles": {f"p{q}": _percentile(waits, q) for q in (50, 90, 99)} if waits else {},
            "gpuAllocationAtDemand": self.gpu_allocation_at(DEMAND_LEVELS),
            "gpuDemandSweep": self.demand_sweep(),
            "gpuFragmentation": fragmentation,
            "gpuFragmentationSummary": fragmentation_summary,
        }

    def demand_sweep(self) -> bool:
        """Whether GPU allocation at arrived demand means something here: the run is the FGD paper's sweep
        (pods of a GPU trace arriving one by one and never leaving) until the last level. Demand must reach
        the first level in steps of at most SWEEP_STEP, and no GPU may be freed before the last level: once
        pods leave, allocation trails the demand that ever arrived by what finished, not by what did not fit."""
        if not self.capacity.get(GPU):
            return False
        previous, reached = 0.0, False
        for p in self.points:
            demand = p["arrivedGpuDemand"]
            if p["gpuFreed"] > 0 or demand - previous > SWEEP_STEP + 1e-9:
                return False
            previous = demand
            reached = reached or demand >= DEMAND_LEVELS[0] - 1e-9
            if demand >= DEMAND_LEVELS[-1] - 1e-9:
                break
        return reached

    def gpu_allocation_at(self, demands: tuple[float, ...]) -> dict[str, float | None]:
        """GPU allocation ratio at the first sample where arrived GPU demand reached each level."""
        xs = [p["arrivedGpuDemand"] for p in self.points]
        out: dict[str, float | None] = {}
        for d in demands:
            i = bisect.bisect_left(_running_max(xs), d - 1e-9)
            out[f"{d:g}"] = (
                None if i >= len(xs) else round(self._ratio(int(self.points[i][f"allocated:{GPU}"]), GPU), 6)
            )
        return out


def _running_max(xs: list[float]) -> list[float]:
    out, best = [], float("-inf")
    for x in xs:
        best = max(best, x)
        out.append(best)
    return out


def _percentile(sorted_values: list[float], q: int) -> float:
    """Linear between closest ranks, as numpy.percentile's default, but computed as a + (b - a) * t.

    Kept rather than numpy.percentile: numpy computes the upper half of each interval as b - (b - a) * (1 - t),
    which differs in the last bit for 4,266 of 60,000 random (waits, q in 50/90/99) tried, and these values
    are published in the JSON report, which must not change. (The benchmarks' percentiles use numpy.)"""
    if not sorted_values:
        return 0.0
    k = (len(sorted_values) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def _downsample(points: list[dict[str, float]], limit: int) -> list[dict[str, float]]:
    if len(points) <= limit:
        return points
    step = len(points) / limit
    picked = [points[min(int((i + 1) * step) - 1, len(points) - 1)] for i in range(limit)]
    if picked[0] is not points[0]:
        picked[0] = points[0]
    return picked
