"""phalanx-combined, the three services in one process, as a process: it schedules what the three separate
processes schedule, stops on SIGTERM with the scheduler first and exit status 0, and a service that cannot
start ends the whole process at once with that service's own message.

The crash of the one process mid-gang against a real API server is in tests/k8s/test_combined_k8s.py."""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from phalanx.sim.driver import SimOptions
from phalanx.sim.run import simulate
from phalanx.sim.workload import load_workload
from phalanx.testing.ports import free_ports
from phalanx.testing.redis_server import RedisServer
from phalanx.testing.services import CombinedProcess, ServiceExited, ServiceProcess

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _placements(report: dict[str, Any]) -> list[tuple[str, str, Any, Any, Any]]:
    return [(p["namespace"], p["name"], p.get("node"), p.get("boundAt"), p.get("reason")) for p in report["pods"]]


# Two that bind every gang (the knavigator burst in its waves), one that binds none (seed 003's deadlock,
# where the gang times out: the reasons must match then).
@pytest.mark.parametrize(
    ("example", "binds"),
    [("demo-two-jobs.yaml", True), ("knavigator-gang-burst.yaml", True), ("seed003-deadlock.yaml", False)],
)
def test_a_simulation_binds_the_same_pods_at_the_same_times_in_either_layout(
    tmp_path: Path, example: str, binds: bool
) -> None:
    workload = load_workload([REPO / "examples" / example])
    separate = simulate(workload, SimOptions(), log_dir=tmp_path / "services")
    combined = simulate(workload, SimOptions(), log_dir=tmp_path / "combined", layout="combined")
    assert (tmp_path / "combined" / "combined.log").exists()  # it did run as one process
    assert not (tmp_path / "combined" / "scheduler.log").exists()
    assert any(node for _, _, node, _, _ in _placements(separate)) == binds
    assert _placements(combined) == _placements(separate)


def _combined(tmp_path: Path, redis_url: str, ports: list[int], **kw: Any) -> CombinedProcess:
    queue_port, binder_port, scheduler_port = ports
    common = ["--clock", "real", "--plaintext", "--backend", "simulated"]
    state = ["--redis-url", redis_url, "--redis-prefix", "combined"]
    parts = [
        ServiceProcess("queue", "phalanx_queue", common, queue_port, tmp_path / "q.log"),
        ServiceProcess("binder", "phalanx_binder", [*common, *state], binder_port, tmp_path / "b.log"),
        ServiceProcess(
            "scheduler",
            "phalanx_scheduler",
            [
                *common,
                *state,
                "--queue",
                f"127.0.0.1:{queue_port}",
                "--binder",
                f"127.0.0.1:{binder_port}",
                "--dependency-timeout",
                "60",
            ],
            scheduler_port,
            tmp_path / "s.log",
        ),
    ]
    return CombinedProcess.of(parts, tmp_path / "combined.log", **kw)


def test_sigterm_stops_the_scheduler_first_then_the_binder_and_the_queue(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    process = _combined(tmp_path, redis_server.url, free_ports(3))
    process.start()  # every part SERVING on its own port
    assert process.proc is not None
    began = time.monotonic()
    process.proc.send_signal(signal.SIGTERM)
    assert process.proc.wait(timeout=20) == 0
    assert time.monotonic() - began < 10  # idle: no call in flight to wait out
    assert "scheduler+binder+queue: signal 15, shutting down gracefully" in process.log_tail(50)


def test_a_service_that_cannot_listen_ends_the_process_at_once_with_its_message(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    ports = free_ports(3)
    taken = socket.socket()
    taken.bind(("127.0.0.1", ports[1]))  # the binder's
    taken.listen()
    try:
        process = _combined(tmp_path, redis_server.url, ports)
        began = time.monotonic()
        with pytest.raises(ServiceExited, match=rf"--listen 127.0.0.1:{ports[1]}: cannot listen there"):
            process.start()
        # Not after --dependency-timeout: the binder's failure ends the start, and the queue it had started
        # is stopped so the exit is not held by its threads.
        assert time.monotonic() - began < 30
        assert process.exit_code() == 2
    finally:
        taken.close()
