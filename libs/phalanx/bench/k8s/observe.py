"""What bench-k8s sees of a run: three watches timing each binding and status write, and the final check.

The watches (phalanx.kube.watch, with each event's arrival time) follow the pods (bindings and their
PodScheduled condition), the `Scheduled` Events and the PodGroups (the status saying a gang is scheduled).
The check reads a final LIST: every expected pod bound, no partial gang, no node over its allocatable.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from phalanx.bench.k8s.kubeapi import lister
from phalanx.bench.k8s.workloads import EVENTS_PATH, PG_GROUP, PG_LABEL, PG_VERSION, PODGROUPS_PATH, PODS_PATH
from phalanx.kube.api import KubeApi
from phalanx.kube.watch import Collection, Watcher
from phalanx.model.gpu import GPU


@dataclass
class Observed:
    lock: threading.Lock = field(default_factory=threading.Lock)
    bound: dict[str, float] = field(default_factory=dict)  # pod -> time its nodeName was first seen
    node_of: dict[str, str] = field(default_factory=dict)
    condition: dict[str, float] = field(default_factory=dict)  # pod -> PodScheduled=True first seen
    event: dict[str, float] = field(default_factory=dict)  # pod -> `Scheduled` Event first seen
    event_sources: set[str] = field(default_factory=set)
    podgroup: dict[str, float] = field(default_factory=dict)  # gang -> status saying it is scheduled
    podgroup_writes: int = 0  # status changes seen on any PodGroup

    def on_pod(self, t: float, collection: str, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        node = (obj.get("spec") or {}).get("nodeName")
        conds = (obj.get("status") or {}).get("conditions") or []
        with self.lock:
            if node and name not in self.bound:
                self.bound[name] = t
                self.node_of[name] = node
            if name not in self.condition and any(
                c.get("type") == "PodScheduled" and c.get("status") == "True" for c in conds
            ):
                self.condition[name] = t

    def on_event(self, t: float, collection: str, kind: str, obj: dict[str, Any]) -> None:
        if obj.get("reason") != "Scheduled":
            return
        involved = obj.get("involvedObject") or {}
        if involved.get("kind") != "Pod":
            return
        with self.lock:
            self.event.setdefault(involved.get("name", ""), t)
            source = obj.get("reportingComponent") or (obj.get("source") or {}).get("component") or ""
            self.event_sources.add(source)

    def on_podgroup(self, t: float, collection: str, kind: str, obj: dict[str, Any]) -> None:
        status = obj.get("status") or {}
        if kind != "MODIFIED" or not status:
            return
        name = obj["metadata"]["name"]
        min_member = int((obj.get("spec") or {}).get("minMember") or 1)
        with self.lock:
            self.podgroup_writes += 1
            if name not in self.podgroup and (
                status.get("phase") in ("Scheduled", "Running", "Finished")
                or int(status.get("scheduled") or 0) >= min_member
            ):
                self.podgroup[name] = t


class Watches:
    """The three watches of a run, feeding `seen`; each lists its collection first (before the launch)."""

    def __init__(self, api: KubeApi, seen: Observed) -> None:
        self.stop_event = threading.Event()
        watched = [
            (Collection("pods", lister(api, PODS_PATH), "Pod", "v1"), seen.on_pod),
            (
                Collection(
                    "events", lister(api, EVENTS_PATH), "Event", "v1", kwargs={"field_selector": "reason=Scheduled"}
                ),
                seen.on_event,
            ),
            (
                Collection("podgroups", lister(api, PODGROUPS_PATH), "PodGroup", f"{PG_GROUP}/{PG_VERSION}"),
                seen.on_podgroup,
            ),
        ]
        # One watch request each for the whole run: one that ended inside the measured window would be counted
        # among the schedulers' API requests.
        self.watchers = [Watcher(c, None, self.stop_event, timed_sink=sink, watch_timeout=3600) for c, sink in watched]

    def start(self, timeout: float = 60.0) -> None:
        """Starts them; returns once each has listed (its watch is being opened)."""
        for w in self.watchers:
            w.start()
        for w in self.watchers:
            if not w.synced.wait(timeout):
                raise TimeoutError(f"watch of {w.collection.name}: no list after {timeout:g}s")

    def stop(self) -> None:
        self.stop_event.set()
        for w in self.watchers:
            w.interrupt()
        for w in self.watchers:
            w.join(5)

    def errors(self) -> list[str]:
        return [f"watch {w.collection.name}: {w.last_error}" for w in self.watchers if w.last_error]


def _cpu_milli(q: str) -> int:
    q = str(q)
    if q.endswith("m"):
        return int(q[:-1])
    return int(float(q) * 1000)


_BIN_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def _bytes(q: str) -> int:
    q = str(q)
    for suffix, mult in _BIN_SUFFIX.items():
        if q.endswith(suffix):
            return int(float(q[: -len(suffix)]) * mult)
    return int(float(q))


def correctness(
    pods: list[dict[str, Any]], nodes: list[dict[str, Any]], gangs: dict[str, int], expected: int
) -> dict[str, Any]:
    alloc: dict[str, dict[str, int]] = {}
    for n in nodes:
        a = (n.get("status") or {}).get("allocatable") or {}
        alloc[n["metadata"]["name"]] = {
            "cpu": _cpu_milli(a.get("cpu", "0")),
            "memory": _bytes(a.get("memory", "0")),
            "pods": int(a.get("pods", "0")),
            "gpu": int(a.get(GPU, "0")),
        }
    used: dict[str, dict[str, int]] = {}
    per_gang: dict[str, int] = {g: 0 for g in gangs}
    bound = 0
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        if not node:
            continue
        bound += 1
        gang = ((p.get("metadata") or {}).get("labels") or {}).get(PG_LABEL)
        if gang:
            per_gang[gang] = per_gang.get(gang, 0) + 1
        u = used.setdefault(node, {"cpu": 0, "memory": 0, "pods": 0, "gpu": 0})
        for c in p["spec"].get("containers") or []:
            req = (c.get("resources") or {}).get("requests") or {}
            u["cpu"] += _cpu_milli(req.get("cpu", "0"))
            u["memory"] += _bytes(req.get("memory", "0"))
            u["gpu"] += int(req.get(GPU, "0"))
        u["pods"] += 1
    over = sorted(
        n
        for n, u in used.items()
        if n not in alloc or any(u[k] > alloc[n][k] for k in ("cpu", "memory", "pods", "gpu"))
    )
    partial = sorted(g for g, c in per_gang.items() if 0 < c < gangs[g])
    return {
        "pods_bound": bound,
        "pods_expected": expected,
        "expected_bound": bound == expected,
        "gangs_total": len(gangs),
        "gangs_bound": sum(1 for g, c in per_gang.items() if c >= gangs[g]),
        "partial_gangs": len(partial),
        "partial_gang_names": partial[:10],
        "overcommitted_nodes": len(over),
        "overcommitted_node_names": over[:10],
        "ok": bound == expected and not partial and not over,
    }
