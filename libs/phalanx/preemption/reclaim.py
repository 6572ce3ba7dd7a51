"""Preemption across queues: a queue takes from another only while it holds less than its deserved share
and the other more (Volcano's reclaim, on the DRF tenants of phalanx.model.policies).

A pod's queue is its phalanx.dev/queue annotation (which intake sets from a Volcano PodGroup's spec.queue).
Pods of the same queue, and pods naming no queue at all, preempt on priority alone, as kube-scheduler
does; only when the preemptor and a candidate victim name different queues (or one names a queue and the
other does not, its namespace then being its tenant) does the share rule apply. The deserved share is an
equal split of the cluster among the tenants holding anything, the preemptor's included (no weights yet).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from phalanx.model import keys
from phalanx.model.objects import PodInfo


@dataclass(frozen=True)
class ReclaimRule:
    queue: str  # the preemptor's explicit queue, "" when it names none
    tenant: str  # the tenant its share counts against (its queue, else its namespace)
    shares: Mapping[str, float]  # each tenant's dominant share of the cluster now
    deserved: float

    @classmethod
    def of(cls, preemptor: PodInfo, shares: Mapping[str, float]) -> ReclaimRule:
        queue = preemptor.annotations.get(keys.QUEUE_NAME, "")
        tenant = queue or preemptor.namespace
        active = {t for t, share in shares.items() if share > 0} | {tenant}
        return cls(queue, tenant, dict(shares), 1.0 / len(active))

    def may_take(self, pod: PodInfo) -> bool:
        queue = pod.annotations.get(keys.QUEUE_NAME, "")
        if queue == self.queue:
            return True
        victim_tenant = queue or pod.namespace
        return self.shares.get(self.tenant, 0.0) < self.deserved < self.shares.get(victim_tenant, 0.0)

    def describe(self) -> str:
        """Why other queues are off limits, for a gang that found nothing to preempt."""
        return (
            f"queue {self.tenant} holds {self.shares.get(self.tenant, 0.0):.0%} of the cluster, its deserved "
            f"share is {self.deserved:.0%}: it reclaims from other queues only below it, from queues above it"
        )
