"""Redis and the three services as separate OS processes, each killable and restartable in place.

Command lines are those of a Helm deployment (`python -m phalanx_<service>` with the Kubernetes backend
and the wall clock); ports are fixed when the stack is made, so a restarted process comes back on the
same address and its peers find it again. Processes must be started and restarted from one long-lived
thread (the trial's main loop): the parent-death signal the services ask for fires when the *thread*
that spawned them ends.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from phalanx.faults import FAULT_ENV
from phalanx.rpc.server import wait_healthy
from phalanx.security.cli import make_tree
from phalanx.security.tls import SERVICE_IDENTITIES
from phalanx.telemetry.tracing import quiet_unless_exporting
from phalanx.testing.children import exit_with_parent_env
from phalanx.testing.ports import free_ports
from phalanx.testing.redis_server import RedisServer

SERVICES = ("queue", "binder", "scheduler")
REDIS = "redis"


@dataclass
class ServiceProcess:
    """One service: its command line, its log file, and the current incarnation."""

    name: str
    argv: list[str]
    port: int
    log_path: Path
    health_port: int = 0  # plaintext, health only (what kubelet probes); 0: health on `port`
    proc: subprocess.Popen[bytes] | None = None
    incarnations: int = 0
    fault: str = ""  # PHALANX_FAULT of the current incarnation ("" for none)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def health_address(self) -> str:
        return f"127.0.0.1:{self.health_port or self.port}"

    def start(self, fault: str = "") -> None:
        env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
        env = exit_with_parent_env(env)
        quiet_unless_exporting(env)
        if fault:
            env[FAULT_ENV] = fault
        self.incarnations += 1
        self.fault = fault
        with open(self.log_path, "ab") as log:
            log.write(f"\n=== incarnation {self.incarnations}{' ' + FAULT_ENV + '=' + fault if fault else ''} ===\n"
                      .encode())
            log.flush()
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         env=env)

    def exit_code(self) -> int | None:
        """None while running (or never started)."""
        return None if self.proc is None else self.proc.poll()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None


@dataclass
class StackConfig:
    kubeconfig: str
    scheduler_name: str
    redis_prefix: str
    run_dir: Path
    log_level: str = "INFO"
    default_wait: float = 600.0


@dataclass
class ChaosStack:
    """redis-server (append-only and password-protected, like the chart) plus queue, binder and scheduler
    with mutual TLS (certificates made in the run directory)."""

    config: StackConfig
    redis: RedisServer
    services: dict[str, ServiceProcess] = field(default_factory=dict)

    @classmethod
    def create(cls, config: StackConfig) -> ChaosStack:
        config.run_dir.mkdir(parents=True, exist_ok=True)
        redis = RedisServer(appendonly=True, log_path=config.run_dir / "redis.log", password=secrets.token_hex(16))
        picked = free_ports(2 * len(SERVICES))
        ports = dict(zip(SERVICES, picked))
        health_ports = dict(zip(SERVICES, picked[len(SERVICES):]))
        addr = {name: f"127.0.0.1:{port}" for name, port in ports.items()}
        tls_dir = config.run_dir / "tls"
        make_tree(tls_dir, list(SERVICE_IDENTITIES.values()), [], ["127.0.0.1"], days=30)
        # No /metrics: the default ports would collide between stacks on one machine.
        common = ["--clock", "real", "--log-level", config.log_level, "--metrics-listen", "off"]
        state = ["--redis-url", redis.address_url, "--redis-password-file", str(redis.password_file()),
                 "--redis-prefix", config.redis_prefix]
        kube = ["--backend", "kubernetes", "--kubeconfig", config.kubeconfig]
        argv = {
            "queue": [*common],
            "binder": [*common, *state, *kube, "--scheduler-name", config.scheduler_name],
            "scheduler": [*common, *state, *kube, "--scheduler-name", config.scheduler_name,
                          "--queue", addr["queue"], "--binder", addr["binder"],
                          "--default-wait", str(config.default_wait)],
        }
        services = {
            name: ServiceProcess(name, [sys.executable, "-m", f"phalanx_{name}", "--listen", addr[name],
                                        "--health-listen", f"127.0.0.1:{health_ports[name]}",
                                        "--tls-dir", str(tls_dir / SERVICE_IDENTITIES[name]), *argv[name]],
                                 ports[name], config.run_dir / f"{name}.log", health_ports[name])
            for name in SERVICES
        }
        return cls(config, redis, services)

    def start(self, faults: dict[str, str] | None = None, timeout: float = 60.0) -> None:
        """Starts everything; `faults`: service -> PHALANX_FAULT for its first incarnation."""
        faults = faults or {}
        self.redis.start()
        for name in SERVICES:  # the scheduler waits for the other two itself
            self.services[name].start(faults.get(name, ""))
        for name in SERVICES:
            try:
                wait_healthy(self.services[name].health_address, timeout=timeout)
            except TimeoutError:
                raise RuntimeError(f"{name} did not become healthy; see {self.services[name].log_path}") from None

    def names(self) -> tuple[str, ...]:
        return (REDIS, *SERVICES)

    def alive(self, name: str) -> bool:
        return self.redis.alive() if name == REDIS else self.services[name].alive()

    def kill(self, name: str) -> None:
        """SIGKILL, as a crashed container (Redis keeps its data dir)."""
        if name == REDIS:
            self.redis.kill()
        else:
            self.services[name].kill()

    def restart(self, name: str, keep_data: bool = True) -> None:
        """Starts `name` again with its original command line (no fault); keep_data only for Redis."""
        if name == REDIS:
            self.redis.restart(keep_data=keep_data)
        else:
            self.services[name].kill()
            self.services[name].start()

    def exit_code(self, name: str) -> int | None:
        if name == REDIS:
            return None if self.redis.proc is None else self.redis.proc.poll()
        return self.services[name].exit_code()

    def serving(self, name: str, timeout: float = 2.0) -> bool:
        """One gRPC health check (service ""), or a Redis PING."""
        if name == REDIS:
            import redis

            try:
                client = redis.Redis.from_url(self.redis.url, socket_timeout=timeout)
                try:
                    return bool(client.ping())
                finally:
                    client.close()
            except redis.RedisError:
                return False
        with grpc.insecure_channel(self.services[name].health_address) as ch:  # kubelet's view
            try:
                resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
            except grpc.RpcError:
                return False
            return bool(resp.status == health_pb2.HealthCheckResponse.SERVING)

    def pids(self) -> dict[str, int]:
        out: dict[str, int] = {}
        if self.redis.proc is not None and self.redis.proc.poll() is None:
            out[REDIS] = self.redis.proc.pid
        for name, svc in self.services.items():
            if svc.proc is not None and svc.proc.poll() is None:
                out[name] = svc.proc.pid
        return out

    def rss_mib(self) -> dict[str, float]:
        """Resident memory of each live process, from /proc."""
        out: dict[str, float] = {}
        for name, pid in self.pids().items():
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        out[name] = int(line.split()[1]) / 1024
                        break
            except OSError:
                pass
        return out

    def stop(self) -> None:
        for name in reversed(SERVICES):
            self.services[name].stop()
        self.redis.stop()
