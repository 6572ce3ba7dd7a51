"""What PodDisruptionBudgets (phalanx.model.budgets) still allow while a preemption plan is made: each
victim is charged to the budgets that select it, and a unit that would take a budget below zero is not
taken."""

from __future__ import annotations

from collections.abc import Iterable

from phalanx.model.budgets import DisruptionBudget
from phalanx.model.objects import PodInfo


class BudgetLedger:
    """What each budget still allows in one preemption plan: victims are charged as they are chosen."""

    def __init__(self, budgets: Iterable[DisruptionBudget], running: Iterable[PodInfo]) -> None:
        self.budgets = list(budgets)
        counts = {b.key: 0 for b in self.budgets}
        for pod in running:
            for b in self.budgets:
                if b.selects(pod):
                    counts[b.key] += 1
        self.left = {b.key: b.allowance(counts[b.key]) for b in self.budgets}

    def blocking(self, pods: Iterable[PodInfo]) -> str:
        """The first budget that evicting `pods` (on top of what was charged) would break, or ""."""
        need: dict[str, int] = {}
        for pod in pods:
            for b in self.budgets:
                if b.selects(pod):
                    need[b.key] = need.get(b.key, 0) + 1
        for key, n in sorted(need.items()):
            if n > self.left[key]:
                return key
        return ""

    def charge(self, pods: Iterable[PodInfo], sign: int = 1) -> None:
        for pod in pods:
            for b in self.budgets:
                if b.selects(pod):
                    self.left[b.key] -= sign
