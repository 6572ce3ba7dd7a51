"""The gang scheduler in process over a real Redis, for the unit tests of the gang rules: the queue and the
binder as local objects, the simulated backend recording binds, annotations, conditions and Events in Redis;
and the model objects those tests feed it (milli-units, as intake produces them)."""

from __future__ import annotations

import json

from phalanx.backends.simulated import SimulatedBackend
from phalanx.binding.batch_binder import BatchBinder
from phalanx.binding.lock import FencedLock
from phalanx.model.objects import GangMode, GangSpec, NodeInfo, PodInfo
from phalanx.plugins.registry import in_tree_framework
from phalanx.queueing.scheduling_queue import QueueSettings, SchedulingQueue
from phalanx.scheduling.scheduler import GangScheduler, SchedulerSettings
from phalanx.state.store import StateStore, decoded
from phalanx.testing.in_process import LocalBinder, LocalQueue

GPU = "nvidia.com/gpu"


def model_node(name: str, *, gpus: int = 0, cpu: int = 64) -> NodeInfo:
    """A node of `cpu` cores, 256 GiB, 110 pods and `gpus` whole GPUs, labelled with its hostname."""
    alloc = {"cpu": cpu * 1000, "memory": 256 * 2**30 * 1000, "pods": 110_000}
    if gpus:
        alloc[GPU] = gpus * 1000
    return NodeInfo(name, alloc, {"kubernetes.io/hostname": name})


def model_pod(name: str, gang: str = "", *, gpus: int = 0, ns: str = "default", created: float = 0.0) -> PodInfo:
    """A one-core pod of gang `ns/gang` (none when empty), asking `gpus` whole GPUs."""
    req = {"cpu": 1000, "pods": 1000}
    if gpus:
        req[GPU] = gpus * 1000
    return PodInfo(ns, name, uid=name, created_at=created, requests=req, gang=f"{ns}/{gang}" if gang else "",
                   gang_created_at=created)


def gang_spec(name: str, min_available: int, total: int | None = None, mode: GangMode = GangMode.STRICT,
              wait: float | None = 20.0, groups: tuple[str, ...] = (), ns: str = "default") -> GangSpec:
    return GangSpec(ns, name, min_available, total or min_available, mode, groups, wait)


class LocalScheduler:
    """`sched` with its `queue` and `binder`; `binder_type` lets a test record what the binder is told."""

    def __init__(self, store: StateStore, binder_type: type[LocalBinder] = LocalBinder,
                 default_wait: float = 60) -> None:
        self.store = store
        self.queue = LocalQueue(SchedulingQueue(QueueSettings(unschedulable_flush=0)))
        backend = SimulatedBackend(store.redis, store.keys)
        self.binder = binder_type(BatchBinder(store, backend, FencedLock(store.redis, store.keys)), backend)
        self.sched = GangScheduler(store, self.queue, self.binder, in_tree_framework(),
                                   SchedulerSettings(default_wait_seconds=default_wait))

    def bound(self) -> dict[str, str]:
        """pod -> node, as the simulated cluster recorded the bindings."""
        return {json.loads(x)["pod"]: json.loads(x)["node"] for x in self.store.redis.lrange(self.store.keys.sim_binds, 0, -1)}

    def annotations(self) -> dict[str, dict[str, str]]:
        return {k: json.loads(v) for k, v in self.store.redis.hgetall(self.store.keys.sim_annotations).items()}

    def conditions(self) -> dict[str, str]:
        return decoded(self.store.redis.hgetall(self.store.keys.sim_conditions))
