"""Import the Alibaba "openb" GPU trace (cluster-trace-gpu-v2023, used by the FGD paper) as a workload.

Inputs
  Node CSV ``sn,cpu_milli,memory_mib,gpu,model`` -> v1 Node with allocatable cpu "<milli>m", memory
  "<mib>Mi", nvidia.com/gpu "<gpu>" (left out when 0), pods "110", and label
  ``phalanx.dev/gpu-model: <model>`` (sanitised to a valid label value; no label when model is empty).

  Pod CSV ``name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,pod_phase,creation_time,
  deletion_time,scheduled_time]`` (times in seconds) -> v1 Pod requesting cpu/memory and, for GPU pods,
  ``nvidia.com/gpu: num_gpu``. ``gpu_milli`` is the share of each GPU: 1000 (or 0/empty) means whole
  GPUs. ``gpu_spec`` such as ``V100M16|V100M32`` becomes a required node affinity
  ``phalanx.dev/gpu-model In [V100M16, V100M32]`` (ignored on CPU-only pods). Extra columns and the
  qos/pod_phase values are ignored; names must be unique.

Fractional GPUs (0 < gpu_milli < 1000)
  A pod sharing one GPU becomes ``phalanx.dev/gpu-share: <gpu_milli>m`` (e.g. 300m: 30% of one GPU),
  which Phalanx places on a single device with that much free (libs/phalanx/plugins/gpu_share.py): no
  rounding. ``--skip-fractional`` leaves such pods out instead (the number skipped is reported on stderr
  and in the YAML header comment). A fractional share of several GPUs (num_gpu > 1 with gpu_milli <
  1000) has no faithful form and is refused naming the row, unless skipped. (3078 of the 8152 pods of
  openb_pod_list_default share one GPU; none shares several.)

Durations
  ``simulation.phalanx.dev/duration`` = deletion_time - scheduled_time. Pods never scheduled in the
  trace (empty scheduled_time, phase Pending) use deletion_time - creation_time, i.e. how long they
  waited before being deleted; in a what-if run they may be placed and then run that long. No
  annotation (the pod never finishes) when a time is missing or the difference is negative.

Arrival (``--arrival``)
  ``trace`` (default)  creationTimestamp = BASE_TIME + creation_time (BASE_TIME is
                       2026-01-01T00:00:00Z, see writer.py); pods ordered by creation_time.
  ``rate:R``           R pods per second in trace order (creation order when the file has
                       creation_time, else row order); pod i arrives at i/R s. Trace durations kept.
  ``fgd:SEED[:FACTOR]`` the FGD paper's experiment: shuffle the pods (random.Random(SEED)) and take
                       them in that order, then sample with replacement once all are used, until the
                       total GPU request reaches FACTOR (default 1.3) x the node file's GPUs; the
                       selection is shuffled again and pods arrive 1 s apart and never leave.
                       Re-sampled pods are renamed ``<name>-r<k>``. Unlike the paper, fractional pods
                       cannot take part (they must be skipped), so only whole-GPU demand counts.
  The multigpu20 variant has no time columns: use ``rate:R`` or ``fgd:...`` (``trace`` is an error);
  its pods get no duration.

Gangs (``--gang-rule`` / ``--gang-size``), applied in arrival order; every gang has
min-available = total-number = its size and gang names ``gang-00001``, ``gang-00002``, ... numbered
by the arrival of their first pod. Pods keep their own arrival times.
  ``none`` (default)   every pod is alone.
  ``size:N`` / ``--gang-size N``  every N consecutive GPU pods of the same shape (cpu, memory,
                       num_gpu, gpu_milli, gpu_spec) form a gang; CPU-only pods stay alone; a trailing
                       incomplete group of a shape stays a smaller gang (min-available = its size, so
                       a lone trailing pod is a gang of one).
  ``window:SECONDS``   multi-GPU pods (num_gpu >= 2) of the same shape arriving within SECONDS of the
                       gang's first pod form one gang, up to ``--max-gang-size`` (default 64) pods; a
                       pod arriving later, or once the gang is full, starts a new one. A group of one
                       stays a plain pod; single-GPU and CPU-only pods stay alone.
"""

from __future__ import annotations

import csv
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from phalanx.trace.writer import (
    BASE_TIME,
    GPU_MODEL_LABEL,
    GangRef,
    NodeShape,
    PodShape,
    TraceError,
    Workload,
    is_dns_label,
    positive_number,
    sanitize_label_value,
    sanitize_name,
)

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
WHOLE_GPU_MILLI = 1000
DEFAULT_FGD_FACTOR = 1.3
DEFAULT_MAX_GANG_SIZE = 64

T = TypeVar("T")


# ---------------------------------------------------------------- options


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


@dataclass(frozen=True, slots=True)
class ImportOptions:
    arrival: Arrival = Arrival()
    gang_rule: GangRule = GangRule()
    skip_fractional: bool = False
    namespace: str = "default"


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


# ---------------------------------------------------------------- CSV reading


