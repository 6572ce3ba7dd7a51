"""Metrics against a real kube-apiserver (the services in this process, tests/k8s/conftest.py): latencies
measured from the pods' creationTimestamp on the wall clock, and reconciliation's repairs counted."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry
from waiting import wait_for

from phalanx.metrics.catalog import registry_for
from phalanx.model.objects import PodInfo
from phalanx.state.store import Txn
from phalanx.testing.apiserver import APISERVER_MISSING_REASON, apiserver_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not apiserver_available(), reason=APISERVER_MISSING_REASON),
]

BIND = 20.0


class Reading:
    """The scheduler's metrics as its /metrics would show them, compared with an earlier reading (the
    counters live for the whole test process)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.values = {
            (s.name, tuple(sorted(s.labels.items()))): s.value for metric in registry.collect() for s in metric.samples
        }

    def get(self, name: str, **labels: str) -> float:
        return self.values.get((name, tuple(sorted(labels.items()))), 0.0)


def test_latencies_are_wall_clock_seconds_from_creation(cluster, phalanx) -> None:  # type: ignore[no-untyped-def]
    registry = registry_for("scheduler")
    before = Reading(registry)
    ns = cluster.namespace()
    cluster.node("n1", gpus=2)
    names = cluster.koord_pods(ns, "train", 2, min_available=2)
    wait_for(lambda: cluster.all_bound(ns, names), BIND, "the gang bound")
    # Counted when the binder's answer reaches the scheduler, a moment after the API server shows the pods bound.
    after = wait_for(
        lambda: (
            (r := Reading(registry)).get("phalanx_gang_wait_duration_seconds_count")
            > before.get("phalanx_gang_wait_duration_seconds_count")
            and r
        ),
        BIND,
        "the bind counted",
    )

    def delta(name: str) -> float:
        return after.get(name) - before.get(name)

    assert delta("scheduler_pod_scheduling_sli_duration_seconds_count") == 2
    # creationTimestamp has whole seconds: each pod took between 0 and the wait above (plus that rounding).
    assert 0 <= delta("scheduler_pod_scheduling_sli_duration_seconds_sum") <= 2 * (BIND + 1)
    assert delta("phalanx_gang_wait_duration_seconds_count") == 1
    assert 0 <= delta("phalanx_gang_wait_duration_seconds_sum") <= BIND + 1


def test_reconciliation_repairs_are_counted_by_kind(cluster, phalanx) -> None:  # type: ignore[no-untyped-def]
    registry = registry_for("scheduler")
    before = Reading(registry)
    ns = cluster.namespace()
    node = cluster.node("n1", gpus=2, cpu="8")
    wait_for(
        lambda: any(n.name == node and n.allocatable.get("cpu", 0) >= 8000 for n in phalanx.store.load_nodes()),
        BIND,
        "the node's capacity in Redis",
    )
    # Drift: the record of a pod that does not exist, and usage that does not match the records.
    ghost = PodInfo(ns, "ghost", uid="ghost-uid", requests={"cpu": 4000})
    phalanx.store.must_apply(Txn(reserve=[phalanx.store.reserve_entry(ghost, node)]))
    phalanx.store.redis.hincrby(phalanx.store.keys.used, f"{node}\x1fcpu", 777)
    maintenance = phalanx.scheduler[2].maintenance
    totals_before = dict(maintenance.totals)
    for kind in ("stale-record", "usage"):  # as reconciliation logs them (after the pass that repaired them)
        wait_for(lambda: maintenance.totals[kind] > totals_before.get(kind, 0), BIND, f"a {kind} repair")
    assert f"{ns}/ghost" not in phalanx.reserved()

    def counted(reading: Reading) -> dict[str, float]:
        return {
            kind: reading.get("phalanx_reconcile_repairs_total", kind=kind)
            - before.get("phalanx_reconcile_repairs_total", kind=kind)
            for kind in maintenance.totals
        }

    def steady() -> tuple[dict[str, float], dict[str, int]] | None:
        """(metric, log) deltas read while no pass ran in between (passes go on in the background)."""
        totals = dict(maintenance.totals)
        reading = counted(Reading(registry))
        return (reading, totals) if dict(maintenance.totals) == totals else None

    metric, totals = wait_for(steady, BIND, "a reading between two reconciliation passes")
    assert metric["stale-record"] >= 1 and metric["usage"] >= 1
    # The metric counts exactly what reconciliation logged, kind by kind.
    assert metric == {k: v - totals_before.get(k, 0) for k, v in totals.items()}
