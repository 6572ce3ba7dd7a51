"""phalanx.testing.services.ServiceProcess, the one child-process wrapper of the simulator's and the chaos
stacks, run on a stand-in module instead of a Phalanx service."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from phalanx.faults import FAULT_ENV
from phalanx.testing.services import ServiceExited, ServiceProcess

# Prints the fault it was given and its arguments, then exits with status 3.
STAND_IN = f"""import os, sys
print("fault=" + os.environ.get({FAULT_ENV!r}, "-"), " ".join(sys.argv[1:]), flush=True)
sys.exit(3)
"""


@pytest.fixture
def stand_in(tmp_path: Path) -> ServiceProcess:
    (tmp_path / "stand_in.py").write_text(STAND_IN)
    return ServiceProcess(
        "queue", "stand_in", ["--clock", "real"], 4242, tmp_path / "queue.log", extra_env={"PYTHONPATH": str(tmp_path)}
    )


def run(svc: ServiceProcess, **start: object) -> int:
    svc.start(wait=False, **start)  # type: ignore[arg-type]
    assert svc.proc is not None
    return svc.proc.wait(timeout=30)


def test_the_command_line_is_the_services_own(stand_in: ServiceProcess) -> None:
    assert stand_in.argv() == [
        sys.executable,
        "-m",
        "stand_in",
        "--listen",
        "127.0.0.1:4242",
        "--metrics-listen",
        "off",
        "--clock",
        "real",
    ]
    stand_in.metrics_port = 9100
    assert stand_in.argv()[5:7] == ["--metrics-listen", "127.0.0.1:9100"]
    assert stand_in.metrics_url == "http://127.0.0.1:9100/metrics"


@pytest.mark.starts_processes
def test_each_incarnation_gets_its_own_fault(stand_in: ServiceProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FAULT_ENV, "inherited:1")
    assert run(stand_in) == 3  # no fault given: the environment as it is
    assert run(stand_in, fault="binder.between_pods:2") == 3
    assert stand_in.fault == "binder.between_pods:2"
    assert run(stand_in, fault="") == 3  # none, not even the inherited one
    log = stand_in.log_path.read_text().splitlines()
    said = [line.split()[0] for line in log if line.startswith("fault=")]
    assert said == ["fault=inherited:1", "fault=binder.between_pods:2", "fault=-"]
    banners = [line for line in log if line.startswith("=== incarnation")]
    assert banners == [
        "=== incarnation 1 ===",
        f"=== incarnation 2 {FAULT_ENV}=binder.between_pods:2 ===",
        "=== incarnation 3 ===",
    ]
    assert stand_in.incarnations == 3 and stand_in.exit_code() == 3 and not stand_in.alive()


@pytest.mark.starts_processes
def test_a_service_that_exits_while_starting_is_named_with_its_last_line(stand_in: ServiceProcess) -> None:
    with pytest.raises(ServiceExited) as exited:
        stand_in.start()
    assert str(exited.value) == (
        f"phalanx-queue exited with status 3 while starting: fault=- --listen "
        f"127.0.0.1:4242 --metrics-listen off --clock real (log: {stand_in.log_path})"
    )


@pytest.mark.starts_processes
def test_stop_forgets_the_process_and_kill_keeps_its_status(stand_in: ServiceProcess) -> None:
    run(stand_in)
    stand_in.kill()  # already exited: reaped, its status kept
    assert stand_in.exit_code() == 3
    stand_in.stop()
    assert stand_in.proc is None and stand_in.exit_code() is None
