"""Shared YAML emission for generated workloads (`phalanx trace import ...`, `phalanx trace synthetic`).

A workload is a list of node shapes and pod shapes (the small dataclasses below); `write_workload` turns
them into a multi-document stream of v1 Node and v1 Pod objects for `phalanx simulate -f FILE`:

- Every object gets ``metadata.creationTimestamp = BASE_TIME + arrival seconds`` (RFC 3339, UTC, with
  milliseconds only when needed, e.g. ``2026-01-01T00:00:05.250Z``). Nodes arrive at 0, so they exist
  before the first pod; the simulator takes the earliest timestamp as time 0.
- A pod with a duration carries ``simulation.phalanx.dev/duration: "<seconds>s"``; without one it never
  finishes.
- Gang members carry the Koordinator annotations (name, min-available, total-number).

Documents are produced and written one at a time by a small block-style emitter (see `dump_objects`), so
10k pods take a fraction of a second; the output reads back with any YAML loader.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import Any, TextIO

import yaml

from phalanx.model import keys
from phalanx.model.gpu import GPU

# Fixed, documented origin of generated timestamps: trace second t is BASE_TIME + t.
BASE_TIME = datetime(2026, 1, 1, tzinfo=timezone.utc)

GPU_SHARE_RESOURCE = "phalanx.dev/gpu-share"  # a share of one GPU; see libs/phalanx/plugins/gpu_share.py
GPU_MODEL_LABEL = "phalanx.dev/gpu-model"
DEFAULT_MAX_PODS = 110
PAUSE_IMAGE = "registry.k8s.io/pause:3.9"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class TraceError(ValueError):
    """Bad input to a trace command; its message is shown to the user as is."""


@dataclass(frozen=True, slots=True)
class NodeTaint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class NodeShape:
    name: str
    cpu: str  # Kubernetes quantity, e.g. "64000m"
    memory: str  # Kubernetes quantity, e.g. "262144Mi"
    gpus: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[NodeTaint, ...] = ()
    max_pods: int = DEFAULT_MAX_PODS


@dataclass(frozen=True, slots=True)
class GangRef:
    name: str  # RFC 1123 label
    min_available: int
    total_number: int


@dataclass(slots=True)
class PodShape:
    name: str
    namespace: str
    arrival: float  # seconds after BASE_TIME
    cpu: str
    memory: str
    gpus: int = 0  # whole GPUs
    gpu_share_milli: int = 0  # a share of one GPU, in thousandths (phalanx.dev/gpu-share)
    gpu_models: tuple[str, ...] = ()  # accepted phalanx.dev/gpu-model values; empty: any
    duration: float | None = None  # seconds it runs once started; None: never finishes
    gang: GangRef | None = None
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Workload:
    nodes: list[NodeShape]
    pods: list[PodShape]
    header: list[str] = field(default_factory=list)  # lines of the leading YAML comment


@dataclass(frozen=True, slots=True)
class WorkloadStats:
    nodes: int
    node_gpus: int
    pods: int
    pod_gpus: int
    gangs: int
    gang_pods: int


# ---------------------------------------------------------------- names and values


def positive_number(text: str, message: str, kind: type[int] | type[float]) -> Any:
    """`text` as a finite number > 0 of `kind` (int: >= 1), else TraceError(message)."""
    try:
        value = kind(text)
    except ValueError:
        raise TraceError(message) from None
    if not 0 < value < float("inf"):
        raise TraceError(message)
    return value


def sanitize_label_value(raw: str) -> str:
    """Map free text (a GPU model name) to a valid label value: invalid runs become '-', at most 63 chars."""
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", raw.strip())
    value = value[:63].strip("-_.")
    return value


def sanitize_name(raw: str) -> str:
    """Map free text to a DNS-1123 subdomain (what pod and node names must be); '' when nothing is left."""
    if _DNS_SUBDOMAIN.match(raw) and len(raw) <= 253:
        return raw
    value = re.sub(r"[^a-z0-9.-]+", "-", raw.strip().lower())
    value = re.sub(r"\.{2,}", ".", value)
    return value[:253].strip("-.")


def is_dns_label(value: str) -> bool:
    return len(value) <= 63 and bool(_DNS_LABEL.match(value))


def format_timestamp(seconds: float) -> str:
    """RFC 3339 UTC for BASE_TIME + seconds, milliseconds only when non-zero."""
    millis = round(seconds * 1000)
    moment = BASE_TIME + timedelta(milliseconds=millis)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if millis % 1000:
        text += f".{millis % 1000:03d}"
    return text + "Z"


def format_duration(seconds: float) -> str:
    """A Go-style duration in seconds ("30s", "1.5s") as the simulator's annotation expects."""
    millis = round(seconds * 1000)
    whole, frac = divmod(millis, 1000)
    if not frac:
        return f"{whole}s"
    return f"{whole}.{frac:03d}".rstrip("0") + "s"


