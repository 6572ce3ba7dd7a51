"""The Sentinel chaos trials, short: Redis as a primary, 2 replicas and 3 Sentinels under the gang workload
on a real kube-apiserver; the primary SIGKILLed three times and frozen (SIGSTOP, then SIGCONT once a replica
is promoted) once. Each must end with zero violations (no partial gang, no over-committed node, every gang
bound, Redis equal to the API server), and the services must have moved to the promoted replica. `make
chaos-sentinel` is the long version (30 + 30 trials, and 10 with the scheduler leader killed as well).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_chaos import describe, short_shape

from phalanx.chaos.cluster import start_apiserver
from phalanx.chaos.trials import TrialOptions, run_trial
from phalanx.testing.apiserver import APISERVER_MISSING_REASON, LocalApiServer, apiserver_available

pytestmark = [pytest.mark.integration, pytest.mark.skipif(not apiserver_available(), reason=APISERVER_MISSING_REASON)]

TRIALS = [("sentinel-primary", 0), ("sentinel-primary", 1), ("sentinel-primary", 2), ("sentinel-freeze", 3)]


@pytest.fixture(scope="module")
def sentinel_server() -> Iterator[LocalApiServer]:
    server = start_apiserver()
    yield server
    server.stop()


@pytest.mark.parametrize(("target", "index"), TRIALS)
def test_a_lost_or_frozen_primary_fails_over_and_leaves_no_violation(
    sentinel_server: LocalApiServer, tmp_path: Path, target: str, index: int
) -> None:
    options = TrialOptions(shape=short_shape(), time_limit=45.0, sentinel_kill_window=(0.5, 3.0), converge_seconds=10.0)
    result = run_trial(sentinel_server, 200 + index, target, 2000 + index, options, tmp_path)
    assert result.killed_at is not None, f"the primary was never killed: {describe(result)}"
    assert result.restarted_at is not None, f"the old primary never came back (no failover?): {describe(result)}"
    assert not result.violations, describe(result)
    assert result.gangs_bound == result.gangs_total
    for service in ("scheduler", "binder"):
        log = (Path(result.run_dir) / f"{service}.log").read_text()
        assert "Redis failover: primary 'phalanx' is now" in log, f"{service} did not move to the promoted replica"