class _Table:
    """A CSV file read row by row, with errors that name the file, line and column."""

    def __init__(self, path: Path, required: Sequence[str]) -> None:
        self.path = path
        try:
            self._handle = path.open(newline="", encoding="utf-8-sig")
        except OSError as exc:
            raise TraceError(f"cannot read {path}: {exc.strerror or exc}") from None
        self._reader = csv.reader(self._handle)
        header = next(self._reader, None)
        if header is None:
            self._handle.close()
            raise TraceError(f"{path}: the file is empty (expected a header line: {','.join(required)})")
        self.columns = {name.strip(): i for i, name in enumerate(header)}
        for name in required:
            if name not in self.columns:
                self._handle.close()
                raise TraceError(
                    f"{path}: line 1: missing column {name!r} (header has: {', '.join(self.columns) or 'nothing'})"
                )
        self.line = 1

    def has(self, column: str) -> bool:
        return column in self.columns

    def rows(self) -> Iterator[list[str]]:
        width = len(self.columns)
        with self._handle:
            try:
                for row in self._reader:
                    self.line = self._reader.line_num
                    if not row or all(not cell.strip() for cell in row):
                        continue  # blank lines carry nothing
                    if len(row) < width:
                        raise TraceError(f"{self.path}: line {self.line}: expected {width} columns, got {len(row)}")
                    yield row
            except csv.Error as exc:
                raise TraceError(f"{self.path}: line {self._reader.line_num}: {exc}") from None
            except UnicodeDecodeError as exc:
                raise TraceError(f"{self.path}: not UTF-8 text ({exc.reason})") from None

    def error(self, column: str, message: str) -> TraceError:
        return TraceError(f"{self.path}: line {self.line}, column {column!r}: {message}")

    def text(self, row: list[str], column: str) -> str:
        return row[self.columns[column]].strip() if column in self.columns else ""

    def count(self, row: list[str], column: str, empty: int | None = None) -> int:
        """A non-negative integer (an integral float such as "12000.0" is accepted)."""
        raw = self.text(row, column)
        if not raw and empty is not None:
            return empty
        value = _number(raw)
        if value is None or value != int(value):
            raise self.error(column, f"expected a non-negative integer, got {raw!r}")
        if value < 0:
            raise self.error(column, f"must not be negative, got {raw!r}")
        return int(value)

    def seconds(self, row: list[str], column: str) -> float | None:
        """A time in seconds, None when the column is absent or the cell empty."""
        raw = self.text(row, column)
        if not raw:
            return None
        value = _number(raw)
        if value is None:
            raise self.error(column, f"expected a time in seconds, got {raw!r}")
        return value


def _number(raw: str) -> float | None:
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None


# ---------------------------------------------------------------- nodes


def read_nodes(path: Path) -> list[NodeShape]:
    table = _Table(path, NODE_COLUMNS)
    nodes: list[NodeShape] = []
    first_line: dict[str, int] = {}
    for row in table.rows():
        name = _object_name(table, row, "sn", first_line)
        gpus = table.count(row, "gpu", empty=0)
        model = sanitize_label_value(table.text(row, "model"))
        nodes.append(
            NodeShape(
                name=name,
                cpu=f"{table.count(row, 'cpu_milli')}m",
                memory=f"{table.count(row, 'memory_mib')}Mi",
                gpus=gpus,
                labels={GPU_MODEL_LABEL: model} if model else {},
            )
        )
    if not nodes:
        raise TraceError(f"{path}: no nodes (only a header)")
    return nodes


def _object_name(table: _Table, row: list[str], column: str, first_line: dict[str, int]) -> str:
    raw = table.text(row, column)
    name = sanitize_name(raw)
    if not name:
        raise table.error(column, f"{raw!r} is not usable as a Kubernetes name")
    if name in first_line:
        raise table.error(column, f"duplicate name {raw!r} (first on line {first_line[name]})")
    first_line[name] = table.line
    return name


# ---------------------------------------------------------------- pods


@dataclass(slots=True)
class TracePod:
    line: int
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int  # per GPU; WHOLE_GPU_MILLI for whole GPUs
    gpu_models: tuple[str, ...]
    creation: float | None
    deletion: float | None
    scheduled: float | None

    @property
    def fractional(self) -> bool:
        return self.num_gpu > 0 and self.gpu_milli < WHOLE_GPU_MILLI

    @property
    def shape(self) -> tuple[object, ...]:
        return (self.cpu_milli, self.memory_mib, self.num_gpu, self.gpu_milli, self.gpu_models)

    @property
    def duration(self) -> float | None:
        start = self.scheduled if self.scheduled is not None else self.creation
        if self.deletion is None or start is None or self.deletion < start:
            return None
        return self.deletion - start


@dataclass(slots=True)
class PodTable:
    path: Path
    pods: list[TracePod]
    has_times: bool


def read_pods(path: Path) -> PodTable:
    table = _Table(path, POD_COLUMNS)
    pods: list[TracePod] = []
    first_line: dict[str, int] = {}
    for row in table.rows():
        pods.append(_trace_pod(table, row, first_line))
    if not pods:
        raise TraceError(f"{path}: no pods (only a header)")
    return PodTable(path=path, pods=pods, has_times=table.has("creation_time"))


