"""One scheduling attempt's tentative state: the pods it placed and the gang operations it decided.

While the attempt runs, each placed pod holds its node's capacity on the snapshot (so the attempt's next
pods see it) and the gang's operations collect in a statement that memory has not taken. `commit` sends
both to Redis in one transaction: accepted, each pod becomes an assumed pod of the cache and the gang
takes the statement, with nothing written a second time; refused (another writer took the capacity), or
`discard`ed (a Strict gang failed), the holds go and the statement is dropped. Volcano's Statement
(Allocate, then Commit or Discard) and kube-scheduler's AssumePod follow the same rule: one tentative
state per attempt, applied once.
"""

from __future__ import annotations

from dataclasses import dataclass

from phalanx.gang.statement import GangStatement
from phalanx.model.objects import Resources
from phalanx.queueing.scheduling_queue import Outcome
from phalanx.scheduling.cache import SchedulerCache
from phalanx.scheduling.ports import Popped, Verdict
from phalanx.scheduling.round import RoundState
from phalanx.state.pod_state import PodState
from phalanx.state.store import PodRecord, StateStore
from phalanx.state.txn import Txn


@dataclass(frozen=True)
class Placed:
    item: Popped
    node_index: int
    requests: Resources  # what the pod holds there (its requests, plus e.g. the GPU devices chosen)


class Attempt:
    def __init__(self, cache: SchedulerCache, store: StateStore, gang: str = "") -> None:
        self.cache = cache
        self.store = store
        self.gang = gang
        self.stmt: GangStatement = cache.gangs.begin()
        self.placed: list[Placed] = []

    def place(self, item: Popped, node_index: int, requests: Resources) -> None:
        self.cache.hold(node_index, requests, item.pod)
        self.placed.append(Placed(item, node_index, requests))

    def discard(self) -> None:
        """The attempt decides nothing: its holds go, its statement is dropped."""
        for p in reversed(self.placed):
            self.cache.unhold(p.node_index, p.requests, p.item.pod)
        self.placed.clear()

    def node_name(self, p: Placed) -> str:
        return self.cache.snapshot.nodes[p.node_index].name

    def commit(self) -> tuple[bool, str]:
        """Redis takes the reservations and the gang operations together, or neither. Accepted: memory
        takes them (each pod assumed once). Refused: the attempt is discarded; returns (False, reason)."""
        txn = Txn(gang_ops=self.stmt.ops)
        for p in self.placed:
            txn.reserve.append(self.store.reserve_entry(p.item.pod, self.node_name(p), p.requests))
        ok, reason = self.store.apply(txn)
        if not ok:
            self.discard()
            return False, reason
        self.cache.commit_gangs(self.stmt)
        for p in self.placed:
            pod = p.item.pod
            self.cache.assume_pod(
                PodRecord(pod.key, self.node_name(p), self.gang or pod.gang, p.requests, pod, PodState.ASSUMED)
            )
        return True, ""


def skip_reserved(cache: SchedulerCache, unit: list[Popped], state: RoundState) -> list[Popped]:
    """Pods the queue hands out again (after a restart, or a stale re-add) may already be reserved or
    bound; memory mirrors Redis for both, so this costs no round trip."""
    out = []
    for item in unit:
        key = item.pod.key
        if key in cache.bound:
            state.verdicts.append(Verdict(item, Outcome.BOUND))
        elif key in cache.assumed:
            state.verdicts.append(Verdict(item, Outcome.ASSUMED))
        else:
            out.append(item)
    return out
