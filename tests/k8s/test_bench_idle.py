"""bench-idle on a real kube-apiserver, short: Phalanx as deployed, idle after one gang, writes its figures.

The bound catches a loop that spins while idle (a busy core is 1,000 ms of CPU a second; Phalanx spends
~20 on 500 nodes, bench/idle.txt), not a few milliseconds more."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phalanx.bench import idle
from phalanx.testing.apiserver import APISERVER_MISSING_REASON, apiserver_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not apiserver_available(), reason=APISERVER_MISSING_REASON),
]

IDLE_MS_PER_S = 250.0


def test_bench_idle_measures_phalanx_idle_and_writes_its_figures(tmp_path: Path) -> None:
    code = idle.main(
        ["--schedulers", "phalanx", "--seconds", "5", "--nodes", "20", "--label", "t", "--out", str(tmp_path)]
    )
    assert code == 0
    [run] = json.loads((tmp_path / "idle.json").read_text())["sets"]["t"]["runs"]
    assert run["alive"] and set(run["cpu_ms_per_s"]) == {"redis", "queue", "binder", "scheduler"}
    assert 0 < run["total_cpu_ms_per_s"] <= IDLE_MS_PER_S, run
    assert "phalanx" in (tmp_path / "idle.txt").read_text()


def test_bench_idle_names_an_unknown_scheduler(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert idle.main(["--schedulers", "phalanx,volcano", "--out", str(tmp_path)]) == 2
    assert "--schedulers: volcano" in capsys.readouterr().err
