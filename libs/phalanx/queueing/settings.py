"""The queue's tunables: backoff, the unschedulable flush, consumers' leases and the default job-queue policy."""

from __future__ import annotations

from dataclasses import dataclass

from phalanx.model.policies import PRIORITY_QUEUE_POLICY


@dataclass
class QueueSettings:
    initial_backoff: float = 1.0
    max_backoff: float = 10.0
    # Unschedulable pods are retried after this long even without a cluster event; 0 disables it.
    unschedulable_flush: float = 300.0
    # Wall-clock seconds a consumer may stay silent before the pods it borrowed come back; 0 disables it.
    lease_seconds: float = 60.0
    # Jobs naming no job-queue policy: "Priority" (priority, then age) or "DRF" (see set_shares).
    job_queue_policy: str = PRIORITY_QUEUE_POLICY
