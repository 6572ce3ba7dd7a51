"""When the openb trace's pods arrive and which of them form gangs: the --arrival and --gang-rule options
(phalanx.trace.openb describes them), read and applied.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from phalanx.trace.openb_csv import WHOLE_GPU_MILLI, PodTable, TracePod
from phalanx.trace.writer import (
    GangRef,
    TraceError,
    positive_number,
)

DEFAULT_FGD_FACTOR = 1.3
DEFAULT_MAX_GANG_SIZE = 64

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Arrival:
    kind: str = "trace"  # trace | rate | fgd
    rate: float = 0.0  # pods per second (rate)
    seed: int = 0  # fgd
    factor: float = DEFAULT_FGD_FACTOR  # fgd

    def describe(self) -> str:
        if self.kind == "rate":
            return f"rate:{self.rate:g} pods/s in trace order"
        if self.kind == "fgd":
            return f"fgd seed={self.seed} factor={self.factor:g} (1 s apart, never leaving)"
        return "trace creation_time"


@dataclass(frozen=True, slots=True)
class GangRule:
    kind: str = "none"  # none | size | window
    size: int = 0  # size
    window: float = 0.0  # window, seconds
    max_size: int = DEFAULT_MAX_GANG_SIZE  # window

    def describe(self) -> str:
        if self.kind == "size":
            return f"size:{self.size} (consecutive GPU pods of one shape)"
        if self.kind == "window":
            return f"window:{self.window:g}s (multi-GPU pods of one shape, at most {self.max_size})"
        return "none (every pod alone)"


def parse_arrival(text: str) -> Arrival:
    """`trace`, `rate:R` or `fgd:SEED[:FACTOR]`."""
    kind, _, rest = text.strip().partition(":")
    if kind == "trace" and not rest:
        return Arrival()
    if kind == "rate":
        rate = _positive_float(rest, f"--arrival {text!r}: expected rate:R with R > 0 pods per second")
        return Arrival(kind="rate", rate=rate)
    if kind == "fgd":
        seed_text, _, factor_text = rest.partition(":")
        usage = f"--arrival {text!r}: expected fgd:SEED[:FACTOR], an integer seed and a factor > 0"
        try:
            seed = int(seed_text)
        except ValueError:
            raise TraceError(usage) from None
        factor = _positive_float(factor_text, usage) if factor_text else DEFAULT_FGD_FACTOR
        return Arrival(kind="fgd", seed=seed, factor=factor)
    raise TraceError(f"--arrival {text!r}: expected trace, rate:R or fgd:SEED[:FACTOR]")


def parse_gang_rule(text: str, max_size: int = DEFAULT_MAX_GANG_SIZE) -> GangRule:
    """`none`, `size:N` or `window:SECONDS`."""
    if max_size < 1:
        raise TraceError(f"--max-gang-size must be at least 1, got {max_size}")
    kind, _, rest = text.strip().partition(":")
    if kind == "none" and not rest:
        return GangRule()
    if kind == "size":
        return GangRule(kind="size", size=_gang_size(rest, f"--gang-rule {text!r}"))
    if kind == "window":
        try:
            window = float(rest)
        except ValueError:
            window = -1.0
        if not window >= 0 or window == float("inf"):
            raise TraceError(f"--gang-rule {text!r}: expected window:SECONDS with SECONDS >= 0")
        return GangRule(kind="window", window=window, max_size=max_size)
    raise TraceError(f"--gang-rule {text!r}: expected none, size:N or window:SECONDS")


def _gang_size(text: str, where: str) -> int:
    return positive_number(text, f"{where}: the gang size must be an integer >= 1", int)


def _positive_float(text: str, message: str) -> float:
    return positive_number(text, message, float)


# ---------------------------------------------------------------- arrivals


@dataclass(slots=True)
class Arrived:
    pod: TracePod
    name: str
    at: float
    duration: float | None


def schedule_arrivals(table: PodTable, pods: list[TracePod], arrival: Arrival, cluster_gpus: int) -> list[Arrived]:
    if arrival.kind == "fgd":
        return _fgd_arrivals(pods, arrival, cluster_gpus, table.path)
    if arrival.kind == "rate":
        ordered = _creation_order(pods) if table.has_times and _all_created(pods) else pods
        return [Arrived(pod, pod.name, i / arrival.rate, pod.duration) for i, pod in enumerate(ordered)]
    if not table.has_times:
        raise TraceError(
            f"{table.path}: has no creation_time column (like the multigpu20 variant), so --arrival trace "
            "cannot be used: choose --arrival rate:R or --arrival fgd:SEED[:FACTOR]"
        )
    for pod in pods:
        if pod.creation is None:
            raise TraceError(f"{table.path}: line {pod.line}, column 'creation_time': empty; --arrival trace needs it")
    return [Arrived(pod, pod.name, pod.creation or 0.0, pod.duration) for pod in _creation_order(pods)]


def _all_created(pods: list[TracePod]) -> bool:
    return all(pod.creation is not None for pod in pods)


def _creation_order(pods: list[TracePod]) -> list[TracePod]:
    # sorted() is stable: pods created in the same second keep their row order.
    return sorted(pods, key=lambda pod: pod.creation or 0.0)


def _fgd_arrivals(pods: list[TracePod], arrival: Arrival, cluster_gpus: int, path: Path) -> list[Arrived]:
    target = arrival.factor * cluster_gpus
    if target > 0 and not any(pod.num_gpu for pod in pods):
        raise TraceError(f"{path}: no GPU pods to sample, so the GPU demand can never reach {target:g} GPUs")
    rng = random.Random(arrival.seed)
    picked = _sample_until(pods, rng, lambda pod: pod.num_gpu * pod.gpu_milli / WHOLE_GPU_MILLI, target)
    rng.shuffle(picked)
    times_seen: dict[str, int] = {}
    arrived: list[Arrived] = []
    for i, pod in enumerate(picked):
        times_seen[pod.name] = times_seen.get(pod.name, 0) + 1
        name = pod.name if times_seen[pod.name] == 1 else f"{pod.name}-r{times_seen[pod.name]}"
        arrived.append(Arrived(pod, name, float(i), None))
    return arrived


def _sample_until(pool: list[T], rng: random.Random, weight: Callable[[T], float], target: float) -> list[T]:
    """Take `pool` in a random order, then draw with replacement, until the weights sum to `target`."""
    order = list(pool)
    rng.shuffle(order)
    picked: list[T] = []
    total = 0.0
    while total < target:
        item = order[len(picked)] if len(picked) < len(order) else rng.choice(pool)
        picked.append(item)
        total += weight(item)
    return picked


# ---------------------------------------------------------------- gangs


@dataclass(slots=True)
class _Group:
    first_index: int
    first_at: float
    members: list[int] = field(default_factory=list)


def form_gangs(arrived: Sequence[Arrived], rule: GangRule) -> list[GangRef | None]:
    """The gang of each arrived pod (None: alone), following `rule` in arrival order."""
    if rule.kind == "none":
        return [None] * len(arrived)
    if rule.kind == "size":
        groups = _group(arrived, lambda a: a.pod.num_gpu >= 1, rule.size, None)
        minimum = 1  # a trailing incomplete group stays a (smaller) gang
    else:
        groups = _group(arrived, lambda a: a.pod.num_gpu >= 2, rule.max_size, rule.window)
        minimum = 2  # a gang of one is just a pod
    gangs: list[GangRef | None] = [None] * len(arrived)
    number = 0
    for group in sorted(groups, key=lambda g: g.first_index):
        if len(group.members) < minimum:
            continue
        number += 1
        ref = GangRef(name=f"gang-{number:05d}", min_available=len(group.members), total_number=len(group.members))
        for index in group.members:
            gangs[index] = ref
    return gangs


def _group(
    arrived: Sequence[Arrived], eligible: Callable[[Arrived], bool], max_size: int, window: float | None
) -> list[_Group]:
    """Group eligible pods by shape; a group closes when full or (with a window) when a pod comes too late."""
    open_groups: dict[tuple[object, ...], _Group] = {}
    done: list[_Group] = []
    for index, item in enumerate(arrived):
        if not eligible(item):
            continue
        shape = item.pod.shape
        group = open_groups.get(shape)
        if group is not None and window is not None and item.at - group.first_at > window:
            done.append(open_groups.pop(shape))
            group = None
        if group is None:
            group = open_groups[shape] = _Group(first_index=index, first_at=item.at)
        group.members.append(index)
        if len(group.members) >= max_size:
            done.append(open_groups.pop(shape))
    done.extend(open_groups.values())
    return done