# ---------------------------------------------------------------- objects


def node_object(node: NodeShape) -> dict[str, Any]:
    resources: dict[str, str] = {"cpu": node.cpu, "memory": node.memory}
    if node.gpus:
        resources[GPU] = str(node.gpus)
    resources["pods"] = str(node.max_pods)
    labels = {"kubernetes.io/hostname": node.name, **node.labels}
    spec: dict[str, Any] = {}
    if node.taints:
        spec["taints"] = [
            {"key": t.key, **({"value": t.value} if t.value else {}), "effect": t.effect} for t in node.taints
        ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "creationTimestamp": format_timestamp(0), "labels": labels},
        "spec": spec,
        "status": {"capacity": dict(resources), "allocatable": resources},
    }


def pod_annotations(pod: PodShape) -> dict[str, str]:
    annotations = dict(pod.annotations)
    if pod.gang is not None:
        annotations[keys.KOORD_NAME] = pod.gang.name
        annotations[keys.KOORD_MIN_AVAILABLE] = str(pod.gang.min_available)
        annotations[keys.KOORD_TOTAL_NUMBER] = str(pod.gang.total_number)
    if pod.duration is not None:
        annotations[keys.SIM_DURATION] = format_duration(pod.duration)
    return annotations


def pod_object(pod: PodShape) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": pod.cpu, "memory": pod.memory}
    container: dict[str, Any] = {"name": "main", "image": PAUSE_IMAGE, "resources": {"requests": requests}}
    if pod.gpus:
        requests[GPU] = str(pod.gpus)
        # Extended resources must have limits equal to requests in a valid Pod.
        container["resources"]["limits"] = {GPU: str(pod.gpus)}
    elif pod.gpu_share_milli:
        share = f"{pod.gpu_share_milli}m"
        requests[GPU_SHARE_RESOURCE] = share
        container["resources"]["limits"] = {GPU_SHARE_RESOURCE: share}
    metadata: dict[str, Any] = {
        "name": pod.name,
        "namespace": pod.namespace,
        "creationTimestamp": format_timestamp(pod.arrival),
    }
    annotations = pod_annotations(pod)
    if annotations:
        metadata["annotations"] = annotations
    spec: dict[str, Any] = {"schedulerName": keys.DEFAULT_SCHEDULER_NAME, "containers": [container]}
    if pod.gpu_models:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": GPU_MODEL_LABEL, "operator": "In", "values": list(pod.gpu_models)}
                            ]
                        }
                    ]
                }
            }
        }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def workload_objects(workload: Workload) -> Iterator[dict[str, Any]]:
    for node in workload.nodes:
        yield node_object(node)
    for pod in workload.pods:
        yield pod_object(pod)


# ---------------------------------------------------------------- stats and output


def workload_stats(workload: Workload) -> WorkloadStats:
    gangs = {pod.gang.name for pod in workload.pods if pod.gang is not None}
    return WorkloadStats(
        nodes=len(workload.nodes),
        node_gpus=sum(node.gpus for node in workload.nodes),
        pods=len(workload.pods),
        pod_gpus=sum(pod.gpus for pod in workload.pods),
        gangs=len(gangs),
        gang_pods=sum(1 for pod in workload.pods if pod.gang is not None),
    )


