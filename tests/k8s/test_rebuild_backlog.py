"""The rebuild's backlog, killed in the middle, on a real kube-apiserver with Phalanx as deployed (Redis with a
password, the three services as processes, mutual TLS, leader election).

A new leader hands the queue the first pending pods it listed before its loop starts, and the rest in chunks
while the loop runs (cluster/outbox.py). Here the scheduler is killed (PHALANX_FAULT=scheduler.mid_backlog:2)
after the first chunk of the rest went and before the second: the queue holds some of the pods, the loop may
have placed some, and the others were only in the dead process's memory. The restarted scheduler, once the
dead one's Lease expires, lists the API server again; every gang binds whole and no node is over-committed.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from phalanx.bench.k8s.runner import RunOptions, run_once
from phalanx.bench.k8s.schedulers import PhalanxUnderTest
from phalanx.bench.k8s.workloads import PHALANX, Shape
from phalanx.cluster.feed import BACKLOG_CHUNK, FIRST_ADDS
from phalanx.faults import EXIT_CODE
from phalanx.testing.apiserver import APISERVER_MISSING_REASON, apiserver_available
from phalanx.testing.services import ServiceExited

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not apiserver_available(), reason=APISERVER_MISSING_REASON),
]

GANG = 3
# Enough pending pods for a backlog of two chunks: the kill comes between them.
GANGS = (FIRST_ADDS + BACKLOG_CHUNK) // GANG + 20
FAULT = "scheduler.mid_backlog:2"


class KilledMidBacklog(PhalanxUnderTest):
    """Phalanx launched with the scheduler's fault armed; a thread restarts the scheduler when the fault ends
    it, as a kubelet restarts a crashed container."""

    def __init__(self, kubeconfig: str, run_dir: Path) -> None:
        super().__init__(kubeconfig, run_dir)
        self.fired = threading.Event()
        self._done = threading.Event()
        self._watcher = threading.Thread(target=self._restart_when_killed, daemon=True)

    def launch(self) -> None:
        try:
            self.stack.start({"scheduler": FAULT}, timeout=120)
        except ServiceExited:  # the fault came before the health check saw the scheduler serving
            pass
        self._watcher.start()

    def _restart_when_killed(self) -> None:
        while not self._done.wait(0.05):
            code = self.stack.exit_code("scheduler")
            if code is None:
                continue
            assert code == EXIT_CODE, f"the scheduler exited with {code}, not at the fault"
            self.fired.set()
            self.stack.restart("scheduler")
            return

    def alive(self) -> bool:  # the scheduler is down a moment by design
        return self.stack.alive("queue") and self.stack.alive("binder")

    def stop(self) -> None:
        self._done.set()
        super().stop()


def test_a_scheduler_killed_between_two_chunks_of_its_backlog_leaves_no_pod_behind(tmp_path: Path) -> None:
    shape = Shape("backlog-kill", nodes=20, gangs=GANGS, gang_size=GANG, expected_bound=GANGS * GANG, timeout=120)
    launched: list[KilledMidBacklog] = []

    def phalanx(kubeconfig: str, run_dir: Path) -> KilledMidBacklog:
        launched.append(KilledMidBacklog(kubeconfig, run_dir))
        return launched[-1]

    result = run_once(shape, PHALANX, RunOptions(log_dir=tmp_path, phalanx=phalanx))
    [sut] = launched
    log = (sut.run_dir / "scheduler.log").read_text()
    assert sut.fired.is_set() and "fault injection: exiting at scheduler.mid_backlog" in log, log[-3000:]
    check = result["correctness"]
    assert check["ok"], check
    assert check["gangs_bound"] == GANGS and check["partial_gangs"] == 0 and check["overcommitted_nodes"] == 0
