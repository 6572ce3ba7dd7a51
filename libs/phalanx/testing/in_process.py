"""In-process adapters of the scheduler's ports, for unit tests of the scheduling logic.

The services use the gRPC clients in phalanx.rpc.clients instead; both satisfy the same ports. Verdicts
reach the queue through phalanx.queueing.verdicts, as they do in the queue service.
"""

from __future__ import annotations

from phalanx.backends.base import ClusterBackend
from phalanx.binding.batch_binder import BatchBinder
from phalanx.model.binding import Assignment, BindResult, EvictResult, GangReport, PodReport, Victim
from phalanx.model.objects import PodInfo
from phalanx.model.policies import job_ordering
from phalanx.queueing.hints import FreedCapacity
from phalanx.queueing.scheduling_queue import SchedulingQueue
from phalanx.queueing.verdicts import PodVerdict, apply_verdicts
from phalanx.scheduling.ports import Carry, Popped, PopResult, Verdict


class LocalQueue:
    def __init__(self, queue: SchedulingQueue) -> None:
        self.queue = queue

    def add(self, pods: list[PodInfo], now: float, only_missing: bool = False) -> None:
        for p in pods:
            tenant, policy = job_ordering(p)
            self.queue.add(
                p.key,
                priority=p.priority,
                created_at=p.created_at,
                gang=p.gang,
                gang_created_at=p.gang_created_at,
                payload=Popped(p),
                now=now,
                only_missing=only_missing,
                tenant=tenant,
                queue_policy=policy,
            )

    def pop(self, max_pods: int, now: float, carry: Carry | None = None, wait_seconds: float = 0.0) -> PopResult:
        if carry is not None:
            if carry.shares or carry.share_capacity:
                self.queue.set_shares(carry.shares, carry.share_capacity)
            self.done(carry.verdicts, carry.activate, carry.failed, now)
            self.remove(carry.remove)
            self.add([item.pod for item in carry.add], now)
            if carry.move_all:
                self.queue.move_all(now)
            elif carry.freed:
                self.queue.move_all(now, carry.freed.events())
        items = [e.payload for e in self.queue.pop(max_pods, now)]
        return PopResult(items, self.queue.next_ready_at(), len(self.queue))

    def done(self, verdicts: list[Verdict], activate: list[str], failed: list[str], now: float) -> None:
        pods = (PodVerdict.of(v.item.pod.key, v.outcome, v.item.pod, v.item, v.hint) for v in verdicts)
        apply_verdicts(self.queue, pods, activate, failed, now)

    def remove(self, keys: list[str]) -> None:
        self.queue.remove(keys)

    def move_all(self, event: str, now: float, freed: FreedCapacity | None = None) -> None:
        self.queue.move_all(now, freed.events() if freed else None)

    def release_in_flight(self) -> int:
        return self.queue.release_in_flight(0.0)


class LocalBinder:
    def __init__(self, binder: BatchBinder, backend: ClusterBackend) -> None:
        self.binder = binder
        self.backend = backend

    def bind(self, assignments: list[Assignment], all_or_nothing: bool, now: float, trace: str) -> list[BindResult]:
        return self.binder.bind(assignments, all_or_nothing, now, trace)[0]

    def bind_many(self, batches: list[tuple[list[Assignment], bool, str]], now: float) -> list[list[BindResult]]:
        return [self.bind(a, aon, now, trace) for a, aon, trace in batches]

    def report(self, pods: list[PodReport], gangs: list[GangReport], now: float) -> None:
        self.backend.report(pods, gangs, now)

    def evict(self, victims: list[Victim], now: float) -> list[EvictResult]:
        return self.backend.evict(victims, now)