def check_unique_names(workload: Workload) -> None:
    """The simulator keys objects by name: duplicates would silently replace each other."""
    seen: set[str] = set()
    for node in workload.nodes:
        if node.name in seen:
            raise TraceError(f"duplicate node name {node.name!r}")
        seen.add(node.name)
    seen_pods: set[tuple[str, str]] = set()
    for pod in workload.pods:
        key = (pod.namespace, pod.name)
        if key in seen_pods:
            raise TraceError(f"duplicate pod name {pod.namespace}/{pod.name}")
        seen_pods.add(key)


def dump_objects(objects: Iterable[dict[str, Any]], stream: TextIO) -> None:
    """Stream each object as a block-style YAML document.

    PyYAML's representer (Python even under CSafeDumper) took ~2 s for the 6k objects of the openb trace,
    so this small emitter formats the plain dicts/lists/strings of our objects itself; scalars are left
    plain only when PyYAML's own resolver would read them back as the same string.
    """
    for obj in objects:
        lines = ["---"]
        _emit_mapping(obj, "", lines)
        stream.write("\n".join(lines))
        stream.write("\n")


def _emit_mapping(mapping: Mapping[str, Any], pad: str, lines: list[str]) -> None:
    for key, value in mapping.items():
        head = f"{pad}{_scalar(str(key))}:"
        if isinstance(value, Mapping):
            if value:
                lines.append(head)
                _emit_mapping(value, pad + "  ", lines)
            else:
                lines.append(head + " {}")
        elif isinstance(value, list):
            if value:
                lines.append(head)
                _emit_sequence(value, pad, lines)
            else:
                lines.append(head + " []")
        else:
            lines.append(f"{head} {_scalar(str(value))}")


def _emit_sequence(items: list[Any], pad: str, lines: list[str]) -> None:
    for item in items:
        if isinstance(item, Mapping) and item:
            start = len(lines)
            _emit_mapping(item, pad + "  ", lines)
            lines[start] = f"{pad}- {lines[start][len(pad) + 2 :]}"  # the first key shares the dash's line
        elif isinstance(item, (Mapping, list)):
            raise TypeError("nested empty collections in sequences are not emitted")  # never produced here
        else:
            lines.append(f"{pad}- {_scalar(str(item))}")


_PLAIN_CANDIDATE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9./_-]*$")
# Numbers to YAML 1.2 loaders (Go's, ruamel) that PyYAML's 1.1 resolver reads as strings, e.g. "1e3", "0o17".
_YAML12_NUMBER = re.compile(r"^(?:[-+]?(?:\.\d+|\d+(?:\.\d*)?)(?:[eE][-+]?\d+)?|0[xo][0-9a-fA-F]+)$")
_STR_TAG = "tag:yaml.org,2002:str"
_RESOLVER = yaml.resolver.Resolver()


@lru_cache(maxsize=65536)
def _scalar(value: str) -> str:
    if (
        _PLAIN_CANDIDATE.match(value)
        and not _YAML12_NUMBER.match(value)
        and _RESOLVER.resolve(yaml.ScalarNode, value, (True, False)) == _STR_TAG
    ):
        return value
    # A JSON string is a valid YAML double-quoted scalar (same escapes), and json.dumps is C-fast.
    return json.dumps(value, ensure_ascii=False)


def write_workload(workload: Workload, stream: TextIO) -> WorkloadStats:
    """Write the header comment then every object; returns what was written."""
    check_unique_names(workload)
    for line in workload.header:
        stream.write(f"# {line}\n" if line else "#\n")
    dump_objects(workload_objects(workload), stream)
    return workload_stats(workload)


def write_workload_file(workload: Workload, path: str, stdout: TextIO) -> WorkloadStats:
    """Write to `path` ("-" for stdout) via a temporary file, so a failure never leaves half a workload."""
    if path == "-":
        return write_workload(workload, stdout)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".phalanx-trace-", suffix=".yaml", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            stats = write_workload(workload, handle)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a workload file is ordinary data
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return stats
