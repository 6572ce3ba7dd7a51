"""The compose stack brought up for real: tools, images, podman's Docker API, `compose up`, teardown.

Everything comes from this repository's scripts (see tests/e2e/README.md): Compose v2 from its Go module
(hack/build-compose.sh), the collector, Jaeger and Redis images (hack/build-otel-images.sh), the Phalanx
image on the Debian base (hack/build-base-image.sh, deploy/docker/Dockerfile), podman's API service
(hack/podman-api.sh). The published ports are picked free, and the project has its own name, so the stack
runs beside anything else on the machine.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from phalanx.testing.ports import free_ports

REPO = Path(__file__).resolve().parents[2]
HACK = REPO / "hack"
COMPOSE_FILES = ("docker-compose.yml", "docker-compose.observability.yml")
PROJECT = "phalanx-e2e"
PHALANX_IMAGE = os.environ.get("PHALANX_E2E_IMAGE", "localhost/phalanx:compose-e2e")
OPT_IN = "PHALANX_E2E"

# What the run measured (seconds), printed at the end of the run by conftest.
TIMINGS: dict[str, float] = {}


def problem() -> str | None:
    """Why the compose stack cannot come up here, or None."""
    if os.environ.get(OPT_IN) != "1":
        return (
            f"opt-in ({OPT_IN}=1, or `make e2e-compose`): builds the stack's images and brings it up "
            "with podman (minutes the first time)"
        )
    for tool, package in (("podman", "podman"), ("runc", "runc"), ("curl", "curl")):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install podman runc netavark aardvark-dns curl)"
    if not Path("/usr/lib/podman/netavark").exists() or not Path("/usr/lib/podman/aardvark-dns").exists():
        return (
            "netavark and aardvark-dns are needed for DNS between the services (apt-get install netavark aardvark-dns)"
        )
    if shutil.which("go") is None:
        return "Go is needed to build Compose, the collector and Jaeger from their modules"
    if os.geteuid() != 0:
        return "rootful podman is needed (the API service's socket, netavark networks)"
    return None


def run(
    cmd: list[str], *, timeout: float, env: dict[str, str] | None = None, check: bool = True, what: str = ""
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{what or ' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-4000:]}\n{proc.stdout[-2000:]}"
        )
    return proc


def timed(name: str, cmd: list[str], *, timeout: float, env: dict[str, str] | None = None) -> str:
    start = time.monotonic()
    proc = run(cmd, timeout=timeout, env=env)
    TIMINGS[name] = time.monotonic() - start
    # The scripts say what they built ("build-otel-images: built the collector 0.165.0 in 115s"): each step.
    for built in re.finditer(r"^[\w-]+: built (.+?) in (\d+)s", proc.stderr, re.M):
        TIMINGS[f"  {built[1]}"] = float(built[2])
    return proc.stdout


def key_values(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


@dataclass
class Stack:
    """A running compose project; `compose(...)` runs the compose CLI against it."""

    compose_cmd: list[str]
    env: dict[str, str]
    ports: dict[str, int]
    workdir: Path
    started_api: bool = False
    images: dict[str, str] = field(default_factory=dict)

    def compose(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        files = [a for f in COMPOSE_FILES for a in ("-f", str(REPO / f))]
        return run(
            [*self.compose_cmd, "--project-directory", str(REPO), "-p", PROJECT, *files, *args],
            timeout=timeout,
            env=self.env,
            check=check,
            what=f"compose {' '.join(args)}",
        )

    def copy_out(self, src: str, name: str) -> Path:
        """`compose cp SERVICE:PATH` into the work directory."""
        dest = self.workdir / name
        self.compose("cp", src, str(dest))
        return dest


HOST_PORTS = (
    "PHALANX_QUEUE_HOST_PORT",
    "PHALANX_SCHEDULER_HOST_PORT",
    "PHALANX_BINDER_HOST_PORT",
    "PHALANX_QUEUE_METRICS_HOST_PORT",
    "PHALANX_SCHEDULER_METRICS_HOST_PORT",
    "PHALANX_BINDER_METRICS_HOST_PORT",
    "REDIS_HOST_PORT",
    "OTLP_GRPC_HOST_PORT",
    "OTLP_HTTP_HOST_PORT",
    "OTELCOL_HEALTH_HOST_PORT",
    "JAEGER_HOST_PORT",
)


def prepare(workdir: Path) -> Stack:
    """Tools and images (built when missing), podman's API service; returns the stack, not yet up."""
    compose_bin = (
        timed("compose binary", ["bash", str(HACK / "build-compose.sh")], timeout=1800).strip().splitlines()[-1]
    )
    images = key_values(
        timed(
            "images (base, collector, Jaeger, Redis, Phalanx)",
            ["bash", str(HACK / "build-otel-images.sh"), "--phalanx-image", PHALANX_IMAGE],
            timeout=3600,
        )
    )
    api = run(["bash", str(HACK / "podman-api.sh"), "start"], timeout=120)
    started_api = "API service started" in api.stderr
    docker_host = key_values(api.stdout)["DOCKER_HOST"]
    ports = dict(zip(HOST_PORTS, free_ports(len(HOST_PORTS))))
    # Only what compose needs: the caller's PHALANX_*/OTEL_* settings must not leak into the stack.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHALANX_", "OTEL", "COMPOSE_", "DOCKER_"))}
    env.update(images)
    env.update({k: str(v) for k, v in ports.items()})
    env["DOCKER_HOST"] = docker_host
    return Stack([compose_bin], env, ports, workdir, started_api, images)


def up(stack: Stack) -> None:
    start = time.monotonic()
    # --no-build: the images were built above (compose's own build would go through podman's API, without
    # the CA mounts a TLS-intercepting proxy needs).
    stack.compose("up", "-d", "--wait", "--wait-timeout", "300", "--no-build", timeout=420)
    TIMINGS["compose up --wait"] = time.monotonic() - start


def down(stack: Stack, log_file: Path) -> None:
    logs = stack.compose("logs", "--no-color", "--timestamps", timeout=120, check=False)
    log_file.write_text(logs.stdout + logs.stderr)
    start = time.monotonic()
    stack.compose("down", "-v", "--timeout", "20", timeout=300, check=False)
    TIMINGS["compose down -v"] = time.monotonic() - start
    if stack.started_api:
        run(["bash", str(HACK / "podman-api.sh"), "stop"], timeout=60, check=False)
