"""The chaos suite, short: one trial per process target, Redis restarted empty, a binder killed between two
pods of a gang's bind, and a one-minute soak, each against a real kube-apiserver with Redis and the three
services as separate processes (and two kills of the combined layout's one process). Each must end with zero
violations. (`make chaos` and `make soak` are the long versions; the workload here is trimmed to about 20 gangs
so the file takes a few minutes.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.chaos.cluster import start_apiserver
from phalanx.chaos.soak import SoakOptions, run_soak, soak_text
from phalanx.chaos.trials import TrialOptions, TrialResult, run_trial
from phalanx.chaos.workload import WorkloadShape
from phalanx.testing.apiserver import APISERVER_MISSING_REASON, LocalApiServer, apiserver_available

pytestmark = [pytest.mark.integration, pytest.mark.skipif(not apiserver_available(), reason=APISERVER_MISSING_REASON)]


TARGETS = ["queue", "scheduler", "binder", "redis", "redis-empty", "binder.between_pods"]


def short_shape() -> WorkloadShape:
    return WorkloadShape(
        gangs=20,
        max_size=8,
        gpu_gang_fraction=0.3,
        gpu_nodes=2,
        gpus_per_node=8,
        node_cpu=16,
        create_seconds=3.0,
        run_seconds=(1.0, 3.0),
    )


@pytest.fixture(scope="module")
def chaos_server() -> Iterator[LocalApiServer]:
    server = start_apiserver()
    yield server
    server.stop()


def describe(result: TrialResult) -> str:
    lines = [f"{v.kind} at {v.at:.1f}s: {v.message}" for v in result.violations[:15]]
    return (
        f"{result.target} (seed {result.seed}): {len(result.violations)} violations; logs in {result.run_dir}\n"
        + "\n".join(lines)
        + f"\nnotes: {result.notes}; unplanned exits: {result.unplanned_exits}"
    )


@pytest.mark.parametrize("target", TARGETS)
def test_a_killed_process_leaves_no_violation(chaos_server: LocalApiServer, tmp_path: Path, target: str) -> None:
    index = TARGETS.index(target)
    options = TrialOptions(
        shape=short_shape(), time_limit=30.0, kill_window=(0.5, 4.0), fault_occurrence=(1, 5), converge_seconds=10.0
    )
    result = run_trial(chaos_server, index, target, 1000 + index, options, tmp_path)
    assert result.killed_at is not None, f"the fault never happened: {describe(result)}"
    assert not result.violations, describe(result)
    assert result.gangs_bound == result.gangs_total


COMBINED_TARGETS = ["scheduler", "binder.between_pods"]


@pytest.mark.parametrize("target", COMBINED_TARGETS)
def test_a_killed_combined_process_leaves_no_violation(
    chaos_server: LocalApiServer, tmp_path: Path, target: str
) -> None:
    """The combined layout: one process for the three services, SIGKILLed at a random moment of the busy
    phase, or exiting where its binder has written some of a gang's bindings and not the rest. Its queue's
    contents die with it; the restarted process's scheduler refills the queue from the API server and its
    binder rolls the started batch forward."""
    index = len(TARGETS) + COMBINED_TARGETS.index(target)
    options = TrialOptions(
        shape=short_shape(),
        time_limit=30.0,
        kill_window=(0.5, 4.0),
        fault_occurrence=(1, 5),
        converge_seconds=10.0,
        layout="combined",
    )
    result = run_trial(chaos_server, index, target, 2000 + index, options, tmp_path)
    assert result.killed_at is not None, f"the fault never happened: {describe(result)}"
    assert result.restarted_at is not None, describe(result)
    assert not result.violations, describe(result)
    assert result.gangs_bound == result.gangs_total
    assert (Path(result.run_dir) / "combined.log").exists()  # it ran as one process
    assert not (Path(result.run_dir) / "scheduler.log").exists()


def test_a_short_soak_leaves_no_gang_pending_that_fits(chaos_server: LocalApiServer, tmp_path: Path) -> None:
    options = SoakOptions(
        duration=60.0, shape=short_shape(), sample_seconds=10.0, drain_seconds=30.0, converge_seconds=10.0
    )
    result = run_soak(chaos_server, options, tmp_path / "soak")
    assert result.gangs_created > 20
    assert not result.violations and not result.pending_fit_gangs, soak_text(result)
