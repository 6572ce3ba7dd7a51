"""The gang scheduler in process over a real Redis, for the unit tests of the gang rules: the queue and the
binder as local objects, the simulated backend recording binds, annotations, conditions and Events in Redis.
The model objects those tests feed it come from tests/builders.py."""

from __future__ import annotations

import json

from phalanx.backends.simulated import SimulatedBackend
from phalanx.binding.batch_binder import BatchBinder
from phalanx.binding.lock import FencedLock
from phalanx.plugins.registry import in_tree_framework
from phalanx.queueing.scheduling_queue import QueueSettings, SchedulingQueue
from phalanx.scheduling.scheduler import GangScheduler, SchedulerSettings
from phalanx.state.store import StateStore, decoded
from phalanx.testing.in_process import LocalBinder, LocalQueue


class LocalScheduler:
    """`sched` with its `queue` and `binder`; `binder_type` lets a test record what the binder is told."""

    def __init__(
        self, store: StateStore, binder_type: type[LocalBinder] = LocalBinder, default_wait: float = 60
    ) -> None:
        self.store = store
        self.queue = LocalQueue(SchedulingQueue(QueueSettings(unschedulable_flush=0)))
        backend = SimulatedBackend(store.redis, store.keys)
        self.binder = binder_type(BatchBinder(store, backend, FencedLock(store.redis, store.keys)), backend)
        self.sched = GangScheduler(
            store, self.queue, self.binder, in_tree_framework(), SchedulerSettings(default_wait_seconds=default_wait)
        )

    def bound(self) -> dict[str, str]:
        """pod -> node, as the simulated cluster recorded the bindings."""
        return {
            json.loads(x)["pod"]: json.loads(x)["node"]
            for x in self.store.redis.lrange(self.store.keys.sim_binds, 0, -1)
        }

    def annotations(self) -> dict[str, dict[str, str]]:
        return {k: json.loads(v) for k, v in self.store.redis.hgetall(self.store.keys.sim_annotations).items()}

    def conditions(self) -> dict[str, str]:
        return decoded(self.store.redis.hgetall(self.store.keys.sim_conditions))
