"""Reading the openb trace's CSV files (phalanx.trace.openb describes their columns): node and pod rows,
each refused with an error naming the file, the line and the column.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from phalanx.trace.writer import (
    GPU_MODEL_LABEL,
    NodeShape,
    TraceError,
    sanitize_label_value,
    sanitize_name,
)

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
WHOLE_GPU_MILLI = 1000


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
