"""Who may be preempted for a gang, in units that never leave a partial gang behind.

A unit is what preemption takes or leaves as a whole:
- an ordinary pod (no gang, or a gang no rule applies to any more) is a unit of one;
- a running gang is a unit of all its pods ("whole gang");
- a running gang holding more pods than its minimum also offers each of those pods alone ("surplus"), but
  at most (running - minimum) of them: taking more would leave it below its minimum and waste the rest.
Only pods of strictly lower priority than the preemptor are candidates (kube-scheduler's rule), and a gang
is a candidate only when every one of its running pods is. Across queues (see reclaim.py) a pod is a
candidate only when its queue may be reclaimed from.

Units are ordered cheapest first: lowest priority, then least work lost (fewest pods, then fewest GPU
milli-units, then CPU: the scheduler does not know how long a pod has run, so the work a unit holds is
measured by what it holds), then by name, so the choice is a function of the state alone.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from phalanx.model.gpu import gpu_milli
from phalanx.model.objects import PodInfo, Resources


@dataclass(frozen=True)
class RunningPod:
    pod: PodInfo
    node: str
    held: Resources  # what it holds on its node (requests plus assigned devices)

    @property
    def key(self) -> str:
        return self.pod.key


@dataclass(frozen=True)
class VictimUnit:
    kind: str  # "gang" | "surplus" | "pod"
    gang: str  # "" for an ordinary pod
    pods: tuple[RunningPod, ...]
    priority: int

    @property
    def cost(self) -> tuple[int, int, int, int, str]:
        gpus = sum(gpu_milli(p.pod.requests) for p in self.pods)
        cpu = sum(p.pod.requests.get("cpu", 0) for p in self.pods)
        return (self.priority, len(self.pods), gpus, cpu, self.label)

    @property
    def label(self) -> str:
        if self.kind == "pod":
            return f"pod {self.pods[0].key}"
        if self.kind == "surplus":
            return f"pod {self.pods[0].key} (above the minimum of gang {self.gang})"
        return f"gang {self.gang} ({len(self.pods)} pods)"


def candidate_units(
    running: Iterable[RunningPod],
    preemptor_priority: int,
    minimum_of: Callable[[str], int | None],
    may_take: Callable[[PodInfo], bool] = lambda pod: True,
) -> tuple[list[VictimUnit], dict[str, int]]:
    """The units that may be preempted for a preemptor of `preemptor_priority`, cheapest first, and each
    gang's surplus quota (how many of its pods may go alone). `minimum_of(gang)`: the number of running
    pods the gang must keep, None when it has no gang rule any more (then its pods count one by one).
    `may_take(pod)`: whether the pod's queue may be reclaimed from (a gang is taken only if all its pods
    may)."""
    ordinary: list[RunningPod] = []
    by_gang: dict[str, list[RunningPod]] = defaultdict(list)
    for r in running:
        minimum = minimum_of(r.pod.gang) if r.pod.gang else None
        if minimum is None:
            ordinary.append(r)
        else:
            by_gang[r.pod.gang].append(r)
    units = [
        VictimUnit("pod", "", (r,), r.pod.priority)
        for r in ordinary
        if r.pod.priority < preemptor_priority and may_take(r.pod)
    ]
    quota: dict[str, int] = {}
    for gang, pods in by_gang.items():
        top = max(p.pod.priority for p in pods)
        if top >= preemptor_priority or not all(may_take(p.pod) for p in pods):
            continue  # one of its pods may not be preempted, and the rest alone would break it
        pods.sort(key=lambda p: p.key)
        units.append(VictimUnit("gang", gang, tuple(pods), top))
        minimum = minimum_of(gang) or 0
        surplus = len(pods) - minimum
        if surplus > 0:
            quota[gang] = surplus
            units += [VictimUnit("surplus", gang, (p,), top) for p in pods]
    units.sort(key=lambda u: u.cost)
    return units, quota


def victim_pods(units: Iterable[VictimUnit]) -> list[RunningPod]:
    """The distinct pods of `units` (a gang taken whole and one of its surplus pods overlap)."""
    seen: dict[str, RunningPod] = {}
    for u in units:
        for p in u.pods:
            seen.setdefault(p.key, p)
    return list(seen.values())
