"""Launch to first binding, on a real kube-apiserver, of Phalanx as deployed (bench-startup's run: Redis
with a password, then the queue, binder and scheduler as processes with mutual TLS and leader election,
every PodGroup and pod created before the launch).

Two bounds, both generous so that a loaded CI machine does not fail them by chance (a flaky test there
would keep every change from landing); they catch a start that sleeps, waits in turn or imports much more:
- the first binding within 5 s of the launch, plus the time the rest of this shared machine's load took
  from the two cores meanwhile (half the CPU seconds it spent, kube-apiserver and etcd included); on
  bench-startup's 300 pods it is 2.3-2.9 s before issue 25's start-up work on a quiet machine, 1.2-1.6 s
  after;
- Phalanx's processes spend at most 3.5 CPU seconds from the launch to the first binding: 2.8-3.7 before
  (the binder and the scheduler each imported the kubernetes client's generated CoreV1Api, ~250 pydantic
  models), 1.7-2.3 after (load average 2-3, alternating runs), on this small shape (10 nodes, 10 gangs of
  3). The import that made most of the difference is guarded exactly by tests/unit/test_kube_api.py.
"""

from __future__ import annotations

import pytest

from phalanx.testing.apiserver import APISERVER_MISSING_REASON, apiserver_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not apiserver_available(), reason=APISERVER_MISSING_REASON),
]

FIRST_BINDING_S = 5.0
CPU_S = 3.5


def test_the_first_binding_comes_within_seconds_of_the_launch() -> None:
    from phalanx.bench import startup
    from phalanx.bench.k8s.workloads import Shape

    shape = Shape("startup-test-10n-10x3", nodes=10, gangs=10, gang_size=3, expected_bound=30, timeout=60)
    [run] = startup.run(1, progress=lambda line: None, shape=shape)
    assert run["correct"], run
    phalanx_cpu = run["phalanx_cpu_to_first_binding_s"]
    busy = run["machine_busy_to_first_binding_s"]
    others = max(0.0, busy - phalanx_cpu) if busy is not None else 0.0
    bound = FIRST_BINDING_S + others / 2
    print(
        f"\nfirst binding {run['first_binding_s']:.2f}s after the launch (bound {bound:.2f}s: the rest of the "
        f"machine took {others:.2f} CPU s meanwhile); Phalanx's CPU until then {phalanx_cpu:.2f}s "
        f"{run['startup_cpu_s']}; steps {run['phases_s']}"
    )
    assert run["first_binding_s"] is not None and run["first_binding_s"] <= bound, run
    assert 0 < phalanx_cpu <= CPU_S, run["startup_cpu_s"]
