"""Restarting a service never hangs its starter; the parent-pid variable that ties a service to it.

(That services and redis-server end with an interrupted starter is in test_grpc_services.py.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from phalanx.testing.children import stop_child
from phalanx.testing.ports import free_port
from phalanx.testing.services import ServiceProcess

pytestmark = pytest.mark.integration


def test_restarting_a_service_while_grpc_threads_are_busy_never_hangs(tmp_path: Path) -> None:
    """The simulation restarts a crashed scheduler from a process full of gRPC client threads. Forking such
    a process and running Python before exec (a preexec_fn) could deadlock the child before it exec'd,
    and the starter waited on it forever."""
    service = ServiceProcess(
        "queue", "phalanx_queue", ["--clock", "virtual", "--plaintext"], free_port(), tmp_path / "q.log"
    )
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


def test_a_sigterm_another_thread_takes_still_stops_the_service_gracefully(tmp_path: Path) -> None:
    """The kernel may hand a process-directed SIGTERM (kubelet's, or the parent-death signal) to any thread of
    a service; Python runs the handler on the main thread only, and a main thread asleep in an untimed wait
    never woke: the service ran on until a SIGKILL (a CI run's queue outlived its killed parent that way). Here
    the signal goes to one of the queue's other threads on purpose (tgkill): it stops gracefully, exit code 0.
    Every service waits for its signal the same way (phalanx.lifecycle.wait_for_stop_signal)."""
    import ctypes
    import signal

    service = ServiceProcess(
        "queue", "phalanx_queue", ["--clock", "virtual", "--plaintext"], free_port(), tmp_path / "q.log"
    )
    service.start()
    try:
        assert service.proc is not None and service.alive()
        pid = service.proc.pid
        others = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
        assert others, "the queue runs no thread besides its main one"
        sys_tgkill = {"x86_64": 234, "aarch64": 131}[os.uname().machine]  # tgkill(2): a signal to one thread
        assert ctypes.CDLL(None, use_errno=True).syscall(sys_tgkill, pid, others[-1], signal.SIGTERM) == 0
        try:
            code = service.proc.wait(timeout=8)
        except subprocess.TimeoutExpired:
            pytest.fail("still running 8 s after a SIGTERM that a thread other than the main one took")
        assert code == 0  # its handler ran: a graceful stop, not the default SIGTERM death (-15)
    finally:
        service.kill()


def test_a_service_told_its_parent_is_gone_exits_at_once() -> None:
    env = {**os.environ, "PHALANX_PARENT_PID": "1", "OTEL_SDK_DISABLED": "true"}
    done = subprocess.run(
        [sys.executable, "-m", "phalanx_queue", "--listen", f"127.0.0.1:{free_port()}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "PHALANX_PARENT_PID=1" in done.stderr and "already exited" in done.stderr


def test_a_malformed_parent_pid_is_named() -> None:
    env = {**os.environ, "PHALANX_PARENT_PID": "abc", "OTEL_SDK_DISABLED": "true"}
    done = subprocess.run(
        [sys.executable, "-m", "phalanx_queue", "--listen", f"127.0.0.1:{free_port()}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "PHALANX_PARENT_PID='abc'" in done.stderr


def test_a_queue_told_to_stop_ends_its_long_polls_and_exits_at_once(tmp_path: Path) -> None:
    """A scheduler's idle long poll holds a server thread in a wait of up to 30 s, and the interpreter's exit
    joins that thread: before the stop drained the queue, a SIGTERM left the process running until the wait
    ran out (or the bounded stop's os._exit at 10 s, status 1). Now the poll answers empty at once and the
    process ends cleanly."""
    from phalanx.v1 import queue_pb2, queue_pb2_grpc

    service = ServiceProcess(
        "queue", "phalanx_queue", ["--clock", "virtual", "--plaintext"], free_port(), tmp_path / "q.log"
    )
    service.start()
    with grpc.insecure_channel(service.address) as ch:
        stub = queue_pb2_grpc.QueueStub(ch)
        poll = stub.Pop.future(
            queue_pb2.PopRequest(max_pods=1, wait_seconds=25, consumer="s", consumer_incarnation="i"), timeout=60
        )
        time.sleep(0.5)  # the poll is waiting in the server
        assert not poll.done()
        started = time.monotonic()
        assert service.proc is not None
        service.proc.terminate()
        code = service.proc.wait(timeout=15)
        took = time.monotonic() - started
        assert list(poll.result(timeout=5).pods) == []  # answered, not cut off
    assert code == 0, service.log_tail()
    assert took < 3.0, f"the queue took {took:.1f} s to stop with a long poll open:\n{service.log_tail()}"


def test_stop_child_kills_a_child_that_ignores_sigterm_after_the_grace() -> None:
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    stubborn = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert stubborn.stdout is not None and stubborn.stdout.readline() == "up\n"  # its handler is in place
    started = time.monotonic()
    stop_child(stubborn, grace=0.3)
    assert stubborn.returncode == -9 and 0.3 <= time.monotonic() - started < 5  # SIGKILL, after the grace
    polite = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stop_child(polite)
    assert polite.returncode == -15  # SIGTERM was enough
    stop_child(polite)  # an exited child: nothing to do, no error
