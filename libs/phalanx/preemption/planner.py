"""Finds the cheapest set of victims that lets a whole gang fit, by asking the framework itself.

"Fits" is decided by placing the gang's pods, one after the other, with the profile's own filters and
scores on the snapshot with the victims taken out (and put back afterwards: the snapshot is left as it
was). Victims are added cheapest unit first (see victims.py) until the gang fits, the smallest such prefix
found by doubling and then bisection; then each chosen unit, dearest first, is dropped again if the gang
still fits without it. So one low-priority gang is preempted when one suffices, and a cheap unit is never
kept just because it came first.

PodDisruptionBudgets are never broken: a unit whose eviction would take a budget below its allowance is
skipped, whatever it would have freed.

A gang declaring minResources (scheduler-plugins' PodGroup, which Kubeflow's training-operator always
writes) fits only when the cluster's free total also covers them once the victims are gone: the scheduler's
gate asks that before placing, so a plan that placed the pods but left minResources short would free
capacity the gang still could not use.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from phalanx.framework.framework import Framework
from phalanx.framework.snapshot import Snapshot
from phalanx.model.objects import PodInfo, Resources
from phalanx.model.quantity import format_milli
from phalanx.preemption.budgets import BudgetLedger
from phalanx.preemption.victims import RunningPod, VictimUnit, victim_pods

Placement = tuple[PodInfo, int, Resources]  # preemptor pod, node row, what it would hold there


@dataclass
class Plan:
    units: list[VictimUnit]
    victims: list[RunningPod]
    placements: list[Placement]

    def summary(self) -> str:
        shown = ", ".join(u.label for u in self.units[:4])
        more = f" and {len(self.units) - 4} more" if len(self.units) > 4 else ""
        return f"{len(self.victims)} lower-priority pod(s): {shown}{more}"


@dataclass
class NoPlan:
    reason: str


class PreemptionSearch:
    def __init__(
        self,
        framework: Framework,
        snap: Snapshot,
        pods: Sequence[PodInfo],
        units: list[VictimUnit],
        quota: dict[str, int],
        ledger: BudgetLedger,
        min_resources: Resources | None = None,
    ) -> None:
        """`min_resources`: the gang's minResources, when its gate still applies (nothing of it placed yet)."""
        self.framework = framework
        self.snap = snap
        self.pods = list(pods)
        self.units = units
        self.quota = quota
        self.ledger = ledger
        self.min_resources = dict(min_resources or {})
        self.min_resources_short = ""  # what minResources lacked with every candidate evicted, for the message
        self.blocked_by = ""  # a budget that kept a unit out, for the message when nothing fits
        self.checks = 0  # fit checks made (each places the gang once)

    def run(self) -> Plan | NoPlan:
        if not self.units:
            return NoPlan("no running pod it may preempt (of a lower priority than the gang)")
        everything = self._effective(self.units)
        if self._fits(everything) is None:
            why = "evicting every lower-priority pod would not make room for the gang"
            if self.min_resources_short:
                why = f"evicting every lower-priority pod would not free its minResources ({self.min_resources_short})"
            if self.blocked_by:
                why += f" (PodDisruptionBudget {self.blocked_by} protects some of them)"
            return NoPlan(why)
        hi = 1
        while hi < len(self.units) and self._fits(self._effective(self.units[:hi])) is None:
            hi *= 2
        hi = min(hi, len(self.units))
        lo = hi // 2  # a prefix of `lo` units did not fit (or is empty)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._fits(self._effective(self.units[:mid])) is None:
                lo = mid
            else:
                hi = mid
        chosen = self._effective(self.units[:hi])
        for unit in sorted(chosen, key=lambda u: u.cost, reverse=True):
            trial = [u for u in chosen if u is not unit]
            if trial and self._fits(trial) is not None:
                chosen = trial
        placements = self._fits(chosen)
        assert placements is not None  # the last fitting set
        return Plan(chosen, victim_pods(chosen), placements)

    def _effective(self, units: Sequence[VictimUnit]) -> list[VictimUnit]:
        """The units of `units` that may be taken together: surplus pods within their gang's quota, and
        nothing that breaks a disruption budget (what each unit costs a budget is charged as it is taken)."""
        used: dict[str, int] = defaultdict(int)
        seen: set[str] = set()
        charged: list[PodInfo] = []
        out: list[VictimUnit] = []
        for u in units:
            if u.kind == "surplus" and used[u.gang] >= self.quota.get(u.gang, 0):
                continue
            new = [p.pod for p in u.pods if p.key not in seen]
            blocking = self.ledger.blocking(new)
            if blocking:
                self.blocked_by = self.blocked_by or blocking
                continue
            if u.kind == "surplus":
                used[u.gang] += 1
            self.ledger.charge(new)
            charged += new
            seen.update(p.key for p in u.pods)
            out.append(u)
        self.ledger.charge(charged, sign=-1)  # the ledger is only borrowed
        return out

    def _fits(self, units: Sequence[VictimUnit]) -> list[Placement] | None:
        """Where the gang's pods go with `units` evicted, or None if one does not fit. The snapshot is
        changed for the check and restored before returning."""
        self.checks += 1
        snap = self.snap
        removed: list[tuple[int, RunningPod]] = []
        placed: list[Placement] = []
        try:
            for v in victim_pods(units):
                i = snap.index.get(v.node)
                if i is not None:
                    snap.reserve(i, v.held, sign=-1, pod=v.pod)
                    removed.append((i, v))
            if not self._covers_min_resources():
                return None
            for pod in self.pods:
                res = self.framework.place(pod, snap)
                if res.node_index is None:
                    return None
                snap.reserve(res.node_index, res.requests, pod=pod)
                placed.append((pod, res.node_index, res.requests))
            return list(placed)
        finally:
            for pod, i, held in reversed(placed):
                snap.reserve(i, held, sign=-1, pod=pod)
            for i, v in reversed(removed):
                snap.reserve(i, v.held, pod=v.pod)

    def _covers_min_resources(self) -> bool:
        """Whether the cluster's free total, as the snapshot stands, covers the gang's minResources."""
        if not self.min_resources:
            return True
        free = self.snap.free_total()
        short = [
            f"it needs {format_milli(r, need)} {r}, at most {format_milli(r, free.get(r, 0))} could be free"
            for r, need in sorted(self.min_resources.items())
            if free.get(r, 0) < need
        ]
        self.min_resources_short = "; ".join(short)
        return not short
