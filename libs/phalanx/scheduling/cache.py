"""What the scheduler holds in memory, mirroring what Redis has accepted: node capacity (the snapshot),
the gangs' records, and the pods reserved or bound. Every part of a step reads and updates this one object;
`GangScheduler.resync` rebuilds it from Redis whenever it cannot be trusted."""

from __future__ import annotations

from dataclasses import dataclass, field

from phalanx.framework.snapshot import Snapshot
from phalanx.gang.manager import GangManager
from phalanx.gang.ops import PodsReleased
from phalanx.queueing.hints import FreedCapacity
from phalanx.scheduling.hints import note_release
from phalanx.state.store import PodRecord


@dataclass
class SchedulerCache:
    gangs: GangManager
    snapshot: Snapshot = field(default_factory=Snapshot)
    assumed: dict[str, PodRecord] = field(default_factory=dict)  # reserved, not yet bound: what a rollback gives back
    bound: set[str] = field(default_factory=set)  # pods bound and not yet released: never scheduled twice

    def give_back(self, key: str, freed: FreedCapacity | None = None) -> PodRecord | None:
        """A reservation Redis no longer holds (released, refused, timed out): its capacity returns to the
        snapshot (recorded in `freed`, so pods waiting for it get another try) and its gang forgets it."""
        r = self.assumed.pop(key, None)
        if r is None:
            return None
        self.free_capacity(r, freed)
        if r.gang:
            self.gangs.apply([PodsReleased(r.gang, (key,))])
        return r

    def free_capacity(self, r: PodRecord, freed: FreedCapacity | None = None) -> None:
        """What `r` held on its node returns to the snapshot (recorded in `freed`); nothing if the node is gone."""
        i = self.snapshot.index.get(r.node)
        if i is not None:
            self.snapshot.reserve(i, r.requests, sign=-1, pod=r.pod)
            if freed is not None:
                note_release(freed, self.snapshot, r.node, r.requests)
