"""A simulation report (`phalanx simulate -o REPORT.json`) as a ClusterState, at the simulation's end.

The report says where each pod was bound, when it started and finished, and why an unbound one was not
placed (the scheduler's last condition message); its podGroups say each gang's bound count and minimum.
It does not hold the nodes or the pods' requests: those come from the workload the simulation ran
(`-f`, or the files the report names under `workload` when they still exist), read by the same intake,
with gangs resolved as the simulator resolved them.
Without the workload, gangs are listed from the report alone and capacity is not analysed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from phalanx.explain.view import ClusterState, Condition, Holder, PodState, SourceError
from phalanx.intake.errors import IntakeError
from phalanx.intake.gang_kinds import GANG_OBJECT_KINDS
from phalanx.intake.nodes import parse_node
from phalanx.intake.pods import parse_pod, scheduler_name
from phalanx.intake.resolver import GangResolver
from phalanx.model.keys import KOORD_TIMEOUT, SIM_DURATION
from phalanx.model.objects import NodeInfo
from phalanx.model.status import PodPhase
from phalanx.sim.workload import Workload, WorkloadObject, load_workload

# The scheduler starts every message about a gang with "gang <namespace>/<name>" (GangManager.describe).
_GANG_IN_MESSAGE = re.compile(r"^gang ([^\s:/]+/[^\s:]+)")
NO_WORKLOAD = "the report holds no nodes or pod requests; pass the workload it simulated with -f"


def read_report(path: str, workload_paths: list[str], scheduler: str, default_wait: float) -> ClusterState:
    data = _load(path)
    summary = data["summary"]
    if not workload_paths:  # the files the simulation read, when the report names them and they are still there
        named = data.get("workload")
        if isinstance(named, list) and named and all(isinstance(f, str) and Path(f).is_file() for f in named):
            workload_paths = list(named)
    state = ClusterState(
        clock="virtual",
        now=float(summary.get("virtualSeconds") or 0.0),
        source={
            "kind": "report",
            "report": path,
            "workload": list(workload_paths),
            **({} if workload_paths else {"capacityNote": NO_WORKLOAD}),
        },
        scheduler_name=scheduler,
        default_wait=default_wait,
        nodes=None,
    )
    entries = {f"{p.get('namespace')}/{p.get('name')}": p for p in data["pods"] if isinstance(p, dict)}
    if workload_paths:
        _from_workload(state, load_workload(list(workload_paths)), entries)
    else:
        _from_report_only(state, entries)
    for group in data["podGroups"]:
        key = f"{group.get('namespace')}/{group.get('name')}"
        gang = state.gang(key)
        # Timed out for good (phase Failed); a gang backing off to retry (phase Pending) still waits.
        gang.timed_out = bool(group.get("timedOut")) and group.get("phase") == "Failed"
        if not workload_paths:
            gang.min_member = int(group.get("minMember") or 0) or None
            gang.bound_count = int(group.get("bound") or 0)
    return state


def _load(path: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise SourceError(f"{path}: not JSON: {exc}") from None
    missing = [k for k in ("summary", "pods", "podGroups") if not isinstance(data, dict) or k not in data]
    if missing:
        raise SourceError(f"{path}: not a simulation report (no {', '.join(missing)}; made by `phalanx simulate -o`?)")
    return data


def _from_workload(state: ClusterState, w: Workload, entries: dict[str, dict[str, Any]]) -> None:
    state.errors.extend(w.errors)
    resolver = GangResolver(default_wait_seconds=None)
    nodes: list[NodeInfo] = []
    # Gang objects first: at the simulation's end every one of them existed, whatever its arrival.
    for obj in w.objects:
        try:
            if obj.kind == "Node":
                nodes.append(parse_node(obj.obj))
            elif obj.kind in GANG_OBJECT_KINDS and GangResolver.is_gang_object(obj.obj):
                resolver.add_object(obj.obj, created_at=obj.at)
        except IntakeError as exc:
            state.errors.append(f"{obj.origin}: {exc}")
    state.nodes = nodes
    for obj in (o for o in w.objects if o.kind == "Pod"):
        pod = _workload_pod(state, obj, w.epoch, entries.get(f"{obj.namespace}/{obj.name}") or {})
        state.pods.append(pod)
        if not pod.ours or pod.info is None:
            continue
        res = resolver.resolve(pod.info)
        if not res.gang_key:
            continue
        pod.gang = res.gang_key
        pod.holder = Holder("gang", res.gang_key)
        gang = state.gang(res.gang_key)
        gang.pods.append(pod)
        gang.error = gang.error or res.error
        gang.waiting_for = res.waiting_for if not res.spec else ""
        if res.spec is not None:
            gang.spec = res.spec


def _workload_pod(state: ClusterState, obj: WorkloadObject, epoch: float, entry: dict[str, Any]) -> PodState:
    pod = PodState(
        obj.namespace, obj.name, None, ours=scheduler_name(obj.obj) == state.scheduler_name, created_at=obj.at
    )
    try:
        pod.info = parse_pod(obj.obj, epoch=epoch)
    except IntakeError as exc:
        pod.error = str(exc)
        state.errors.append(f"{obj.origin}: {exc}")
    _apply_entry(pod, entry)
    if pod.info is not None and pod.started_at is not None and pod.info.duration is not None:
        pod.ends_at = pod.started_at + pod.info.duration
        pod.end_basis = SIM_DURATION
    return pod


def _apply_entry(pod: PodState, entry: dict[str, Any]) -> None:
    """What the simulation did with the pod: bound where and when, started, finished, or why not."""
    pod.node = str(entry.get("node") or "")
    pod.started_at = entry.get("startedAt")
    if entry.get("finishedAt") is not None:
        pod.phase = PodPhase.SUCCEEDED
    else:
        pod.phase = PodPhase.RUNNING if pod.started_at is not None else PodPhase.PENDING
    reason = entry.get("reason")
    if isinstance(reason, str) and reason and not pod.node:
        pod.condition = Condition(reason, "Unschedulable")
    pod.timed_out = (entry.get("annotations") or {}).get(KOORD_TIMEOUT) == "true"


def _from_report_only(state: ClusterState, entries: dict[str, dict[str, Any]]) -> None:
    """No workload: pods are known only by what the report says. A pod joins the gang the report names
    for it (reports that carry `gang`), else an unbound one the gang its scheduler message names."""
    for key, entry in sorted(entries.items()):
        namespace, _, name = key.partition("/")
        pod = PodState(namespace, name, None, ours=True)
        _apply_entry(pod, entry)
        state.pods.append(pod)
        match = _GANG_IN_MESSAGE.match(pod.condition.message) if pod.condition is not None else None
        named = entry.get("gang")
        gang_key = named if isinstance(named, str) and named else match.group(1) if match else ""
        if not gang_key:
            continue
        pod.gang = gang_key
        gang = state.gang(gang_key)
        gang.pods.append(pod)
