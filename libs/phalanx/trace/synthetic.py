"""A what-if workload generator: a cluster of node shapes and a stream of gangs drawn from a weighted mix.

Nodes: ``--nodes COUNTxSHAPE`` (repeatable). SHAPE is a comma-separated list of items:
  ``<N>gpu``        whole GPUs (nvidia.com/gpu), default 0
  ``<X>cpu``        cores, decimals allowed (``0.5cpu``), required
  ``<Q>``           memory as a Kubernetes quantity with a unit (``512Gi``, ``768G``, ``65536Mi``), required
  ``model=NAME``    label ``phalanx.dev/gpu-model: NAME``
  ``pods=N``        allocatable pods, default 110
  e.g. ``--nodes 100x8gpu,64cpu,512Gi,model=A100 --nodes 20x64cpu,256Gi``. Nodes are named
  ``node-<group>-<index>`` (group = position of the --nodes option).

Gangs: ``--gangs SIZExGPUS[,<X>cpu][,<Q>][,model=A|B][@WEIGHT]`` (repeatable) describes gangs of SIZE pods
  each requesting GPUS whole GPUs (0: CPU-only). Per pod, cpu defaults to 4 cores per GPU (1 for CPU-only
  pods) and memory to 32Gi per GPU (4Gi for CPU-only pods); ``model=`` (models separated by ``|``) adds a
  required node affinity on ``phalanx.dev/gpu-model``. Each gang's kind is drawn from the mix with
  probability proportional to WEIGHT (default 1), e.g. ``--gangs 8x1@3 --gangs 16x8``.
  Gang k is named ``gang-<k>``, its pods ``gang-<k>-<i>``; min-available = total-number = SIZE.

Time: ``--count N`` gangs arrive at ``--rate`` gangs per minute, the first at time 0 (BASE_TIME, see
  writer.py). ``--arrivals fixed`` (default) spaces them exactly 60/rate s apart; ``--arrivals poisson``
  draws exponential gaps with that mean. All pods of a gang arrive together.
  ``--duration`` is how long every pod of a gang runs once started: one value (``30m``, ``1h30m``,
  ``90s``, a bare number is seconds), a range ``LO-HI`` (``10m-2h``) sampled uniformly per gang (to the
  millisecond), or ``none`` (never finishes).

Everything random (mix, Poisson gaps, durations) comes from ``--seed`` through one independent stream
each, so a given seed always produces the same file and, e.g., switching arrivals does not change the mix.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from phalanx.model.duration import parse_duration as parse_go_duration
from phalanx.model.quantity import QuantityError, parse_quantity
from phalanx.trace.writer import (
    BASE_TIME,
    DEFAULT_MAX_PODS,
    GPU_MODEL_LABEL,
    GangRef,
    NodeShape,
    PodShape,
    TraceError,
    Workload,
    format_duration,
    is_dns_label,
    positive_number,
    sanitize_label_value,
)

DEFAULT_CPU_PER_GPU = 4.0
DEFAULT_MEMORY_PER_GPU_GI = 32
CPU_ONLY_CPU = 1.0
CPU_ONLY_MEMORY_GI = 4

_COUNT_X = re.compile(r"^\s*(\d+)\s*[xX]\s*(.*)$")
_GPU_ITEM = re.compile(r"^(\d+)\s*gpus?$", re.IGNORECASE)
_CPU_ITEM = re.compile(r"^(\d+(?:\.\d+)?|\.\d+)\s*(?:cpus?|cores?)$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class NodeGroup:
    count: int
    gpus: int
    cpu_milli: int
    memory: str  # as written, validated
    model: str = ""
    max_pods: int = DEFAULT_MAX_PODS


@dataclass(frozen=True, slots=True)
class GangKind:
    size: int
    gpus_per_pod: int
    cpu_milli: int
    memory: str
    models: tuple[str, ...] = ()
    weight: float = 1.0

    def label(self) -> str:
        return f"{self.size}x{self.gpus_per_pod}"


@dataclass(frozen=True, slots=True)
class DurationSpec:
    low: float | None  # None: pods never finish
    high: float | None

    def describe(self) -> str:
        if self.low is None or self.high is None:
            return "none (never finish)"
        if self.low == self.high:
            return format_duration(self.low)
        return f"uniform {format_duration(self.low)}-{format_duration(self.high)}"


@dataclass(frozen=True, slots=True)
class SyntheticOptions:
    nodes: tuple[NodeGroup, ...]
    gangs: tuple[GangKind, ...]
    count: int = 100
    rate_per_minute: float = 1.0
    poisson: bool = False
    duration: DurationSpec = DurationSpec(1800.0, 1800.0)
    seed: int = 0
    namespace: str = "default"


# ---------------------------------------------------------------- parsing


def parse_node_group(text: str) -> NodeGroup:
    where = f"--nodes {text!r}"
    count, items = _count_and_items(text, where, "COUNTxSHAPE, e.g. 100x8gpu,64cpu,512Gi")
    gpus, cpu_milli, memory, model, max_pods = 0, None, None, "", DEFAULT_MAX_PODS
    for item in items:
        key, _, value = item.partition("=")
        if _GPU_ITEM.match(item):
            gpus = int(_GPU_ITEM.match(item).group(1))  # type: ignore[union-attr]
        elif _CPU_ITEM.match(item):
            cpu_milli = _cpu_milli(item, where)
        elif key == "model" and value:
            model = _model(value, where)
        elif key == "pods" and value:
            max_pods = _positive_int(value, f"{where}: pods=N needs N >= 1")
        else:
            memory = _memory(item, where)
    if cpu_milli is None or memory is None:
        raise TraceError(f"{where}: a node shape needs cpu and memory, e.g. 8gpu,64cpu,512Gi")
    return NodeGroup(count=count, gpus=gpus, cpu_milli=cpu_milli, memory=memory, model=model, max_pods=max_pods)


def parse_gang_kind(text: str) -> GangKind:
    where = f"--gangs {text!r}"
    body, weight_text = text, ""
    if "@" in text:
        body, _, weight_text = text.rpartition("@")
    weight = _weight(weight_text, where) if weight_text else 1.0
    usage = "SIZExGPUS[,<X>cpu][,<memory>][,model=A|B][@WEIGHT], e.g. 16x8 or 8x1,4cpu,32Gi@3"
    size, items = _count_and_items(body, where, usage)
    if not items or not items[0].isdigit():
        raise TraceError(f"{where}: expected {usage}")
    gpus = int(items[0])
    cpu_milli = round((gpus * DEFAULT_CPU_PER_GPU if gpus else CPU_ONLY_CPU) * 1000)
    memory = f"{gpus * DEFAULT_MEMORY_PER_GPU_GI if gpus else CPU_ONLY_MEMORY_GI}Gi"
    models: tuple[str, ...] = ()
    for item in items[1:]:
        key, _, value = item.partition("=")
        if _CPU_ITEM.match(item):
            cpu_milli = _cpu_milli(item, where)
        elif key == "model" and value:
            models = tuple(dict.fromkeys(_model(part, where) for part in value.split("|")))
        else:
            memory = _memory(item, where)
    return GangKind(size=size, gpus_per_pod=gpus, cpu_milli=cpu_milli, memory=memory, models=models, weight=weight)


def parse_duration(text: str) -> DurationSpec:
    """`30m`, `1h30m`, `90` (seconds), a range `10m-2h`, or `none`."""
    raw = text.strip()
    if raw.lower() in ("none", "inf", "forever"):
        return DurationSpec(None, None)
    low_text, sep, high_text = raw.partition("-")
    low = _seconds(low_text, text)
    high = _seconds(high_text, text) if sep else low
    if high < low:
        raise TraceError(f"--duration {text!r}: the range must go from low to high")
    return DurationSpec(low, high)


def _seconds(text: str, whole: str) -> float:
    # The same Go-style syntax the simulator reads back from the duration annotation.
    try:
        return parse_go_duration(text)
    except ValueError:
        raise TraceError(
            f"--duration {whole!r}: expected a duration like 30m, 1h30m, 90s, a range 10m-2h, or none"
        ) from None


def parse_rate(text: str) -> float:
    try:
        rate = float(text)
    except ValueError:
        rate = 0.0
    if not 0 < rate < float("inf"):
        raise TraceError(f"--rate {text!r}: expected gangs per minute > 0")
    return rate


def _count_and_items(text: str, where: str, usage: str) -> tuple[int, list[str]]:
    match = _COUNT_X.match(text)
    if not match:
        raise TraceError(f"{where}: expected {usage}")
    count = int(match.group(1))
    if count < 1:
        raise TraceError(f"{where}: the count before 'x' must be at least 1")
    items = [item.strip() for item in match.group(2).split(",") if item.strip()]
    return count, items


def _cpu_milli(item: str, where: str) -> int:
    cores = float(_CPU_ITEM.match(item).group(1))  # type: ignore[union-attr]
    milli = round(cores * 1000)
    if milli < 1:
        raise TraceError(f"{where}: {item!r} is less than 1m of cpu")
    return milli


def _memory(item: str, where: str) -> str:
    # A bare number would be bytes in Kubernetes, almost surely not what was meant: insist on a unit.
    if not re.match(r"^\d+(\.\d+)?(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)$", item):
        raise TraceError(
            f"{where}: cannot read {item!r}: expected <N>gpu, <X>cpu, memory with a unit (512Gi), or key=value"
        )
    try:
        parse_quantity(item)
    except QuantityError as exc:
        raise TraceError(f"{where}: {exc}") from None
    return item


def _model(raw: str, where: str) -> str:
    model = sanitize_label_value(raw)
    if not model:
        raise TraceError(f"{where}: {raw!r} is not usable as a GPU model name")
    return model


def _positive_int(text: str, message: str) -> int:
    return positive_number(text, message, int)


def _weight(text: str, where: str) -> float:
    try:
        weight = float(text)
    except ValueError:
        weight = -1.0
    if not 0 < weight < float("inf"):
        raise TraceError(f"{where}: the weight after '@' must be a number > 0")
    return weight


# ---------------------------------------------------------------- generation


def generate(options: SyntheticOptions) -> Workload:
    if not options.nodes:
        raise TraceError("give at least one --nodes COUNTxSHAPE")
    if not options.gangs:
        raise TraceError("give at least one --gangs SIZExGPUS")
    if options.count < 1:
        raise TraceError(f"--count must be at least 1, got {options.count}")
    if not is_dns_label(options.namespace):
        raise TraceError(f"--namespace {options.namespace!r} is not a valid namespace name (RFC 1123 label)")
    nodes = build_nodes(options.nodes)
    kinds = _draw_kinds(options)
    times = _arrival_times(options)
    durations = _durations(options)
    width = max(5, len(str(options.count)))
    pods: list[PodShape] = []
    for number, (kind, at, duration) in enumerate(zip(kinds, times, durations), start=1):
        pods.extend(_gang_pods(f"gang-{number:0{width}d}", kind, at, duration, options.namespace))
    return Workload(nodes=nodes, pods=pods, header=_header(options, nodes))


def build_nodes(groups: Sequence[NodeGroup]) -> list[NodeShape]:
    nodes: list[NodeShape] = []
    for g, group in enumerate(groups):
        width = max(4, len(str(group.count - 1)))
        for i in range(group.count):
            nodes.append(
                NodeShape(
                    name=f"node-{g}-{i:0{width}d}",
                    cpu=f"{group.cpu_milli}m",
                    memory=group.memory,
                    gpus=group.gpus,
                    labels={GPU_MODEL_LABEL: group.model} if group.model else {},
                    max_pods=group.max_pods,
                )
            )
    return nodes


def _stream(options: SyntheticOptions, purpose: str) -> random.Random:
    # A string seed is hashed with SHA-512 by `random`, so it is stable across runs and Python builds.
    return random.Random(f"phalanx-synthetic/{options.seed}/{purpose}")


def _draw_kinds(options: SyntheticOptions) -> list[GangKind]:
    rng = _stream(options, "mix")
    weights = [kind.weight for kind in options.gangs]
    return rng.choices(list(options.gangs), weights=weights, k=options.count)


def _arrival_times(options: SyntheticOptions) -> list[float]:
    mean_gap = 60.0 / options.rate_per_minute
    if not options.poisson:
        return [k * mean_gap for k in range(options.count)]
    rng = _stream(options, "arrivals")
    times: list[float] = []
    now = 0.0
    for _ in range(options.count):
        times.append(round(now, 3))  # the writer keeps milliseconds
        now += rng.expovariate(1.0 / mean_gap)
    return times


def _durations(options: SyntheticOptions) -> list[float | None]:
    low, high = options.duration.low, options.duration.high
    if low is None or high is None:
        return [None] * options.count
    if low == high:
        return [low] * options.count
    rng = _stream(options, "durations")
    return [round(rng.uniform(low, high), 3) for _ in range(options.count)]  # the writer keeps ms


def _gang_pods(name: str, kind: GangKind, at: float, duration: float | None, namespace: str) -> list[PodShape]:
    gang = GangRef(name=name, min_available=kind.size, total_number=kind.size)
    return [
        PodShape(
            name=f"{name}-{i}",
            namespace=namespace,
            arrival=at,
            cpu=f"{kind.cpu_milli}m",
            memory=kind.memory,
            gpus=kind.gpus_per_pod,
            gpu_models=kind.models,
            duration=duration,
            gang=gang,
        )
        for i in range(kind.size)
    ]


def _header(options: SyntheticOptions, nodes: list[NodeShape]) -> list[str]:
    node_text = "; ".join(
        f"{g.count}x {g.gpus} GPU, {g.cpu_milli}m cpu, {g.memory}" + (f", model {g.model}" if g.model else "")
        for g in options.nodes
    )
    mix = ", ".join(f"{k.label()}@{k.weight:g}" for k in options.gangs)
    arrivals = "poisson" if options.poisson else "fixed spacing"
    return [
        "Phalanx workload generated by `phalanx trace synthetic`.",
        f"nodes: {len(nodes)} ({node_text})",
        f"gangs: {options.count} from mix {mix}; {options.rate_per_minute:g}/min, {arrivals}; seed {options.seed}",
        f"duration: {options.duration.describe()}",
        f"time 0 = {BASE_TIME:%Y-%m-%dT%H:%M:%SZ}; creationTimestamp = time 0 + arrival seconds",
    ]
