"""The scheduler's cluster-event handlers: one set, whatever watched the cluster.

Two feeders hand cluster changes to a GangScheduler: the cluster feed (phalanx.cluster.feed, from the API
server's watch) and the Scheduler API's ApplyClusterEvents and Step (the simulator's events, received by
phalanx_scheduler.servicer). Both go through `ClusterEvents`, as kube-scheduler's eventhandlers.go serves
real and fake informers alike: it applies each kind of change to the scheduler and records, in a Carry,
what the queue must hear about it. What a feeder decides before that (which pods still exist, which it
queued) stays with the feeder; where the two are handled differently, `FeederRules` says so, and why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from phalanx.model.objects import GangSpec, NodeInfo, PodInfo
from phalanx.queueing.scheduling_queue import Outcome
from phalanx.scheduling.ports import Carry, Popped, QueuePort, Verdict
from phalanx.scheduling.scheduler import GangScheduler
from phalanx.state.pod_state import PodState
from phalanx.state.store import PodRecord


@dataclass
class ClusterChange:
    """One batch of cluster events, in the model's terms, in the order they are applied."""

    nodes: list[NodeInfo] = field(default_factory=list)  # added or changed
    nodes_removed: list[str] = field(default_factory=list)
    gangs: list[GangSpec] = field(default_factory=list)  # declared or changed
    gangs_removed: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)  # pods finished or deleted: their capacity is free
    # Of `released`, those that finished successfully: they do not cost their gang its minimum.
    succeeded: list[str] = field(default_factory=list)
    unqueued: list[str] = field(default_factory=list)  # pods to take out of the queue
    bound: list[PodInfo] = field(default_factory=list)  # pods found bound to a node
    forgotten: list[str] = field(default_factory=list)  # pods deleted: what was reported of them is dropped


@dataclass(frozen=True)
class FeederRules:
    """How the two feeders' events differ, each kept as it was when each feeder had its own handlers."""

    # A pod found bound that this scheduler holds reserved. The API server shows every binding, including
    # those of Phalanx's own pods whose binding finished without this scheduler seeing it (a crashed
    # binder's batch rolled forward by the next binder, a lost answer): recorded as bound. The Scheduler
    # API's bound pods are pods created bound (another scheduler's); the simulated binder records Phalanx's
    # own bindings itself, so they are counted as they come (add_bound_pods skips what Redis knows).
    confirm_reserved: bool
    # remove_nodes releases the bound pods of removed nodes in Redis. The cluster feed drops them from the
    # scheduler's bound set too, which its reconciliation compares with Redis; the Scheduler API path never
    # did (the simulator removes no node).
    unbind_removed_nodes: bool


API_SERVER = FeederRules(confirm_reserved=True, unbind_removed_nodes=True)
SCHEDULER_API = FeederRules(confirm_reserved=False, unbind_removed_nodes=False)


class ClusterEvents:
    """Applies cluster changes to one GangScheduler. The caller holds the scheduler's lock."""

    def __init__(self, scheduler: GangScheduler, rules: FeederRules) -> None:
        self.scheduler = scheduler
        self.rules = rules

    def apply(
        self,
        change: ClusterChange,
        now: float,
        carry: Carry | None = None,
        still_exists: Callable[[str], bool] | None = None,
    ) -> Carry:
        """Applies `change` in order: nodes before the pods bound to them, gangs before the pods that release
        or confirm their members. Returns `carry` (a new one by default) with the queue's updates.
        `still_exists(pod key)`: whether a reserved pod of a removed node still exists (None: all do)."""
        carry = carry if carry is not None else Carry()
        if change.nodes:
            self.nodes_changed(change.nodes, carry)
        if change.nodes_removed:
            self.nodes_removed(change.nodes_removed, now, carry, still_exists)
        if change.gangs:
            self.gangs_declared(change.gangs, carry)
        if change.gangs_removed:
            self.scheduler.remove_gangs(change.gangs_removed)
        if change.released:
            # the pods that capacity may help
            self.scheduler.release_pods(change.released, carry.freed, succeeded=change.succeeded)
        carry.remove += change.unqueued
        if change.bound:
            self.bound_pods_found(change.bound, now, carry)
        if change.forgotten:
            self.scheduler.forget_pods(change.forgotten)
        return carry

    def nodes_changed(self, nodes: list[NodeInfo], carry: Carry) -> None:
        self.scheduler.upsert_nodes(nodes)
        carry.move_all = True  # a node added or changed: every unschedulable pod gets another try

    def nodes_removed(
        self, names: list[str], now: float, carry: Carry, still_exists: Callable[[str], bool] | None = None
    ) -> list[PodRecord]:
        """Their reserved pods go back to the queue (backed off); returns every pod they held."""
        victims = self.scheduler.remove_nodes(names, now, unbind=self.rules.unbind_removed_nodes)
        carry.verdicts += [
            Verdict(Popped(r.pod), Outcome.BACKOFF, f"node {r.node} was removed")
            for r in victims
            if r.state == PodState.ASSUMED and (still_exists is None or still_exists(r.key))
        ]
        return victims

    def gangs_declared(self, specs: list[GangSpec], carry: Carry) -> None:
        self.scheduler.upsert_gangs(specs)
        carry.activate += [g.key for g in specs]  # a gang declared or changed: its own pods get another try

    def bound_pods_found(self, pods: list[PodInfo], now: float, carry: Carry) -> None:
        """Bound pods hold their node's capacity, whichever scheduler bound them (see FeederRules for those
        this scheduler holds reserved)."""
        s = self.scheduler
        if not self.rules.confirm_reserved:
            s.add_bound_pods(pods)
            return
        reserved = [p for p in pods if p.key in s.assumed]
        if reserved:
            moved = s.confirm_bound(reserved, now)
            if moved:  # bound elsewhere than reserved: that reservation is given back, the binding counted
                s.release_pods([p.key for p in moved], carry.freed)
        fresh = [p for p in pods if p.key not in s.bound and p.key not in s.assumed]
        if fresh:
            # Bound pods are facts: recorded even where they over-commit their node as Redis counts it.
            s.add_bound_pods(fresh)


def deliver(carry: Carry, queue: QueuePort, now: float) -> None:
    """Sends the queue a carry at once, for cluster events that no step follows (ApplyClusterEvents)."""
    if carry.verdicts or carry.activate:
        queue.done(carry.verdicts, carry.activate, [], now)
    if carry.remove:
        queue.remove(carry.remove)
    if carry.move_all:
        queue.move_all("cluster-changed", now)
    elif carry.freed:
        queue.move_all("capacity-freed", now, carry.freed)
