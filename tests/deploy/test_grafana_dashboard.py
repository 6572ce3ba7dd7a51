"""deploy/grafana/phalanx.json: a Grafana dashboard whose every query names metrics the services export,
and that shows each thing an operator watches (the list below)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from phalanx.gang.manager import GangManager
from phalanx.metrics.catalog import registry_for
from phalanx.metrics.collectors import GangCollector, LeaderCollector, QueueCollector
from phalanx.queueing.scheduling_queue import SchedulingQueue
from phalanx.scheduling.attempt_metrics import AttemptTally

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "phalanx.json"
NAME = re.compile(r"\b((?:scheduler|phalanx|process|leader_election)_[a-z0-9_]+)")

# What the dashboard must show, each by the metric that carries it.
MUST_SHOW = {
    "pending pods": "scheduler_pending_pods",
    "attempts by result": "scheduler_schedule_attempts_total",
    "attempt latency quantiles": "scheduler_scheduling_attempt_duration_seconds_bucket",
    "end-to-end latency quantiles": "scheduler_pod_scheduling_sli_duration_seconds_bucket",
    "bind duration": "phalanx_bind_duration_seconds_bucket",
    "gang wait": "phalanx_gang_wait_duration_seconds_bucket",
    "gangs by phase": "phalanx_gangs",
    "partial gangs": "phalanx_gangs_partially_bound",
    "timeouts": "phalanx_gang_timeouts_total",
    "conflicts": "phalanx_redis_txn_conflicts_total",
    "repairs": "phalanx_reconcile_repairs_total",
}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())  # type: ignore[no-any-return]


def exported() -> set[str]:
    """Every sample name the three services can export (histogram and counter suffixes included)."""
    AttemptTally("phalanx")
    registries = [
        registry_for("queue", QueueCollector(SchedulingQueue())),
        registry_for("scheduler", GangCollector(lambda: GangManager(600.0)), LeaderCollector("l", lambda: True)),
        registry_for("binder"),
    ]
    names = {s.name for r in registries for metric in r.collect() for s in metric.samples}
    return names | {"phalanx_reconcile_repairs_total"}  # labelled by kind: no sample before the first repair


def queries(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_every_query_names_exported_metrics(dashboard: dict[str, Any]) -> None:
    known = exported()
    for expr in queries(dashboard):
        names = NAME.findall(expr)
        assert names, expr
        for name in names:
            assert name in known, f"{name} (in {expr}) is not exported by any service"


@pytest.mark.parametrize("what", MUST_SHOW)
def test_the_dashboard_shows(dashboard: dict[str, Any], what: str) -> None:
    assert any(MUST_SHOW[what] in expr for expr in queries(dashboard)), what


def test_panels_are_laid_out_and_sourced(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] and dashboard["title"] == "Phalanx"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert variables == {"datasource", "namespace"}
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for p in dashboard["panels"]:
        grid = p["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, p["title"]
        if p["type"] == "row":
            continue
        assert p["description"], p["title"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        for target in p["targets"]:
            assert 'namespace=~"$namespace"' in target["expr"], target["expr"]
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]
    # No two panels overlap.
    cells: set[tuple[int, int]] = set()
    for p in dashboard["panels"]:
        g = p["gridPos"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, p["title"]
        cells |= mine


def test_the_partial_gangs_panel_turns_red_above_zero(dashboard: dict[str, Any]) -> None:
    [panel] = [p for p in dashboard["panels"] if "phalanx_gangs_partially_bound" in json.dumps(p.get("targets"))]
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps[0]["color"] == "green" and steps[1] == {"color": "red", "value": 1}
