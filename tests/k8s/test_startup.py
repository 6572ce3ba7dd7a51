"""Launch to first binding, on a real kube-apiserver, of Phalanx as deployed (bench-startup's run: Redis
with a password, then the queue, binder and scheduler as processes with mutual TLS and leader election,
every PodGroup and pod created before the launch).

Two bounds, each of which the start-up before issue 25 broke:
- the first binding within 3 s of the launch, plus the time the rest of this shared machine's load took
  from the two cores meanwhile (half the CPU seconds it spent, kube-apiserver and etcd included): 2.3-2.9 s
  before on a quiet machine, 1.2-1.6 s after (bench/startup.txt);
- Phalanx's processes spend at most 2.8 CPU seconds from the launch to the first binding, whatever the
  machine's load: 2.8-3.7 before (the binder and the scheduler each imported the kubernetes client's
  generated CoreV1Api, ~250 pydantic models), 2.0-2.1 after under a load average of 3-9, 2.5 at worst seen
  (contention inflates CPU time too). The import itself is guarded exactly by tests/unit/test_kube_api.py.
"""

from __future__ import annotations

import pytest

from phalanx.testing.apiserver import APISERVER_MISSING_REASON, apiserver_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not apiserver_available(), reason=APISERVER_MISSING_REASON),
]

FIRST_BINDING_S = 3.0
CPU_S = 2.8


def test_the_first_binding_comes_within_seconds_of_the_launch() -> None:
    from phalanx.bench import startup

    [run] = startup.run(1, progress=lambda line: None)
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
