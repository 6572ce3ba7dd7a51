"""Reads a simulation's input: multi-document YAML of Kubernetes objects, each appearing at its
metadata.creationTimestamp (time 0 is the earliest; objects without one appear at 0).

A document that cannot be parsed, or an object of a kind the simulator does not know, becomes an error
naming the file and document; every other document still loads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

import yaml

from phalanx.intake.errors import quoted
from phalanx.intake.gang_kinds import GANG_OBJECT_KINDS
from phalanx.jobs.api import JobSpecError
from phalanx.sim.jobs import SimJob, expand

try:  # the C loader is several times faster on large traces
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover
    from yaml import SafeLoader as _Loader

KINDS = {"Node", "Pod", *GANG_OBJECT_KINDS, "PhalanxJob"}  # a PhalanxJob becomes its pods (sim/jobs.py)
# Fields of a pod the simulator reads itself, before the intake: their shape is checked here, so a
# `metadata: {annotations: "foo"}` is reported like any bad input instead of crashing the run.
_POD_MAPPINGS = (("metadata", "annotations"), ("spec",))
_SEPARATOR = re.compile(r"^---(?:[ \t].*)?$", re.MULTILINE)


@dataclass
class WorkloadObject:
    kind: str
    obj: dict[str, Any]
    at: float  # virtual seconds
    origin: str  # "file.yaml#3" (document index from 1)

    @property
    def name(self) -> str:
        return str((self.obj.get("metadata") or {}).get("name", ""))

    @property
    def namespace(self) -> str:
        return str((self.obj.get("metadata") or {}).get("namespace") or "default")

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def describe(self) -> str:
        if self.kind == "Node":
            return f"Node {self.name}"
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass
class Workload:
    objects: list[WorkloadObject] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    epoch: float = 0.0  # the unix time that virtual time 0 stands for
    jobs: list[SimJob] = field(default_factory=list)  # the PhalanxJobs read, whose pods are among `objects`


def _timestamp(value: Any) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    text = str(value).strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    return datetime.fromisoformat(text).timestamp()


def _shape_error(wo: WorkloadObject) -> str:
    """Why a pod cannot even be looked at (a mapping field that is not a mapping), else ""."""
    if wo.kind != "Pod":
        return ""  # other kinds are read only by the intake, which names such fields itself
    for path in _POD_MAPPINGS:
        value: Any = wo.obj
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None and not isinstance(value, dict):
            return f"{'.'.join(path)}: expected a mapping, got {type(value).__name__}"
    return ""


def _job_objects(w: Workload, item: dict[str, Any], origin: str) -> list[tuple[WorkloadObject, float | None]]:
    """A PhalanxJob's PodGroup and pods, as phalanx-controller creates them; a job it would refuse is an
    error naming the field."""
    name = f"PhalanxJob {(item.get('metadata') or {}).get('namespace') or 'default'}/{(item.get('metadata') or {}).get('name')}"
    try:
        job, created = expand(item)
    except JobSpecError as exc:
        w.errors.append(f"{origin}: {name}: {exc}; skipped")
        return []
    try:
        ts = _timestamp((item.get("metadata") or {}).get("creationTimestamp"))
    except ValueError:
        w.errors.append(f"{origin}: {name}: metadata.creationTimestamp is not an RFC 3339 time; it appears at 0")
        ts = None
    w.jobs.append(job)
    return [(WorkloadObject(str(o["kind"]), o, 0.0, origin), ts) for o in created]


def _documents(text: str) -> list[str]:
    """Splits on document separators before parsing, so one broken document does not hide the rest."""
    parts = _SEPARATOR.split(text)
    return [
        p
        for p in parts
        if p.strip() and not all(line.lstrip().startswith("#") or not line.strip() for line in p.splitlines())
    ]


def _parse_documents(text: str) -> list[Callable[[], Any]]:
    """One thunk per document. The whole stream is parsed at once when it is valid (fast); when it is
    not, each document is parsed on its own, so one broken document does not hide the rest."""
    try:
        docs = [d for d in yaml.load_all(text, Loader=_Loader) if d is not None]
        return [lambda d=d: d for d in docs]  # type: ignore[misc]
    except yaml.YAMLError:
        return [lambda doc=doc: yaml.load(doc, Loader=_Loader) for doc in _documents(text)]  # type: ignore[misc]


def load_workload(paths: list[str | Path]) -> Workload:
    w = Workload()
    stamped: list[tuple[WorkloadObject, float | None]] = []
    for path in paths:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            w.errors.append(f"{path}: cannot read: {exc.strerror or exc}")
            continue
        for index, parsed in enumerate(_parse_documents(text), start=1):
            origin = f"{path}#{index}"
            try:
                obj = parsed()
            except yaml.YAMLError as exc:
                mark = getattr(exc, "problem_mark", None)
                where = f" (line {mark.line + 1} of the document)" if mark is not None else ""
                problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
                w.errors.append(f"{origin}: not valid YAML{where}: {problem}")
                continue
            if obj is None:
                continue
            if not isinstance(obj, dict):
                w.errors.append(f"{origin}: expected a Kubernetes object (a mapping), got {type(obj).__name__}")
                continue
            if obj.get("kind") == "List" and isinstance(obj.get("items"), list):
                items = obj["items"]
            else:
                items = [obj]
            for item in items:
                kind = item.get("kind") if isinstance(item, dict) else None
                if not isinstance(kind, str) or kind not in KINDS:
                    w.errors.append(
                        f"{origin}: kind {quoted(kind)} is not simulated (expected one of "
                        f"{', '.join(sorted(KINDS))}); skipped"
                    )
                    continue
                meta = item.get("metadata")
                if not isinstance(meta, dict) or not meta.get("name"):
                    w.errors.append(f"{origin}: {kind} without metadata.name; skipped")
                    continue
                if kind == "PhalanxJob":
                    stamped.extend(_job_objects(w, item, origin))
                    continue
                wo = WorkloadObject(kind, item, 0.0, origin)
                shape = _shape_error(wo)
                if shape:
                    w.errors.append(f"{origin}: {wo.describe()}: {shape}; skipped")
                    continue
                try:
                    ts = _timestamp(meta.get("creationTimestamp"))
                except ValueError:
                    w.errors.append(
                        f"{origin}: {wo.describe()}: metadata.creationTimestamp "
                        f"{meta.get('creationTimestamp')!r} is not an RFC 3339 time; it appears at 0"
                    )
                    ts = None
                stamped.append((wo, ts))
    times = [ts for _, ts in stamped if ts is not None]
    w.epoch = min(times) if times else 0.0
    for wo, ts in stamped:
        wo.at = 0.0 if ts is None else round(ts - w.epoch, 6)
        w.objects.append(wo)
    arrivals = {(o.namespace, o.name): o.at for o in w.objects if o.kind == "PodGroup"}
    for job in w.jobs:
        job.arrival = arrivals.get((job.namespace, job.name), 0.0)
    # Stable order: by time, then nodes and gang objects before pods, then file order.
    rank = {"Node": 0, **dict.fromkeys(GANG_OBJECT_KINDS, 1), "Pod": 2}
    w.objects.sort(key=lambda o: (o.at, rank[o.kind]))
    return w
