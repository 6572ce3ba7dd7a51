"""Gauges computed when /metrics is scraped, from the service's own memory: nothing on the hot path.

Each reads its object from the HTTP server's thread. The queue's counts are taken under the queue's lock;
the scheduler's gang gauges under the scheduler's lock when it is free within a second (a step holds it),
else from a copy of the dictionaries taken in one call, which the GIL makes consistent enough for a gauge.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from phalanx.gang.manager import GangManager
    from phalanx.queueing.scheduling_queue import SchedulingQueue

PENDING_QUEUES = ("active", "backoff", "unschedulable")
GANG_PHASES = ("pending", "waiting", "bound", "timed_out", "invalid", "undeclared")

PENDING_HELP = (
    "Number of pending pods, by the queue type (kube-scheduler's metric): 'active' wait to be "
    "popped; 'backoff' wait out a retry delay; 'unschedulable' were tried, failed, and wait for a "
    "cluster event that may help them. Pods lent to a scheduler are counted in "
    "phalanx_queue_in_flight_pods."
)
GANGS_HELP = (
    "Gangs the scheduler knows, by phase: 'pending' (declared, no pod placed yet), 'waiting' (some "
    "pods reserved, short of the minimum), 'bound' (reached its minimum and was bound), 'timed_out' (its "
    "wait ran out: given up, or backing off before it is tried again), "
    "'invalid' (its PodGroup or labels are invalid), 'undeclared' (pods name a gang that no PodGroup "
    "declares). Gangs whose pods are all gone are forgotten and leave the count."
)
PARTIAL_HELP = (
    "Gangs bound short of their minimum: the gang's bind is over (it is recorded bound and none "
    "of its reservations is still waiting to be bound) yet fewer of its pods were bound than its "
    "minMember. Must stay 0: a gang is bound all-or-nothing; only a pod deleted, or refused by the "
    "API server after its gang's binding started, leaves the rest of a gang bound without it."
)


class QueueCollector(Collector):
    """scheduler_pending_pods by sub-queue, pods in flight, loans returned by silent schedulers."""

    def __init__(self, queue: "SchedulingQueue") -> None:
        self.queue = queue

    def collect(self) -> Iterator[Metric]:
        counts = self.queue.counts()
        pending = GaugeMetricFamily("scheduler_pending_pods", PENDING_HELP, labels=["queue"])
        for name in PENDING_QUEUES:
            pending.add_metric([name], counts.get(name, 0))
        yield pending
        yield GaugeMetricFamily(
            "phalanx_queue_in_flight_pods",
            "Pods popped by a scheduler and not answered yet (lent to it).",
            value=counts.get("in_flight", 0),
        )
        yield CounterMetricFamily(
            "phalanx_queue_returned_loans",
            "Pods that came back to the queue because the scheduler that popped them "
            "restarted or fell silent for --lease seconds.",
            value=self.queue.returned_loans,
        )


class GangCollector(Collector):
    """phalanx_gangs by phase and phalanx_gangs_partially_bound, from the scheduler's GangManager."""

    def __init__(self, gangs: Callable[[], "GangManager"], lock: threading.Lock | None = None) -> None:
        self.gangs = gangs  # a callable: the scheduler may replace its manager
        self.lock = lock

    def collect(self) -> Iterator[Metric]:
        locked = self.lock is not None and self.lock.acquire(timeout=1.0)
        try:
            phases, partial = gang_counts(self.gangs())
        finally:
            if locked:
                self.lock.release()  # type: ignore[union-attr]
        family = GaugeMetricFamily("phalanx_gangs", GANGS_HELP, labels=["phase"])
        for phase in GANG_PHASES:
            family.add_metric([phase], phases.get(phase, 0))
        yield family
        yield GaugeMetricFamily("phalanx_gangs_partially_bound", PARTIAL_HELP, value=partial)


def gang_counts(gangs: "GangManager") -> tuple[Counter[str], int]:
    """(gangs by phase, gangs partially bound), as defined in GANGS_HELP and PARTIAL_HELP."""
    specs = dict(gangs.specs)  # one C-level copy each: safe against the scheduling thread
    records = dict(gangs.records)
    phases: Counter[str] = Counter()
    partial = 0
    for key in specs.keys() | records.keys():
        spec, rec = specs.get(key), records.get(key)
        if rec is not None and rec.timed_out:
            phases["timed_out"] += 1
        elif rec is not None and rec.satisfied_at is not None:
            phases["bound"] += 1
            if spec is not None and not rec.assumed and 0 < len(rec.bound) < spec.min_available:
                partial += 1
        elif spec is None:
            phases["undeclared"] += 1
        elif spec.invalid:
            phases["invalid"] += 1
        elif rec is not None and (rec.assumed or rec.bound):
            phases["waiting"] += 1
        else:
            phases["pending"] += 1
    return phases, partial


class LeaderCollector(Collector):
    """kube-scheduler's leader_election_master_status for a scheduler under leader election."""

    def __init__(self, lease: str, leading: Callable[[], bool]) -> None:
        self.lease = lease
        self.leading = leading

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "leader_election_master_status",
            "1 while this replica leads (holds the Lease named 'name') and schedules, "
            "0 while it is a standby (kube-scheduler's metric).",
            labels=["name"],
        )
        family.add_metric([self.lease], 1 if self.leading() else 0)
        yield family
