"""The services as real processes, told something they cannot run with or losing a dependency: each ends
(or, for a dependency lost while running, logs) one line naming the file, field or address, and never a
traceback. And --version."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import grpc
import pytest
from waiting import wait_for

from phalanx.model.objects import NodeInfo, PodInfo
from phalanx.rpc.clients import QueueClient, SchedulerClient
from phalanx.security.tls import PLAINTEXT
from phalanx.sim.services import Stack
from phalanx.testing.ports import free_port
from phalanx.testing.services import ServiceExited, ServiceProcess
from phalanx.v1 import binder_pb2, binder_pb2_grpc

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SERVICES = ("queue", "scheduler", "binder")


def run_service(service: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OTEL_SDK_DISABLED": "true"}
    return subprocess.run(
        [sys.executable, "-m", f"phalanx_{service}", "--listen", f"127.0.0.1:{free_port()}", "--plaintext", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    return lines[0]


# -- --version ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("service", SERVICES)
def test_version(service: str) -> None:
    done = run_service(service, "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"phalanx-{service} {version('phalanx')}"


def test_version_of_the_console_scripts() -> None:
    script = Path(sys.executable).with_name("phalanx-binder")
    if not script.exists():
        pytest.skip(f"{script} is not installed (pip install -e .)")
    done = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == f"phalanx-binder {version('phalanx')}"


# -- a bad scheduling profile ---------------------------------------------------------------------------

PROFILES = {
    "negative weight": ("scores: {LeastAllocated: -1}\n", "scores.LeastAllocated: weight must be >= 0, got -1"),
    "unknown plugin": (
        "filters: [NodeResourcesFit, NodeResourcesFitt]\n",
        "filters: unknown filter plugin 'NodeResourcesFitt' (item 2; known: ",
    ),
    "unknown score plugin": (
        "scores: {LeastAllocated: 1, MostAlocated: 2}\n",
        "scores.MostAlocated: unknown score plugin (known: ",
    ),
    "bad YAML": ("scores: {LeastAllocated: 1\n", "invalid YAML at line 2, column 1: "),
}


@pytest.mark.parametrize("text, says", PROFILES.values(), ids=PROFILES.keys())
def test_a_bad_profile_ends_the_scheduler_with_one_line(tmp_path: Path, text: str, says: str) -> None:
    profile = tmp_path / "profile.yaml"
    profile.write_text(text)
    # Nothing else is running: the profile is judged before the scheduler waits for anything.
    done = run_service(
        "scheduler",
        "--metrics-listen",
        "off",
        "--backend",
        "simulated",
        "--profile",
        str(profile),
        "--queue",
        f"127.0.0.1:{free_port()}",
        timeout=30,
    )
    assert done.returncode == 2
    assert one_line(done).startswith(f"phalanx-scheduler: --profile {profile}: {says}")


@pytest.mark.parametrize("service", ["scheduler", "binder"])
def test_a_kubeconfig_naming_no_server_ends_the_service_with_one_line(tmp_path: Path, service: str) -> None:
    """Read at start (the scheduler's feed and Lease would read it later on their own threads): the line
    names the file and the field, not a traceback."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "current-context: x\ncontexts: [{name: x, context: {cluster: prod, user: u}}]\n"
        "clusters: [{name: prod, cluster: {certificate-authority-data: abc}}]\nusers: [{name: u, user: {token: t}}]\n"
    )
    done = run_service(
        service, "--metrics-listen", "off", "--backend", "kubernetes", "--kubeconfig", str(kubeconfig), timeout=30
    )
    assert done.returncode == 2, done.stderr
    assert one_line(done) == f"phalanx-{service}: kubeconfig {kubeconfig}: cluster 'prod' has no server"


def test_a_missing_profile_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    done = run_service("scheduler", "--metrics-listen", "off", "--backend", "simulated", "--profile", str(missing))
    assert done.returncode == 2
    assert one_line(done) == f"phalanx-scheduler: --profile {missing}: cannot read it: No such file or directory"


