"""Services and redis-server started by a run end with it, and restarting one never hangs the starter."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from phalanx.sim.services import ServiceProcess
from phalanx.testing.redis_server import free_port
from waiting import wait_for

pytestmark = pytest.mark.integration

STARTER = """
import sys, time
from pathlib import Path
from phalanx.sim.services import ServiceProcess
from phalanx.testing.redis_server import RedisServer, free_port
redis = RedisServer().start()
queue = ServiceProcess("queue", "phalanx_queue", ["--clock", "virtual"], free_port(), Path(sys.argv[1]))
queue.start()
print(redis.proc.pid, queue.proc.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead but not yet reaped by its (now init) parent.
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "State:\tZ" in status.read_text())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signals are Linux-only")
def test_redis_and_services_exit_when_their_starter_is_killed(tmp_path: Path) -> None:
    starter = subprocess.Popen([sys.executable, "-c", STARTER, str(tmp_path / "queue.log")],
                               stdout=subprocess.PIPE, text=True)
    try:
        line = starter.stdout.readline()  # type: ignore[union-attr]
        redis_pid, queue_pid = (int(p) for p in line.split())
        assert _alive(redis_pid) and _alive(queue_pid)
    finally:
        starter.kill()
        starter.wait()
    wait_for(lambda: not _alive(redis_pid) and not _alive(queue_pid), 15, "redis-server and the queue to exit")


def test_restarting_a_service_while_grpc_threads_are_busy_never_hangs(tmp_path: Path) -> None:
    """The simulation restarts a crashed scheduler from a process full of gRPC client threads. Forking such
    a process and running Python before exec (a preexec_fn) could deadlock the child before it exec'd,
    and the starter waited on it forever."""
    service = ServiceProcess("queue", "phalanx_queue", ["--clock", "virtual"], free_port(), tmp_path / "q.log")
    service.start()
    stop = threading.Event()

    def busy() -> None:  # keeps gRPC's poller and executor threads working in this process
        while not stop.is_set():
            with grpc.insecure_channel(service.address) as ch:
                try:
                    health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=0.5)
                except grpc.RpcError:
                    pass

    workers = [threading.Thread(target=busy, daemon=True) for _ in range(3)]
    for w in workers:
        w.start()
    try:
        for _ in range(12):
            service.kill()
            service.start()  # raises after 60 s if the new process never serves
            assert service.alive()
    finally:
        stop.set()
        for w in workers:
            w.join(timeout=5)
        service.stop()


def test_a_service_told_its_parent_is_gone_exits_at_once() -> None:
    env = {**os.environ, "PHALANX_PARENT_PID": "1", "OTEL_SDK_DISABLED": "true"}
    done = subprocess.run([sys.executable, "-m", "phalanx_queue", "--listen", f"127.0.0.1:{free_port()}"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "PHALANX_PARENT_PID=1" in done.stderr and "already exited" in done.stderr


def test_a_malformed_parent_pid_is_named() -> None:
    env = {**os.environ, "PHALANX_PARENT_PID": "abc", "OTEL_SDK_DISABLED": "true"}
    done = subprocess.run([sys.executable, "-m", "phalanx_queue", "--listen", f"127.0.0.1:{free_port()}"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "PHALANX_PARENT_PID='abc'" in done.stderr