def _trace_pod(table: _Table, row: list[str], first_line: dict[str, int]) -> TracePod:
    name = _object_name(table, row, "name", first_line)
    num_gpu = table.count(row, "num_gpu", empty=0)
    gpu_milli = table.count(row, "gpu_milli", empty=0) or WHOLE_GPU_MILLI  # 0/empty: whole GPUs
    if gpu_milli > WHOLE_GPU_MILLI:
        raise table.error("gpu_milli", f"must be at most {WHOLE_GPU_MILLI} (one whole GPU), got {gpu_milli}")
    return TracePod(
        line=table.line,
        name=name,
        cpu_milli=table.count(row, "cpu_milli"),
        memory_mib=table.count(row, "memory_mib"),
        num_gpu=num_gpu,
        gpu_milli=gpu_milli,
        gpu_models=_gpu_models(table.text(row, "gpu_spec")) if num_gpu else (),
        creation=table.seconds(row, "creation_time"),
        deletion=table.seconds(row, "deletion_time"),
        scheduled=table.seconds(row, "scheduled_time"),
    )


def _gpu_models(spec: str) -> tuple[str, ...]:
    """ "V100M16|V100M32|V100M32" -> ("V100M16", "V100M32"), sanitised like the node label."""
    models: list[str] = []
    for part in spec.split("|"):
        model = sanitize_label_value(part)
        if model and model not in models:
            models.append(model)
    return tuple(models)


def drop_fractional(table: PodTable, skip: bool) -> tuple[list[TracePod], int]:
    """The pods to import and how many fractional ones were left out. Shares of one GPU are kept (they
    become phalanx.dev/gpu-share) unless `skip`; a fractional share of several GPUs is refused."""
    fractional = [pod for pod in table.pods if pod.fractional]
    if skip:
        return [pod for pod in table.pods if not pod.fractional], len(fractional)
    multi = [pod for pod in fractional if pod.num_gpu > 1]
    if multi:
        first = multi[0]
        raise TraceError(
            f"{table.path}: line {first.line}: pod {first.name!r} asks for {first.gpu_milli}/1000 of each of "
            f"{first.num_gpu} GPUs; a share of several GPUs has no faithful form (a share is of one GPU). "
            f"{len(multi)} such pods: re-run with --skip-fractional to leave fractional pods out"
        )
    return list(table.pods), 0


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


# ---------------------------------------------------------------- the import


@dataclass(slots=True)
class ImportResult:
    workload: Workload
    rows: int  # pod rows in the file
    skipped_fractional: int


def import_openb(nodes_path: Path, pods_path: Path, options: ImportOptions = ImportOptions()) -> ImportResult:
    if not is_dns_label(options.namespace):
        raise TraceError(f"--namespace {options.namespace!r} is not a valid namespace name (RFC 1123 label)")
    nodes = read_nodes(nodes_path)
    table = read_pods(pods_path)
    pods, skipped = drop_fractional(table, options.skip_fractional)
    cluster_gpus = sum(node.gpus for node in nodes)
    arrived = schedule_arrivals(table, pods, options.arrival, cluster_gpus)
    gangs = form_gangs(arrived, options.gang_rule)
    shapes = [_pod_shape(item, gang, options.namespace) for item, gang in zip(arrived, gangs)]
    header = _header(nodes_path, pods_path, options, len(nodes), cluster_gpus, len(table.pods), len(shapes), skipped)
    return ImportResult(
        workload=Workload(nodes=nodes, pods=shapes, header=header), rows=len(table.pods), skipped_fractional=skipped
    )


def _pod_shape(item: Arrived, gang: GangRef | None, namespace: str) -> PodShape:
    pod = item.pod
    return PodShape(
        name=item.name,
        namespace=namespace,
        arrival=item.at,
        cpu=f"{pod.cpu_milli}m",
        memory=f"{pod.memory_mib}Mi",
        gpus=0 if pod.fractional else pod.num_gpu,
        gpu_share_milli=pod.gpu_milli if pod.fractional else 0,
        gpu_models=pod.gpu_models,
        duration=item.duration,
        gang=gang,
    )


def _header(
    nodes_path: Path,
    pods_path: Path,
    options: ImportOptions,
    nodes: int,
    gpus: int,
    rows: int,
    pods: int,
    skipped: int,
) -> list[str]:
    skipped_text = f"{skipped} fractional-GPU pods skipped (--skip-fractional)" if skipped else "0 fractional-GPU pods"
    return [
        "Phalanx workload generated by `phalanx trace import openb` (Alibaba cluster-trace-gpu-v2023).",
        f"nodes: {nodes_path} ({nodes} nodes, {gpus} GPUs)",
        f"pods: {pods_path} ({rows} rows -> {pods} pods; {skipped_text})",
        f"arrival: {options.arrival.describe()}; gang rule: {options.gang_rule.describe()}",
        f"time 0 = {BASE_TIME:%Y-%m-%dT%H:%M:%SZ}; creationTimestamp = time 0 + arrival seconds",
    ]
