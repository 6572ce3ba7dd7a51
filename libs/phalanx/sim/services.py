"""Starts Redis and the three services as separate processes on loopback ports, for simulations and tests.

Each service runs exactly as deployed (its own console module, its own process; see
phalanx.testing.services), in virtual-clock mode against the simulated backend. A service that dies can be
restarted in place: its state is in Redis. `layout="combined"` runs the three as one phalanx-combined process
on the same addresses instead.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from phalanx.security.cli import make_tree
from phalanx.security.tls import ALL_IDENTITIES, PLAINTEXT, SERVICE_IDENTITIES, SIMULATOR, Security
from phalanx.testing.layouts import COMBINED, LAYOUTS, SEPARATE
from phalanx.testing.ports import free_ports
from phalanx.testing.redis_server import RedisServer
from phalanx.testing.services import CombinedProcess, ServiceProcess


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
    combined: CombinedProcess | None = None  # the combined layout's one process (the three then unstarted)

    @classmethod
    def launch(
        cls,
        *,
        redis_url: str | None = None,
        prefix: str = "phalanx",
        default_wait: float = 600.0,
        gang_retry_backoff: float | None = None,
        profile: str | None = None,
        scheduler_env: dict[str, str] | None = None,
        log_dir: Path | None = None,
        clock: str = "virtual",
        env: dict[str, str] | None = None,
        tls: bool = False,
        metrics: bool = False,
        layout: str = SEPARATE,
    ) -> "Stack":
        """`clock="real"`: every service on the wall clock; the scheduler runs its own loop (long-polling
        the queue when idle) and the simulated backend's bind log records wall time. `env`: extra
        environment of all three services. `tls`: mutual TLS between them, as deployed (certificates made
        in the log directory; `stack.security` is the simulator's identity), to measure what it costs.
        `metrics`: each service serves /metrics on a free loopback port (`svc.metrics_url`). `layout`:
        "services" (a process each) or "combined" (one phalanx-combined process for the three)."""
        if layout not in LAYOUTS:
            raise ValueError(f"layout {layout!r}: one of {', '.join(LAYOUTS)}")
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
        queue = ServiceProcess(
            "queue",
            "phalanx_queue",
            [*common, *transport("queue"), "--backend", "simulated", "--unschedulable-flush", "0"],
            queue_port,
            logs / "queue.log",
        )
        binder = ServiceProcess(
            "binder",
            "phalanx_binder",
            [*common, *transport("binder"), *state, "--backend", "simulated"],
            binder_port,
            logs / "binder.log",
        )
        # Cluster events come through the Scheduler API (the simulator's), on either clock.
        sched_args = [
            *common,
            *transport("scheduler"),
            *state,
            "--backend",
            "simulated",
            "--queue",
            queue.address,
            "--binder",
            binder.address,
            "--default-wait",
            str(default_wait),
        ]
        if gang_retry_backoff is not None:
            sched_args += ["--gang-retry-backoff", str(gang_retry_backoff)]
        if profile:
            sched_args += ["--profile", profile]
        scheduler = ServiceProcess("scheduler", "phalanx_scheduler", sched_args, scheduler_port, logs / "scheduler.log")
        for svc in (queue, binder, scheduler):
            svc.extra_env.update(env or {})
            svc.security = security
        if metrics_ports:
            queue.metrics_port, binder.metrics_port, scheduler.metrics_port = metrics_ports
        stack = cls(redis_url, prefix, queue, binder, scheduler, redis, logs, security)
        if layout == COMBINED:
            stack.combined = CombinedProcess.of(
                [queue, binder, scheduler],
                logs / "combined.log",
                extra_env={**(env or {}), **(scheduler_env or {})},
                security=security,
            )
            try:
                stack.combined.start()
            except BaseException:
                stack.stop()
                raise
            return stack
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
        if self.combined is not None:
            self.combined.stop()
        for svc in (self.scheduler, self.binder, self.queue):
            svc.stop()
        if self.redis is not None:
            self.redis.stop()