def test_simulate_shows_the_schedulers_line_only(tmp_path: Path) -> None:
    profile = tmp_path / "profile.yaml"
    profile.write_text("scores: {LeastAllocated: -1}\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "phalanx.cli.main",
            "simulate",
            "-f",
            str(REPO / "examples" / "demo-two-jobs.yaml"),
            "--profile",
            str(profile),
            "-o",
            str(tmp_path / "out.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OTEL_SDK_DISABLED": "true"},
    )
    assert done.returncode != 0
    assert one_line(done) == (
        f"phalanx-scheduler: --profile {profile}: scores.LeastAllocated: weight must be >= 0, got -1"
    )


# -- dependencies down at start -------------------------------------------------------------------------


def test_the_scheduler_names_a_queue_that_is_not_serving() -> None:
    queue = f"127.0.0.1:{free_port()}"
    done = run_service(
        "scheduler", "--metrics-listen", "off", "--backend", "simulated", "--queue", queue, "--dependency-timeout", "1"
    )
    assert done.returncode == 1
    assert one_line(done) == (
        f"phalanx-scheduler: --queue {queue}: the queue is not serving (no healthy answer "
        "within 1s; --dependency-timeout)"
    )


def test_the_scheduler_names_redis_when_it_is_down_at_start(tmp_path: Path) -> None:
    stack = Stack.launch(log_dir=tmp_path)  # a queue and a binder that serve (with their own Redis)
    try:
        dead = free_port()
        scheduler = ServiceProcess(
            "scheduler",
            "phalanx_scheduler",
            [
                "--plaintext",
                "--clock",
                "virtual",
                "--backend",
                "simulated",
                "--redis-url",
                f"redis://127.0.0.1:{dead}/0",
                "--queue",
                stack.queue.address,
                "--binder",
                stack.binder.address,
            ],
            free_port(),
            tmp_path / "s2.log",
        )
        with pytest.raises(ServiceExited) as exited:  # the harness reports the service's own line
            scheduler.start()
        assert str(exited.value) == (
            f"phalanx-scheduler: --redis-url: Redis at 127.0.0.1:{dead} is unreachable: "
            f"Error 111 connecting to 127.0.0.1:{dead}. Connection refused."
        )
        assert scheduler.proc is not None and scheduler.proc.returncode == 1
        assert "Traceback" not in scheduler.log_path.read_text()
    finally:
        stack.stop()


# -- dependencies lost while running --------------------------------------------------------------------


def test_a_lost_queue_and_a_lost_redis_are_named_in_one_line(tmp_path: Path) -> None:
    stack = Stack.launch(clock="real", log_dir=tmp_path)  # the scheduler runs its own loop
    try:
        queue = stack.queue.address
        stack.queue.kill()
        wait_for(
            lambda: f"the queue at {queue} did not answer: UNAVAILABLE" in stack.scheduler.log_path.read_text(),
            20,
            "the scheduler naming the queue",
        )
        time.sleep(2.5)  # more failed steps: they are not logged again while the line is the same
        log = stack.scheduler.log_path.read_text()
        assert "Traceback" not in log, log
        assert stack.scheduler.alive()  # it keeps trying; readiness reports the failure
        lines = [line for line in log.splitlines() if "scheduling step failed" in line]
        assert 1 <= len(lines) <= 2, log  # "stream removed", then "connection refused"

        assert stack.redis is not None
        address = f"127.0.0.1:{stack.redis.port}"
        stack.redis.kill()
        with grpc.insecure_channel(stack.binder.address) as ch:
            with pytest.raises(grpc.RpcError) as refused:
                binder_pb2_grpc.BinderStub(ch).Bind(
                    binder_pb2.BindRequest(
                        assignments=[binder_pb2.Assignment(pod_key="jobs/a", node="node-1")], now=1.0
                    ),
                    timeout=20,
                )
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert refused.value.details().startswith(f"Redis at {address} is unreachable: ")
        binder_log = stack.binder.log_path.read_text()
        assert f"binder: Redis at {address} is unreachable" in binder_log and "Traceback" not in binder_log
    finally:
        stack.stop()


