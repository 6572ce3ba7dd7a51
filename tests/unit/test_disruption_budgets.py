"""PodDisruptionBudgets read from the API server's objects, and what they allow preemption to take."""

from __future__ import annotations

import pytest

from phalanx.intake.budgets import parse_budget
from phalanx.intake.errors import IntakeError
from phalanx.model.budgets import DisruptionBudget
from phalanx.model.objects import PodInfo
from phalanx.model.pod_affinity import LabelSelector
from phalanx.preemption.budgets import BudgetLedger


def _pdb(spec: dict[str, object], status: dict[str, object] | None = None, generation: int = 1) -> dict[str, object]:
    obj: dict[str, object] = {"metadata": {"name": "db", "namespace": "ns", "generation": generation}, "spec": spec}
    if status is not None:
        obj["status"] = status
    return obj


def _pod(name: str, app: str, ns: str = "ns") -> PodInfo:
    return PodInfo(ns, name, labels={"app": app})


def test_min_available_and_percentages_as_the_controller_counts_them() -> None:
    b = parse_budget(_pdb({"minAvailable": 2, "selector": {"matchLabels": {"app": "db"}}}))
    assert b.allowance(3) == 1 and b.allowance(2) == 0
    b = parse_budget(_pdb({"maxUnavailable": "50%", "selector": {}}))
    assert b.allowance(3) == 1  # 1.5 rounded down
    b = parse_budget(_pdb({"minAvailable": "50%", "selector": {}}))
    assert b.allowance(3) == 1  # 1.5 rounded up to 2 kept


def test_the_controllers_count_is_used_only_for_the_current_spec() -> None:
    spec = {"minAvailable": 0, "selector": {}}
    assert parse_budget(_pdb(spec, {"observedGeneration": 1, "disruptionsAllowed": 0})).allowance(5) == 0
    stale = parse_budget(_pdb(spec, {"observedGeneration": 1, "disruptionsAllowed": 0}, generation=2))
    assert stale.allowance(5) == 5


def test_no_selector_selects_nothing_and_an_empty_one_the_namespace() -> None:
    none = parse_budget(_pdb({"maxUnavailable": 0}))
    every = parse_budget(_pdb({"maxUnavailable": 0, "selector": {}}))
    assert not none.selects(_pod("a", "x"))
    assert every.selects(_pod("a", "x")) and not every.selects(_pod("a", "x", ns="other"))


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"minAvailable": "half"}, "spec.minAvailable"),
        ({"maxUnavailable": -1}, "spec.maxUnavailable"),
        ({"minAvailable": 1, "maxUnavailable": 1}, "spec"),
        ({"minAvailable": 1, "selector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}, "spec.selector"),
    ],
)
def test_bad_budgets_name_the_field(spec: dict[str, object], field: str) -> None:
    with pytest.raises(IntakeError) as err:
        parse_budget(_pdb(spec))
    assert "PodDisruptionBudget ns/db" in str(err.value) and field in str(err.value)


def test_the_ledger_charges_victims_and_names_the_budget_they_would_break() -> None:
    budget = DisruptionBudget("ns", "db", LabelSelector((("app", "db"),)), max_unavailable="1")
    running = [_pod(f"db-{i}", "db") for i in range(3)] + [_pod("web", "web")]
    ledger = BudgetLedger([budget], running)
    assert ledger.blocking([running[0]]) == ""
    assert ledger.blocking(running[:2]) == "ns/db"
    ledger.charge([running[0]])
    assert ledger.blocking([running[1]]) == "ns/db"
    assert ledger.blocking([running[3]]) == ""  # not selected
