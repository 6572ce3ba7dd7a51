"""Starts Redis and the three services as separate processes on loopback ports, for simulations and tests.

Each service runs exactly as deployed (its own console module, its own process), in virtual-clock mode
against the simulated backend. A service that dies can be restarted in place: its state is in Redis.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from phalanx.rpc.server import wait_healthy
from phalanx.security.cli import make_tree
from phalanx.security.tls import ALL_IDENTITIES, PLAINTEXT, SERVICE_IDENTITIES, SIMULATOR, Security
from phalanx.telemetry.tracing import quiet_unless_exporting
from phalanx.testing.children import exit_with_parent_env
from phalanx.testing.ports import free_ports
from phalanx.testing.redis_server import RedisServer


class ServiceExited(SystemExit):
    """A service ended while starting; its message is the service's own last line (e.g. the profile
    field it refused). A SystemExit, so `phalanx simulate` ends with that line rather than a traceback."""


@dataclass
class ServiceProcess:
    name: str
    module: str
    args: list[str]
    port: int
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    security: Security = PLAINTEXT  # how this harness (the simulator's identity) reaches the service
    # /metrics: off unless asked (the default ports of several stacks on one machine would collide).
    metrics_port: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def identity(self) -> str:
        return SERVICE_IDENTITIES[self.name]

    def start(self, extra_env: dict[str, str] | None = None, wait: bool = True) -> None:
        env = exit_with_parent_env({**os.environ, **self.extra_env, **(extra_env or {})})
        quiet_unless_exporting(env)
        log = open(self.log_path, "ab")
        metrics = f"127.0.0.1:{self.metrics_port}" if self.metrics_port else "off"
        self.proc = subprocess.Popen([sys.executable, "-m", self.module, "--listen", self.address,
                                      "--metrics-listen", metrics, *self.args],
                                     stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        if wait:
            try:
                self.wait_healthy()
            except TimeoutError:
                raise RuntimeError(f"{self.name} did not become healthy; its log:\n{self.log_tail()}") from None

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics" if self.metrics_port else ""

    def wait_healthy(self, timeout: float = 60) -> None:
        """Waits for SERVING; a process that exits meanwhile raises ServiceExited at once."""
        deadline = time.monotonic() + timeout
        while True:
            self._raise_if_exited()
            try:
                wait_healthy(self.address, timeout=min(1.0, max(deadline - time.monotonic(), 0.0)),
                             security=self.security, peer=self.identity)
                return
            except TimeoutError:
                if time.monotonic() >= deadline:
                    self._raise_if_exited()
                    raise

    def _raise_if_exited(self) -> None:
        code = None if self.proc is None else self.proc.poll()
        if code is None:
            return
        lines = [line for line in self.log_tail(50).splitlines() if line.strip()]
        last = lines[-1].strip() if lines else ""
        if last.startswith(f"phalanx-{self.name}:"):  # the service said why, in one line
            raise ServiceExited(last)
        raise ServiceExited(f"phalanx-{self.name} exited with status {code} while starting"
                            + (f": {last}" if last else "") + f" (log: {self.log_path})")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class Stack:
    """Redis and the three services, started in dependency order."""

    redis_url: str
    prefix: str
    queue: ServiceProcess
    binder: ServiceProcess
    scheduler: ServiceProcess
    redis: RedisServer | None = None
    log_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="phalanx-sim-")))
    security: Security = PLAINTEXT  # how clients of the stack call it (the simulator's identity with TLS)

    @classmethod
    def launch(cls, *, redis_url: str | None = None, prefix: str = "phalanx", default_wait: float = 600.0,
               profile: str | None = None, scheduler_env: dict[str, str] | None = None,
               log_dir: Path | None = None, clock: str = "virtual",
               env: dict[str, str] | None = None, tls: bool = False, metrics: bool = False) -> "Stack":
        """`clock="real"`: every service on the wall clock; the scheduler runs its own loop (long-polling
        the queue when idle) and the simulated backend's bind log records wall time. `env`: extra
        environment of all three services. `tls`: mutual TLS between them, as deployed (certificates made
        in the log directory; `stack.security` is the simulator's identity), to measure what it costs.
        `metrics`: each service serves /metrics on a free loopback port (`svc.metrics_url`)."""
        redis = None
        if redis_url is None:
            redis = RedisServer().start()
            redis_url = redis.url
        logs = log_dir or Path(tempfile.mkdtemp(prefix="phalanx-sim-"))
        logs.mkdir(parents=True, exist_ok=True)
        # Loopback only, so plaintext by default: the embedded cluster's services are reachable from this
        # machine alone.
        common = ["--clock", clock, "--log-level", os.environ.get("PHALANX_LOG_LEVEL", "WARNING")]
        security = PLAINTEXT
        if tls:
            make_tree(logs / "tls", list(ALL_IDENTITIES), [], ["127.0.0.1"], days=1)
            security = Security.tls(logs / "tls" / SIMULATOR)

        def transport(name: str) -> list[str]:
            if not tls:
                return ["--plaintext"]
            return ["--tls-dir", str(logs / "tls" / SERVICE_IDENTITIES[name]), "--health-listen", "127.0.0.1:0"]

        state = ["--redis-url", redis_url, "--redis-prefix", prefix]
        queue_port, binder_port, scheduler_port, *metrics_ports = free_ports(6 if metrics else 3)
        queue = ServiceProcess("queue", "phalanx_queue", [*common, *transport("queue"), "--unschedulable-flush", "0"],
                               queue_port, logs / "queue.log")
        binder = ServiceProcess("binder", "phalanx_binder", [*common, *transport("binder"), *state,
                                                             "--backend", "simulated"], binder_port, logs / "binder.log")
        # Cluster events come through the Scheduler API (the simulator's), on either clock.
        sched_args = [*common, *transport("scheduler"), *state, "--backend", "simulated", "--queue", queue.address,
                      "--binder", binder.address, "--default-wait", str(default_wait)]
        if profile:
            sched_args += ["--profile", profile]
        scheduler = ServiceProcess("scheduler", "phalanx_scheduler", sched_args, scheduler_port, logs / "scheduler.log")
        for svc in (queue, binder, scheduler):
            svc.extra_env.update(env or {})
            svc.security = security
        if metrics_ports:
            queue.metrics_port, binder.metrics_port, scheduler.metrics_port = metrics_ports
        stack = cls(redis_url, prefix, queue, binder, scheduler, redis, logs, security)
        try:
            queue.start(wait=False)
            binder.start(wait=False)
            queue.wait_healthy()
            binder.wait_healthy()
            scheduler.start(scheduler_env)
        except BaseException:
            stack.stop()
            raise
        return stack

    def stop(self) -> None:
        for svc in (self.scheduler, self.binder, self.queue):
            svc.stop()
        if self.redis is not None:
            self.redis.stop()
