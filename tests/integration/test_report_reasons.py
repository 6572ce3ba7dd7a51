"""What a simulation report says about gangs that waited, through the real stack: each gang's reason (a
GangGroup partner named as the cause), the reasons counted by cause, the capacity waiting gangs held, and
the GPU-demand panel only for a run that is an arrived-demand sweep."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import make_node, make_pod

from phalanx.model.keys import KOORD_GROUPS, KOORD_MIN_AVAILABLE, KOORD_MODE, KOORD_NAME, KOORD_WAITING_TIME
from phalanx.report import causes
from phalanx.report.html_report import render_html
from phalanx.sim.driver import SimOptions
from phalanx.sim.run import simulate
from phalanx.sim.workload import load_workload

pytestmark = pytest.mark.integration
GPU = "nvidia.com/gpu"


def ts(seconds: int) -> str:
    return f"2026-01-01T00:{seconds // 60:02d}:{seconds % 60:02d}Z"


def run(tmp_path: Path, objects: list[dict[str, Any]]) -> dict[str, Any]:
    path = tmp_path / "workload.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return simulate(load_workload([path]), SimOptions(), log_dir=tmp_path / "logs")


def pair(ns: str, at: int) -> list[dict[str, Any]]:
    """A trainer (2 pods of 2 GPUs) grouped with an evaluator (NonStrict, min 3) of which only 2 pods of 1 GPU
    are ever created: both are placed, and wait 300 s for the third, which never comes."""
    group = json.dumps([f"{ns}/trainer", f"{ns}/evaluator"])
    out = []
    for gang, count, gpus, mode in (("trainer", 2, 2, "Strict"), ("evaluator", 2, 1, "NonStrict")):
        for i in range(count):
            out.append(
                make_pod(f"{gang}-{i}", ns)
                .scheduler("phalanx")
                .container()
                .gpu(gpus)
                .cpu("1")
                .created(ts(at))
                .annotation(KOORD_NAME, gang)
                .annotation(KOORD_MIN_AVAILABLE, "2" if gang == "trainer" else "3")
                .annotation(KOORD_GROUPS, group)
                .annotation(KOORD_MODE, mode)
                .annotation(KOORD_WAITING_TIME, "300s")
                .build()
            )
    return out


def test_gang_group_timeouts_name_the_partner_count_by_cause_and_show_what_they_held(tmp_path: Path) -> None:
    objects = [make_node(f"n{i}").cpu("64").memory("256Gi").gpu(8).build() for i in range(2)]
    objects += pair("team-a", 0) + pair("team-b", 100)
    report = run(tmp_path, objects)
    assert report["summary"]["podsBound"] == 0 and report["summary"]["gangsTimedOut"] == 4

    reasons = {g["gang"]: g["reason"] for g in report["gangReasons"]}
    assert reasons["team-a/trainer"] == (
        "gang team-a/trainer timed out after waiting 300s with 2/2 pods placed (waiting for GangGroup member "
        "team-a/evaluator which has 2/3 pods placed); it will not be scheduled again until its pods are recreated"
    )
    assert reasons["team-a/evaluator"] == (
        "gang team-a/evaluator timed out after waiting 300s with 2/3 pods placed (too few of its pods were "
        "created); it will not be scheduled again until its pods are recreated"
    )
    pods = {(p["namespace"], p["name"]): p for p in report["pods"]}
    assert pods[("team-b", "trainer-1")]["reason"] == reasons["team-b/trainer"]

    found = causes.unbound_causes(report)
    assert sorted((c.cause, c.gangs, c.pods) for c in found) == [
        (
            "gang <gang> timed out after waiting Ns with N/N pods placed (too few of its pods were created); it will not "
            "be scheduled again until its pods are recreated",
            2,
            4,
        ),
        (
            "gang <gang> timed out after waiting Ns with N/N pods placed (waiting for GangGroup member <member gang> "
            "which has N/N pods placed); it will not be scheduled again until its pods are recreated",
            2,
            4,
        ),
    ]

    # Each pair holds 2x2 + 2x1 GPUs from its arrival to its timeout, 300 s later; nothing is ever bound.
    s = report["series"]
    held = dict(zip(s["t"], s["reserved"][GPU]))
    assert (held[0.0], held[100.0], held[300.0], held[400.0]) == (6, 12, 6, 0)
    assert s["reservedRatio"][GPU][s["t"].index(100.0)] == pytest.approx(12 / 16)
    assert set(s["allocated"][GPU]) == {0}

    page = render_html(report, "groups")
    assert 'data-chart="reserved"' in page
    assert "arrived GPU demand" not in page and report["gpuDemandSweep"] is False


def test_an_arrived_demand_sweep_gets_its_panel(tmp_path: Path) -> None:
    objects = [make_node(f"n{i}").cpu("64").memory("256Gi").gpu(4).build() for i in range(5)]  # 20 GPUs
    objects += [
        make_pod(f"p{i:02d}").scheduler("phalanx").container().gpu(1).cpu("1").created(ts(i)).build() for i in range(26)
    ]  # 5% of the GPUs a second, to 130%, never leaving
    report = run(tmp_path, objects)
    assert report["gpuDemandSweep"] is True
    assert report["gpuAllocationAtDemand"] == {"0.9": 0.9, "1": 1.0, "1.1": 1.0, "1.3": 1.0}
    page = render_html(report, "sweep")
    assert "GPU allocation against arrived GPU demand" in page and 'data-chart="demand"' in page
