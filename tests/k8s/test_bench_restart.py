"""bench-restart's run on a small shape: every figure it reports is there and every new gang was bound (the
whole stack launched on bound gangs, then the scheduler alone restarted). The 30,000-pod figures are
bench/restart.txt's."""

from __future__ import annotations

import pytest

from phalanx.testing.apiserver import APISERVER_MISSING_REASON, apiserver_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not apiserver_available(), reason=APISERVER_MISSING_REASON),
]


def test_a_restart_on_bound_gangs_schedules_a_new_gang() -> None:
    from phalanx.bench import restart
    from phalanx.bench.k8s.workloads import Shape

    shape = Shape("restart-test-20n-20x3", nodes=20, gangs=20, gang_size=3, expected_bound=60)
    out = restart.run(shape, peer=False, settle=3.0, workers=4, progress=lambda line: None)
    launch, again = out["launch"], out["scheduler_restart"]
    assert launch["launch_to_new_gang_bound_s"] is not None, out
    assert launch["next_gang_created_to_bound_s"] is not None, out
    assert again["restart_to_new_gang_bound_s"] is not None, out
    assert set(launch["processes"]) == {"redis", "queue", "binder", "scheduler"}
    assert set(again["processes"]) == {"scheduler"}
    assert all(p["peak_rss_mib"] > 0 for p in launch["processes"].values())
    assert "restart-test" not in restart.table({"sets": {"t": {"machine": {}, "result": out}}})  # renders
