"""The embedded cluster's binder side: bindings, annotations, conditions and events kept in Redis.

Bindings are appended inside the binder's fenced commit, so a binding exists exactly when the state
says the pod is bound. The simulation driver reads them back to advance its virtual cluster.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import redis

from phalanx.backends.base import BindFailure
from phalanx.model.binding import Assignment, EvictResult, EvictStatus, GangReport, PodReport, Victim
from phalanx.state.keys import Keys
from phalanx.state.txn import Txn


class SimulatedBackend:
    name = "simulated"
    transactional = True

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis = client
        self.keys = keys

    def precheck(self, assignments: list[Assignment]) -> dict[str, BindFailure]:
        # Nothing to refuse: in the embedded cluster pods and nodes exist only as the scheduler's records, and
        # the commit already requires each pod reserved (by the scheduler) on the very node it is bound to.
        return {}

    def unreserved(self, a: Assignment, held: Mapping[str, int]) -> BindFailure | None:
        return None  # the embedded cluster's pods are the scheduler's records: nothing else to compare with

    def bind(self, assignments: list[Assignment], now: float, commit: Txn) -> dict[str, BindFailure]:
        for a in assignments:
            commit.sim_binds.append(json.dumps({"pod": a.pod_key, "node": a.node, "at": now}))
        return {}

    def report(self, pods: list[PodReport], gangs: list[GangReport], now: float) -> None:
        pipe = self.redis.pipeline(transaction=False)
        keys = [p.pod_key for p in pods if p.annotations]
        current = dict(zip(keys, self.redis.hmget(self.keys.sim_annotations, keys))) if keys else {}
        for p in pods:
            if p.annotations:
                merged = json.loads(current.get(p.pod_key) or "{}")
                merged.update(p.annotations)
                current[p.pod_key] = json.dumps(merged)
                pipe.hset(self.keys.sim_annotations, p.pod_key, current[p.pod_key])
            if p.unschedulable_message:
                pipe.hset(self.keys.sim_conditions, p.pod_key, p.unschedulable_message)
            if p.nominated_node:
                pipe.hset(self.keys.sim_nominated, p.pod_key, p.nominated_node)
            if p.event_reason:
                pipe.rpush(
                    self.keys.sim_events,
                    json.dumps(
                        {"object": f"Pod/{p.pod_key}", "reason": p.event_reason, "message": p.event_message, "at": now}
                    ),
                )
        for g in gangs:
            pipe.rpush(
                self.keys.sim_events,
                json.dumps({"object": f"PodGroup/{g.gang_key}", "reason": g.phase, "message": g.message, "at": now}),
            )
        pipe.execute()

    def evict(self, victims: list[Victim], now: float) -> list[EvictResult]:
        """The embedded cluster's eviction: the simulator reads the list and ends the pods (reporting them
        preempted), as a kubelet would kill them; a Preempted Event names the preemptor. Appending the same
        victim twice (a retried call) ends it once: the simulator ignores a pod already ended."""
        pipe = self.redis.pipeline(transaction=True)
        for v in victims:
            pipe.rpush(self.keys.sim_preempted, json.dumps({"pod": v.pod_key, "by": v.preemptor, "at": now}))
            event = {"object": f"Pod/{v.pod_key}", "reason": "Preempted", "message": v.message, "at": now}
            pipe.rpush(self.keys.sim_events, json.dumps(event))
        pipe.execute()
        return [EvictResult(v.pod_key, EvictStatus.EVICTED) for v in victims]
