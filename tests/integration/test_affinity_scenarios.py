"""Inter-pod affinity, anti-affinity and topology spread through the real stack (redis-server, queue,
scheduler and binder as processes): the spec is read from the pod, crosses the gRPC hops and decides
placement, for gangs whose pods place in one round."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import make_node, make_pod

from phalanx.model.keys import KOORD_MIN_AVAILABLE, KOORD_NAME, KOORD_WAITING_TIME
from phalanx.sim.driver import SimOptions
from phalanx.sim.run import simulate
from phalanx.sim.workload import load_workload

pytestmark = pytest.mark.integration

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def _nodes(zones: dict[str, str]) -> list[dict[str, Any]]:
    return [
        make_node(n).cpu("64").memory("256Gi").gpu(8).label(ZONE, z).label(HOST, n).build() for n, z in zones.items()
    ]


def _gang(name: str, size: int, gpus: int, at: int = 0, **spec: Any) -> list[dict[str, Any]]:
    pods = []
    for i in range(size):
        b = (
            make_pod(f"{name}-{i}")
            .scheduler("phalanx")
            .container()
            .gpu(gpus)
            .cpu("1")
            .label("job", name)
            .created(f"2026-01-01T00:00:{at:02d}Z")
            .annotation(KOORD_NAME, name)
            .annotation(KOORD_MIN_AVAILABLE, str(size))
            .annotation(KOORD_WAITING_TIME, "30s")
        )
        for path, value in spec.items():
            b = b.set(f"spec.{path}", value)
        pods.append(b.build())
    return pods


def _run(tmp_path: Path, objects: list[dict[str, Any]]) -> dict[str, Any]:
    path = tmp_path / "workload.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return simulate(load_workload([path]), SimOptions(), log_dir=tmp_path / "logs")


def _term(key: str, **labels: str) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": key}


def test_required_anti_affinity_puts_a_gang_one_pod_per_node(tmp_path: Path) -> None:
    """Without the rule GPUFragmentation packs the four 1-GPU pods on one node; with it each gets its own."""
    zones = {f"n{i}": "a" for i in range(4)}
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term(HOST, job="spread")]}}
    report = _run(tmp_path, _nodes(zones) + _gang("spread", 4, 1, affinity=anti) + _gang("packed", 4, 1))
    nodes = {p["name"]: p["node"] for p in report["pods"]}
    assert sorted(nodes[f"spread-{i}"] for i in range(4)) == ["n0", "n1", "n2", "n3"]
    assert len({nodes[f"packed-{i}"] for i in range(4)}) == 1


def test_a_gang_that_cannot_keep_its_anti_affinity_waits_whole_and_says_why(tmp_path: Path) -> None:
    zones = {f"n{i}": "a" for i in range(2)}
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term(HOST, job="big")]}}
    report = _run(tmp_path, _nodes(zones) + _gang("big", 3, 1, affinity=anti))
    assert not any(p["node"] for p in report["pods"])  # all or nothing: no partial gang
    (reason,) = [r["reason"] for r in report["gangReasons"] if r["gang"] == "default/big"]
    assert "2 node(s) didn't match pod anti-affinity rules" in reason


def test_required_affinity_follows_the_pods_it_names(tmp_path: Path) -> None:
    """A gang that must share a zone with the `db` pod goes to zone b, where db runs."""
    zones = {"n0": "a", "n1": "a", "n2": "b", "n3": "b"}
    db = make_pod("db").scheduler("phalanx").container().cpu("1").label("app", "db").node_name("n3").build()
    near = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term(ZONE, app="db")]}}
    report = _run(tmp_path, [*_nodes(zones), db, *_gang("near", 2, 4, at=1, affinity=near)])
    nodes = {p["name"]: p["node"] for p in report["pods"]}
    assert {zones[nodes[f"near-{i}"]] for i in range(2)} == {"b"}


def test_topology_spread_balances_a_gang_over_zones(tmp_path: Path) -> None:
    zones = {"n0": "a", "n1": "a", "n2": "b", "n3": "b", "n4": "c", "n5": "c"}
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"job": "even"}},
        }
    ]
    report = _run(tmp_path, _nodes(zones) + _gang("even", 6, 1, topologySpreadConstraints=spread))
    nodes = {p["name"]: p["node"] for p in report["pods"]}
    per_zone: dict[str, int] = {}
    for i in range(6):
        per_zone[zones[nodes[f"even-{i}"]]] = per_zone.get(zones[nodes[f"even-{i}"]], 0) + 1
    assert per_zone == {"a": 2, "b": 2, "c": 2}


def test_a_malformed_spread_constraint_is_refused_naming_the_field(tmp_path: Path) -> None:
    zones = {"n0": "a"}
    bad = [{"maxSkew": 0, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}]
    report = _run(tmp_path, _nodes(zones) + _gang("bad", 1, 1, topologySpreadConstraints=bad) + _gang("ok", 1, 1))
    pods = {p["name"]: p for p in report["pods"]}
    assert pods["ok-0"]["node"] == "n0"  # other work goes on
    assert pods["bad-0"]["node"] is None
    assert "spec.topologySpreadConstraints[0].maxSkew" in (pods["bad-0"]["reason"] or "")
