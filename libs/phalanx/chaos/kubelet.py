"""A stand-in kubelet: bound pods are marked Running, and a gang runs for its planned time and then ends
(its pods deleted, or marked Succeeded). The pods have no containers, so this is only API writes.

`Kubelet.observe` decides from a snapshot (pure, testable); `ApiWriter` carries the writes out on worker
threads so a slow write never delays the invariant checks. A pod's writes always go through the same
worker, in order, so a late "Running" can never overwrite "Succeeded".
"""

from __future__ import annotations

import logging
import queue
import threading
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from phalanx.chaos.snapshot import Snapshot
from phalanx.chaos.workload import GangPlan
from phalanx.model.status import PodPhase

log = logging.getLogger(__name__)

RUN, DELETE, SUCCEED = "run", "delete", "succeed"


@dataclass(frozen=True)
class Action:
    kind: str  # run | delete | succeed
    namespace: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class Kubelet:
    """gangs: the trial's plan (run time and how each gang ends). safety_seconds: a pod whose gang never
    got whole still ends this long after its own run time counted from its own binding."""

    gangs: dict[str, GangPlan]
    safety_seconds: float = 15.0
    # Delete Succeeded pods this long after they ended (a Job's TTL or the pod GC would); None keeps them.
    gc_seconds: float | None = None
    bound_at: dict[str, float] = field(default_factory=dict)  # pod key -> first seen bound
    gang_bound_at: dict[str, float] = field(default_factory=dict)  # gang key -> first seen whole
    _bound_count: dict[str, int] = field(default_factory=dict)  # gang key -> pods ever seen bound
    _run_sent: set[str] = field(default_factory=set)
    _end_sent: set[str] = field(default_factory=set)
    _succeeded_at: dict[str, float] = field(default_factory=dict)

    def observe(self, snap: Snapshot) -> list[Action]:
        actions: list[Action] = []
        for key, pod in snap.pods.items():
            if pod.node and key not in self.bound_at:
                self.bound_at[key] = snap.at
                self._bound_count[pod.gang] = count = self._bound_count.get(pod.gang, 0) + 1
                plan = self.gangs.get(pod.gang)
                if plan is not None and count >= plan.size:
                    self.gang_bound_at[plan.key] = snap.at
        for key, pod in snap.pods.items():
            if self.gc_seconds is not None and pod.terminated and not pod.deleting:
                ended = self._succeeded_at.setdefault(key, snap.at)
                if snap.at - ended >= self.gc_seconds and ("gc:" + key) not in self._end_sent:
                    self._end_sent.add("gc:" + key)
                    actions.append(Action(DELETE, pod.namespace, pod.name))
            if not pod.node or pod.deleting or pod.terminated:
                continue
            if key not in self._run_sent and pod.phase in ("", PodPhase.PENDING):
                self._run_sent.add(key)
                actions.append(Action(RUN, pod.namespace, pod.name))
            plan = self.gangs.get(pod.gang)
            if plan is None or key in self._end_sent:
                continue
            whole = self.gang_bound_at.get(plan.key)
            ends_at = (
                whole + plan.run_seconds
                if whole is not None
                else self.bound_at[key] + plan.run_seconds + self.safety_seconds
            )
            if snap.at >= ends_at:
                self._end_sent.add(key)
                actions.append(Action(DELETE if plan.finish_by_delete else SUCCEED, pod.namespace, pod.name))
        return actions


def finished_gangs(snap: Snapshot, gangs: Iterable[GangPlan], created: set[str]) -> set[str]:
    """Gangs whose pods have all been created and have all ended (gone or terminated)."""
    out = set()
    for plan in gangs:
        keys = [f"{plan.namespace}/{n}" for n in plan.pod_names()]
        if all(k in created for k in keys) and all(k not in snap.pods or snap.pods[k].terminated for k in keys):
            out.add(plan.key)
    return out


class ApiWriter:
    """Worker threads applying kubelet actions; a pod always maps to the same worker."""

    def __init__(self, make_core: Callable[[], Any], workers: int = 2) -> None:
        self._queues: list[queue.Queue[Action | None]] = [queue.Queue() for _ in range(workers)]
        self.errors = 0
        self.last_error = ""
        self._threads = [
            threading.Thread(target=self._work, args=(q, make_core()), name=f"kubelet-{i}", daemon=True)
            for i, q in enumerate(self._queues)
        ]
        for t in self._threads:
            t.start()

    def submit(self, actions: Iterable[Action]) -> None:
        for a in actions:
            self._queues[zlib.crc32(a.key.encode()) % len(self._queues)].put(a)

    def backlog(self) -> int:
        return sum(q.qsize() for q in self._queues)

    def close(self) -> None:
        for q in self._queues:
            q.put(None)
        for t in self._threads:
            t.join(10)

    def _work(self, q: queue.Queue[Action | None], core: Any) -> None:
        from kubernetes.client.rest import ApiException

        while True:
            action = q.get()
            if action is None:
                return
            try:
                apply_action(core, action)
            except ApiException as exc:
                if exc.status not in (404, 409, 422):  # gone, or already ended: nothing left to do
                    self.errors += 1
                    self.last_error = f"{action.kind} {action.key}: {exc.status} {exc.reason}"
            except Exception as exc:  # the API server is shared and never killed; keep going regardless
                self.errors += 1
                self.last_error = f"{action.kind} {action.key}: {exc}"


def apply_action(core: Any, action: Action) -> None:
    if action.kind == DELETE:
        core.delete_namespaced_pod(action.name, action.namespace, grace_period_seconds=0, _preload_content=False)
        return
    phase = PodPhase.RUNNING if action.kind == RUN else PodPhase.SUCCEEDED
    core.patch_namespaced_pod_status(
        action.name,
        action.namespace,
        {"status": {"phase": phase}},
        _content_type="application/merge-patch+json",
        _preload_content=False,
    )
