"""Redis and the three services as separate OS processes, each killable and restartable in place.

Command lines are those of a Helm deployment (`python -m phalanx_<service>` with the Kubernetes backend
and the wall clock, run by phalanx.testing.services), or in the combined layout the three as one
`python -m phalanx_combined` process on the same addresses (a kill of any service then kills all three); ports are fixed when the stack is made, so a
restarted process comes back on the same address and its peers find it again. Processes must be started
and restarted from one long-lived thread (the trial's main loop): the parent-death signal the services ask
for fires when the *thread* that spawned them ends.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from phalanx.security.cli import make_tree
from phalanx.security.tls import SERVICE_IDENTITIES
from phalanx.testing.layouts import COMBINED, LAYOUTS, SEPARATE
from phalanx.testing.ports import free_ports
from phalanx.testing.redis_sentinel import MASTER_NAME, SentinelCluster
from phalanx.testing.redis_server import RedisServer
from phalanx.testing.services import CombinedProcess, ServiceProcess

SERVICES = ("queue", "binder", "scheduler")
REDIS = "redis"


@dataclass
class StackConfig:
    kubeconfig: str
    scheduler_name: str
    redis_prefix: str
    run_dir: Path
    log_level: str = "INFO"
    default_wait: float = 600.0
    # Redis as a primary, 2 replicas and 3 Sentinels (the chart's Sentinel shape) instead of one server:
    # REDIS then means "the current primary" (killed, frozen, or restarted as a replica).
    sentinel: bool = False
    layout: str = SEPARATE  # or COMBINED: the three services in one process (phalanx_combined)


@dataclass
class ChaosStack:
    """redis-server (append-only and password-protected, like the chart) plus queue, binder and scheduler
    with mutual TLS (certificates made in the run directory)."""

    config: StackConfig
    redis: RedisServer
    services: dict[str, ServiceProcess] = field(default_factory=dict)
    sentinel: SentinelCluster | None = None  # with config.sentinel; `redis` is then not started
    down: int | None = None  # the data node killed or frozen (Sentinel mode)
    frozen: bool = False
    combined: CombinedProcess | None = None  # the combined layout's one process (`services` then unstarted)

    @classmethod
    def create(cls, config: StackConfig) -> ChaosStack:
        config.run_dir.mkdir(parents=True, exist_ok=True)
        redis = RedisServer(appendonly=True, log_path=config.run_dir / "redis.log", password=secrets.token_hex(16))
        picked = free_ports(2 * len(SERVICES))
        ports = dict(zip(SERVICES, picked))
        health_ports = dict(zip(SERVICES, picked[len(SERVICES) :]))
        addr = {name: f"127.0.0.1:{port}" for name, port in ports.items()}
        tls_dir = config.run_dir / "tls"
        make_tree(tls_dir, list(SERVICE_IDENTITIES.values()), [], ["127.0.0.1"], days=30)
        # No /metrics (ServiceProcess's default): the default ports would collide between stacks on one machine.
        common = ["--clock", "real", "--log-level", config.log_level]
        state = [
            "--redis-url",
            redis.address_url,
            "--redis-password-file",
            str(redis.password_file()),
            "--redis-prefix",
            config.redis_prefix,
        ]
        sentinel = None
        if config.sentinel:
            sentinel = SentinelCluster(password=redis.password, root=config.run_dir / "redis")
            state = [
                "--redis-sentinels",
                sentinel.sentinel_addresses,
                "--redis-master-name",
                MASTER_NAME,
                "--redis-socket-timeout",
                "2",
                "--redis-password-file",
                str(sentinel.password_file()),
                "--redis-prefix",
                config.redis_prefix,
            ]
        kube = ["--backend", "kubernetes", "--kubeconfig", config.kubeconfig]
        argv = {
            "queue": [*common],
            "binder": [*common, *state, *kube, "--scheduler-name", config.scheduler_name],
            "scheduler": [
                *common,
                *state,
                *kube,
                "--scheduler-name",
                config.scheduler_name,
                "--queue",
                addr["queue"],
                "--binder",
                addr["binder"],
                "--default-wait",
                str(config.default_wait),
            ],
        }
        services = {
            name: ServiceProcess(
                name,
                f"phalanx_{name}",
                [
                    "--health-listen",
                    f"127.0.0.1:{health_ports[name]}",
                    "--tls-dir",
                    str(tls_dir / SERVICE_IDENTITIES[name]),
                    *argv[name],
                ],
                ports[name],
                config.run_dir / f"{name}.log",
                health_port=health_ports[name],
            )
            for name in SERVICES
        }
        if config.layout not in LAYOUTS:
            raise ValueError(f"StackConfig.layout {config.layout!r}: one of {', '.join(LAYOUTS)}")
        combined = None
        if config.layout == COMBINED:
            parts = [services[name] for name in SERVICES]
            combined = CombinedProcess.of(parts, config.run_dir / "combined.log", health_port=health_ports["scheduler"])
        return cls(config, redis, services, sentinel, combined=combined)

    def processes(self) -> dict[str, ServiceProcess]:
        """The service processes by name: the three, or the combined layout's one."""
        return {COMBINED: self.combined} if self.combined is not None else dict(self.services)

    def process_of(self, name: str) -> str:
        """The process a service runs in (its own, or the combined one); Redis and others unchanged."""
        return COMBINED if self.combined is not None and name in SERVICES else name

    def log_path(self, name: str) -> Path:
        return self.processes()[self.process_of(name)].log_path

    def start(self, faults: dict[str, str] | None = None, timeout: float = 60.0) -> None:
        """Starts everything; `faults`: service -> PHALANX_FAULT for its first incarnation."""
        faults = faults or {}
        if self.sentinel is not None:
            self.sentinel.start()
        else:
            self.redis.start()
        processes = self.processes()
        for name, process in processes.items():  # the scheduler waits for the other two itself
            parts = SERVICES if name == COMBINED else (name,)
            process.start(wait=False, fault=",".join(faults[p] for p in parts if p in faults))
        for name, process in processes.items():
            try:  # a service that ends while starting says why at once (ServiceExited), not after the timeout
                process.wait_healthy(timeout, health_port=True)
            except TimeoutError:
                raise RuntimeError(
                    f"{name} did not become healthy in {timeout:g}s; the end of {process.log_path}:\n"
                    + process.log_tail(40)
                ) from None

    def names(self) -> tuple[str, ...]:
        return (REDIS, *self.processes())

    def alive(self, name: str) -> bool:
        if name == REDIS and self.sentinel is not None:
            return self.down is None
        return self.redis.alive() if name == REDIS else self.processes()[self.process_of(name)].alive()

    def kill(self, name: str) -> None:
        """SIGKILL, as a crashed container (Redis keeps its data dir); with Sentinel, of the current primary."""
        if name == REDIS and self.sentinel is not None:
            self.down = self.sentinel.primary_index()
            self.sentinel.kill(self.down)
        elif name == REDIS:
            self.redis.kill()
        else:
            self.processes()[self.process_of(name)].kill()

    def freeze(self, name: str) -> None:
        """SIGSTOP of the current primary (Sentinel mode): a partition, as its peers see it."""
        if name != REDIS or self.sentinel is None:
            raise ValueError("only the Redis primary of a Sentinel stack is frozen")
        self.down = self.sentinel.primary_index()
        self.sentinel.freeze(self.down)
        self.frozen = True

    def ready_to_restart(self, name: str) -> bool:
        """With Sentinel, a primary killed or frozen comes back only once the Sentinels have promoted a
        replica: the failover is what is under test (a lost machine), not a quick restart in place."""
        if name != REDIS or self.sentinel is None or self.down is None:
            return True
        port = self.sentinel.primary_port()
        return port is not None and port != self.sentinel.nodes[self.down].port

    def restart(self, name: str, keep_data: bool = True) -> None:
        """Starts `name` again with its original command line (no fault); keep_data only for Redis. With
        Sentinel: a frozen primary is thawed, a killed one restarted as a replica of the new primary."""
        if name == REDIS and self.sentinel is not None:
            if self.down is not None:
                if self.frozen:
                    self.sentinel.thaw(self.down)
                else:
                    self.sentinel.restart(self.down)
            self.down, self.frozen = None, False
        elif name == REDIS:
            self.redis.restart(keep_data=keep_data)
        else:
            process = self.processes()[self.process_of(name)]
            process.kill()
            process.start(wait=False, fault="")

    def exit_code(self, name: str) -> int | None:
        if name == REDIS and self.sentinel is not None:
            return None  # the trial restarts what it killed; Sentinel handles the rest
        if name == REDIS:
            return None if self.redis.proc is None else self.redis.proc.poll()
        return self.processes()[self.process_of(name)].exit_code()

    def serving(self, name: str, timeout: float = 2.0) -> bool:
        """One gRPC health check (service ""), or a Redis PING; the combined process: all three services'."""
        if name == COMBINED:
            return all(self.serving(service, timeout) for service in SERVICES)
        if name == REDIS:
            import redis

            try:
                client = redis.Redis.from_url(self.state_url(), socket_timeout=timeout)
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

    def state_url(self) -> str:
        """A URL (password included) of the Redis holding the state now: with Sentinel, the primary."""
        if self.sentinel is not None:
            return self.sentinel.url(self.sentinel.primary_index())
        return self.redis.url

    def pids(self) -> dict[str, int]:
        out: dict[str, int] = {}
        if self.sentinel is not None:
            node = self.sentinel.nodes[self.sentinel.primary_index()]
            if node.proc is not None and node.proc.poll() is None:
                out[REDIS] = node.proc.pid
        elif self.redis.proc is not None and self.redis.proc.poll() is None:
            out[REDIS] = self.redis.proc.pid
        for name, svc in self.processes().items():
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
        for process in reversed(self.processes().values()):
            process.stop()
        if self.sentinel is not None:
            self.sentinel.stop(remove=False)  # its logs stay in the run directory
        self.redis.stop()