def test_a_lost_binder_is_named_in_one_line(tmp_path: Path) -> None:
    stack = Stack.launch(clock="real", log_dir=tmp_path)
    queue, scheduler = QueueClient(stack.queue.address, PLAINTEXT), SchedulerClient(stack.scheduler.address, PLAINTEXT)
    try:
        scheduler.apply(time.time(), nodes=[NodeInfo("node-1", {"cpu": 4000, "pods": 110_000})])
        binder = stack.binder.address
        stack.binder.kill()
        queue.add([PodInfo("jobs", "p", uid="p", requests={"cpu": 100, "pods": 1000})], time.time())
        wait_for(
            lambda: f"the binder at {binder} did not answer: UNAVAILABLE" in stack.scheduler.log_path.read_text(),
            20,
            "the scheduler naming the binder",
        )
        log = stack.scheduler.log_path.read_text()
        assert "Traceback" not in log and "_InactiveRpcError" not in log, log
    finally:
        queue.close()
        scheduler.close()
        stack.stop()


# -- the metrics port -----------------------------------------------------------------------------------


@pytest.mark.parametrize("service", SERVICES)
def test_a_busy_metrics_port_is_named(service: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_service(service, "--metrics-listen", f"127.0.0.1:{port}")
    assert done.returncode == 2
    assert one_line(done) == (
        f"phalanx-{service}: --metrics-listen 127.0.0.1:{port}: cannot listen on "
        f"127.0.0.1:{port}: Address already in use"
    )


def held_by_a_connection() -> tuple[socket.socket, socket.socket, int]:
    """A loopback port held as an outgoing connection's local port holds it (what a port picked free and
    used later can become): grpc's bind fails there with a bare RuntimeError."""
    server, taken = socket.socket(), socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    taken.bind(("127.0.0.1", 0))
    taken.connect(server.getsockname())
    return server, taken, taken.getsockname()[1]


def busy_port_line(service: str, flag: str, port: int) -> str:
    return (
        f"phalanx-{service}: {flag} 127.0.0.1:{port}: cannot listen there "
        "(the port is taken, or the host is not an address of this machine)"
    )


@pytest.mark.parametrize("service", ["queue", "binder"])
@pytest.mark.parametrize("flag", ["--listen", "--health-listen"])
def test_a_busy_grpc_port_is_named(service: str, flag: str) -> None:
    server, taken, port = held_by_a_connection()
    with server, taken:
        done = run_service(service, flag, f"127.0.0.1:{port}", "--metrics-listen", "off", "--backend", "simulated")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1] == busy_port_line(service, flag, port)  # after grpc's own log line


@pytest.mark.parametrize("flag", ["--listen", "--health-listen"])
def test_a_busy_grpc_port_of_the_scheduler_is_named(tmp_path: Path, flag: str) -> None:
    stack = Stack.launch(log_dir=tmp_path)  # the scheduler binds once the queue and the binder serve
    server, taken, port = held_by_a_connection()
    try:
        args = ["--plaintext", "--metrics-listen", "off", "--backend", "simulated", "--clock", "virtual"]
        args += ["--redis-url", stack.redis_url, "--queue", stack.queue.address, "--binder", stack.binder.address]
        done = run_service("scheduler", *args, flag, f"127.0.0.1:{port}")
    finally:
        server.close()
        taken.close()
        stack.stop()
    assert done.returncode == 2
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1] == busy_port_line("scheduler", flag, port)


def test_a_malformed_metrics_address_is_named() -> None:
    done = run_service("queue", "--metrics-listen", "localhost")
    assert done.returncode == 2
    assert one_line(done) == (
        "phalanx-queue: --metrics-listen localhost: expected host:port (e.g. 0.0.0.0:9091), or off, got 'localhost'"
    )
