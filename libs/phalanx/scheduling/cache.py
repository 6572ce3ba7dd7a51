"""The scheduler's memory of what Redis has accepted, and the only writer of it.

It holds node capacity (the snapshot), the gangs' records, and the pods reserved (assumed) or bound. Its
verbs follow kube-scheduler's cache: `assume_pod`, `finish_binding`, `forget_pod`, `add_pods`, `remove_pod`,
`replace` (the whole of it from storage, the answer to anything that cannot be trusted). Everything else
(the step, binds, timeouts, cluster events, reconciliation) reads through the properties and writes
through these methods; tests/unit/test_cache_owner.py fails if code elsewhere writes its data. Capacity is
taken with `hold` before Redis has the decision (an attempt's pods must see each other:
phalanx.scheduling.attempt) and becomes an assumed or bound pod once Redis has it, or goes with `unhold`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set

from phalanx.framework.snapshot import Snapshot
from phalanx.gang.manager import GangManager
from phalanx.gang.ops import GangOp, PodsReleased
from phalanx.gang.record import GangRecord
from phalanx.gang.statement import GangStatement
from phalanx.model.objects import GangSpec, NodeInfo, PodInfo, Resources
from phalanx.queueing.hints import FreedCapacity
from phalanx.scheduling.hints import note_release
from phalanx.state.pod_state import PodState
from phalanx.state.store import PodRecord


class SchedulerCache:
    def __init__(self, gangs: GangManager) -> None:
        self.gangs = gangs  # read freely; written through the methods below
        self.snapshot = Snapshot()  # read freely (placement reads it); written through the methods below
        self._assumed: dict[str, PodRecord] = {}  # reserved, not yet bound: what a rollback gives back
        self._bound: set[str] = set()  # bound and not yet released: never scheduled twice

    @property
    def assumed(self) -> Mapping[str, PodRecord]:
        return self._assumed

    @property
    def bound(self) -> Set[str]:
        return self._bound

    # -- the whole of it -----------------------------------------------------------------------------
    def replace(
        self,
        nodes: list[NodeInfo],
        used: dict[tuple[str, str], int],
        specs: Mapping[str, GangSpec],
        gang_records: dict[str, GangRecord],
        records: Mapping[str, PodRecord],
    ) -> None:
        """Memory := storage: nodes and their usage, gangs, and every pod record."""
        self.snapshot.set_nodes(nodes, used)
        self.gangs.load(dict(specs), gang_records)
        self.snapshot.clear_pods()
        for r in records.values():
            self.snapshot.track_pod(r.node, r.pod)
        self._assumed = {k: r for k, r in records.items() if r.state in (PodState.ASSUMED, PodState.BINDING)}
        self._bound = {k for k, r in records.items() if r.state == PodState.BOUND}

    def reload_usage(self, used: dict[tuple[str, str], int]) -> None:
        """Another writer changed usage (a commit conflict): the snapshot takes Redis's figures."""
        self.snapshot.load_used(used)

    # -- nodes ---------------------------------------------------------------------------------------
    def add_nodes(self, nodes: list[NodeInfo]) -> None:
        self.snapshot.upsert_nodes(nodes)

    def remove_nodes(self, names: list[str]) -> None:
        self.snapshot.remove_nodes(names)

    # -- pods ----------------------------------------------------------------------------------------
    def hold(self, node_index: int, requests: Resources, pod: PodInfo) -> None:
        """A tentative reservation of an attempt in progress: placement of the attempt's next pods sees it."""
        self.snapshot.reserve(node_index, requests, pod=pod)

    def unhold(self, node_index: int, requests: Resources, pod: PodInfo) -> None:
        """An attempt discarded: its tentative reservation goes."""
        self.snapshot.reserve(node_index, requests, sign=-1, pod=pod)

    def assume_pod(self, record: PodRecord) -> None:
        """Redis accepted a reservation the snapshot already holds (see `hold`): the pod is assumed."""
        self._assumed[record.key] = record

    def finish_binding(self, key: str) -> None:
        """The pod's binding is done: it holds its node's capacity as a bound pod."""
        self._assumed.pop(key, None)
        self._bound.add(key)

    def forget_pod(self, key: str, freed: FreedCapacity | None = None) -> PodRecord | None:
        """A reservation Redis no longer holds (released, refused, timed out): its capacity returns to the
        snapshot (recorded in `freed`, so pods waiting for it get another try) and its gang forgets it."""
        r = self._assumed.pop(key, None)
        if r is None:
            return None
        self._free(r, freed)
        if r.gang:
            self.gangs.apply([PodsReleased(r.gang, (key,))])
        return r

    def add_pods(self, keys: Iterable[str]) -> None:
        """Pods found bound (facts, not decisions), whose capacity `hold` took: recorded as bound."""
        self._bound.update(keys)

    def unbind(self, key: str) -> None:
        """A bound pod whose node is gone (its capacity went with the node): no longer counted bound."""
        self._bound.discard(key)

    def remove_pod(self, record: PodRecord, freed: FreedCapacity | None = None) -> None:
        """A pod finished or deleted: whether reserved or bound, its capacity returns."""
        if self.forget_pod(record.key, freed) is None:  # bound, not reserved: its capacity still returns
            self._free(record, freed)
        self._bound.discard(record.key)

    def _free(self, r: PodRecord, freed: FreedCapacity | None) -> None:
        """What `r` held on its node returns to the snapshot (recorded in `freed`); nothing if the node is gone."""
        i = self.snapshot.index.get(r.node)
        if i is not None:
            self.snapshot.reserve(i, r.requests, sign=-1, pod=r.pod)
            if freed is not None:
                note_release(freed, self.snapshot, r.node, r.requests)

    # -- gangs ---------------------------------------------------------------------------------------
    def upsert_gangs(self, specs: Iterable[GangSpec]) -> None:
        for s in specs:
            self.gangs.upsert(s)

    def remove_gangs(self, keys: Iterable[str]) -> None:
        for k in keys:
            self.gangs.remove(k)

    def forget_gang(self, key: str) -> None:
        self.gangs.forget(key)

    def commit_gangs(self, stmt: GangStatement) -> None:
        """Redis accepted a statement of gang operations: memory takes it."""
        self.gangs.commit(stmt)

    def apply_gang_ops(self, ops: list[GangOp]) -> None:
        """Gang operations of facts Redis accepted outside a statement (pods bound, pods found bound)."""
        self.gangs.apply(ops)
