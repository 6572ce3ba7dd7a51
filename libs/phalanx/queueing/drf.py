"""DRF ordering among tenants: each tenant's dominant share, which orders its jobs after priority."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from phalanx.model.gpu import gpu_milli
from phalanx.model.policies import is_drf
from phalanx.queueing.entry import Entry
from phalanx.queueing.settings import QueueSettings


class Shares:
    """Each tenant's dominant share (what its pods hold, over the cluster), as the scheduler last reported
    it and as pops since have charged it; and how many entries each tenant has, so a report about others
    costs nothing."""

    def __init__(self, settings: QueueSettings) -> None:
        self._settings = settings
        self._shares: dict[str, float] = {}
        self._capacity: dict[str, int] = {}
        self._entries: Counter[str] = Counter()

    def tenant(self, tenant: str, queue_policy: str) -> str:
        """The tenant an entry is ordered by: its own under DRF, "" (share 0) under priority."""
        return tenant if tenant and is_drf(queue_policy, self._settings.job_queue_policy) else ""

    def share(self, e: Entry) -> float:
        return self._shares.get(e.tenant, 0.0) if e.tenant else 0.0

    def joined(self, e: Entry) -> None:
        if e.tenant:
            self._entries[e.tenant] += 1

    def left(self, e: Entry) -> None:
        if e.tenant:
            self._entries[e.tenant] -= 1
            if self._entries[e.tenant] <= 0:
                del self._entries[e.tenant]

    def report(self, shares: Mapping[str, float], capacity: Mapping[str, int] | None) -> bool:
        """Takes in the scheduler's report (see SchedulingQueue.set_shares); True when a share of a tenant
        with entries here changed, so the active sub-queue must be re-ordered."""
        if capacity:
            self._capacity = {r: v for r, v in capacity.items() if v > 0}
        changed = {t for t, v in shares.items() if self._shares.get(t) != v}
        if not changed:
            return False
        self._shares.update(shares)
        return any(self._entries.get(t) for t in changed)

    def charge(self, e: Entry) -> None:
        """Adds a popped DRF pod's own dominant share to its tenant's, as if it were placed: the next pod of
        that tenant in this pop then sorts where it would once this one holds its resources. An upper
        bound (a share is the max over resources); the scheduler's next report replaces it."""
        if not e.tenant or not self._capacity:
            return
        requests = getattr(e.payload, "requests", None)
        if requests is None:  # a local queue's payload carries the pod
            requests = getattr(getattr(e.payload, "pod", None), "requests", {})
        asked = {
            "cpu": requests.get("cpu", 0),
            "memory": requests.get("memory", 0),
            "gpu": gpu_milli(requests),
        }
        own = max((asked[r] / cap for r, cap in self._capacity.items() if r in asked), default=0.0)
        self._shares[e.tenant] = self._shares.get(e.tenant, 0.0) + own
