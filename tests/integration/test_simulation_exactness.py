"""The simulator's fast path changes nothing: handing the scheduler runs of quiet instants gives the
same placements, times and reasons as stepping instant by instant, and two runs give the same output."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import make_node, make_pod

from phalanx.model.keys import KOORD_MIN_AVAILABLE, KOORD_NAME, SIM_DURATION
from phalanx.sim import driver
from phalanx.sim.driver import SimOptions
from phalanx.sim.run import simulate
from phalanx.sim.workload import load_workload

pytestmark = pytest.mark.integration


def _workload(tmp_path: Path) -> Path:
    rng = random.Random(7)
    objs: list[dict[str, Any]] = [
        make_node(f"n{i:02d}").cpu("16").memory("64Gi").gpu(rng.choice((2, 4, 8))).build() for i in range(12)
    ]
    t = 0
    for i in range(160):
        t += rng.choice((0, 1, 1, 2, 5))
        stamp = f"2026-01-01T{t // 3600:02d}:{t // 60 % 60:02d}:{t % 60:02d}Z"
        b = make_pod(f"p{i:03d}").scheduler("phalanx").container().cpu(str(rng.choice((1, 2, 4)))).created(stamp)
        shape = rng.random()
        if shape < 0.5:
            b = b.gpu(rng.choice((1, 1, 2, 4)))
        elif shape < 0.7:
            share = f"{rng.choice((250, 500, 700))}m"
            b = b.request("phalanx.dev/gpu-share", share).limit("phalanx.dev/gpu-share", share)
        if rng.random() < 0.8:
            b = b.annotation(SIM_DURATION, f"{rng.choice((3, 10, 30, 120))}s")
        if i % 10 < 3:  # some gangs of 3 consecutive pods
            b = b.annotation(KOORD_NAME, f"g{i // 10}").annotation(KOORD_MIN_AVAILABLE, "3")
        objs.append(b.build())
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    return path


def _outcome(report: dict[str, Any]) -> dict[str, Any]:
    return {p["name"]: (p["node"], p["boundAt"], p["startedAt"], p["finishedAt"], p["reason"]) for p in report["pods"]}


def test_runs_of_quiet_instants_match_stepping_instant_by_instant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workload = load_workload([_workload(tmp_path)])
    fast = simulate(workload, SimOptions(), log_dir=tmp_path / "fast")
    again = simulate(workload, SimOptions(), log_dir=tmp_path / "again")
    monkeypatch.setattr(driver, "MAX_LATER_INSTANTS", 0)
    slow = simulate(workload, SimOptions(), log_dir=tmp_path / "slow")
    assert fast["summary"]["steps"] < slow["summary"]["steps"]  # the fast path was taken
    assert sum(1 for p in slow["pods"] if p["finishedAt"] is not None) > 50
    assert _outcome(fast) == _outcome(slow)
    assert _outcome(fast) == _outcome(again)
    assert fast["series"] == slow["series"]
