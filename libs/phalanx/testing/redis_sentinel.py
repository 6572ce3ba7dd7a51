"""A real Redis primary, its replicas and Sentinels on loopback ports (tests, `phalanx chaos` Sentinel trials).

Shaped like the chart's Sentinel deployment: every data node has the password (`requirepass`, and
`masterauth` to follow a primary), persists with an append-only file, and refuses writes without
`min_replicas_to_write` replicas; every Sentinel (`redis-server <conf> --sentinel`: Debian's
redis-server package runs Sentinel too) has the same password and monitors the primary under
`master_name`. Timeouts are short (`down_after_ms`, `failover_timeout_ms`) so a failover takes seconds.

A data node is killed (SIGKILL), frozen (SIGSTOP, a partition as far as its peers can tell) and thawed
(SIGCONT), and restarted as the chart's start script does: as a replica of whatever primary the Sentinels
name now, so a dead primary never comes back as a second one.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from phalanx.testing.children import exit_with_parent_argv, stop_child
from phalanx.testing.ports import free_ports

MASTER_NAME = "phalanx"


def _binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed (Debian: apt-get install redis-server)")
    return binary


@dataclass
class _Process:
    name: str
    port: int
    dir: Path
    conf: Path
    sentinel: bool
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    frozen: bool = False

    def start(self) -> None:
        argv = [_binary(), str(self.conf), *(["--sentinel"] if self.sentinel else [])]
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(exit_with_parent_argv(argv), stdout=out, stderr=subprocess.STDOUT)
        self.frozen = False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.proc is not None:
            try:
                self.proc.send_signal(sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        if self.proc is None:
            return
        self.signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = None
        self.frozen = False


@dataclass
class SentinelCluster:
    password: str
    replicas: int = 2
    sentinels: int = 3
    master_name: str = MASTER_NAME
    down_after_ms: int = 1000
    failover_timeout_ms: int = 3000
    min_replicas_to_write: int = 1
    min_replicas_max_lag: int = 5
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="phalanx-sentinel-")))
    nodes: list[_Process] = field(default_factory=list)
    watchers: list[_Process] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        ports = free_ports(1 + self.replicas + self.sentinels)
        for i, port in enumerate(ports[: 1 + self.replicas]):
            d = self.root / f"redis-{i}"
            d.mkdir(exist_ok=True)
            self.nodes.append(_Process(f"redis-{i}", port, d, d / "redis.conf", False, self.root / f"redis-{i}.log"))
        for i, port in enumerate(ports[1 + self.replicas :]):
            d = self.root / f"sentinel-{i}"
            d.mkdir(exist_ok=True)
            self.watchers.append(
                _Process(f"sentinel-{i}", port, d, d / "sentinel.conf", True, self.root / f"sentinel-{i}.log")
            )

    # -- addresses -------------------------------------------------------------------------------------
    @property
    def sentinel_addresses(self) -> str:
        """For --redis-sentinels."""
        return ",".join(f"127.0.0.1:{w.port}" for w in self.watchers)

    def password_file(self) -> Path:
        path = self.root / "password"
        path.touch(mode=0o600)
        path.write_text(self.password + "\n")
        return path

    def client(self, index: int, **kwargs: object) -> redis.Redis:
        """A plain client of data node `index` (not through Sentinel)."""
        return redis.Redis(port=self.nodes[index].port, password=self.password, decode_responses=True, **kwargs)

    def sentinel_client(self, index: int = 0) -> redis.Redis:
        return redis.Redis(port=self.watchers[index].port, password=self.password, decode_responses=True)

    def url(self, index: int) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.nodes[index].port}/0"

    # -- configuration ---------------------------------------------------------------------------------
    def _write_node_conf(self, node: _Process, replica_of: int | None) -> None:
        lines = [
            f"port {node.port}",
            "bind 127.0.0.1",
            f"dir {node.dir}",
            f"requirepass {self.password}",
            f"masterauth {self.password}",
            "protected-mode yes",
            "appendonly yes",
            "appendfsync everysec",
            'save ""',
            f"min-replicas-to-write {self.min_replicas_to_write}",
            f"min-replicas-max-lag {self.min_replicas_max_lag}",
            "repl-diskless-sync yes",
            "repl-diskless-sync-delay 0",
        ]
        if replica_of is not None:
            lines.append(f"replicaof 127.0.0.1 {replica_of}")
        node.conf.touch(mode=0o600)
        node.conf.write_text("\n".join(lines) + "\n")

    def _write_sentinel_conf(self, watcher: _Process, primary_port: int) -> None:
        name = self.master_name
        lines = [
            f"port {watcher.port}",
            "bind 127.0.0.1",
            f"dir {watcher.dir}",
            f"requirepass {self.password}",
            f"sentinel sentinel-pass {self.password}",
            f"sentinel monitor {name} 127.0.0.1 {primary_port} {self.sentinels // 2 + 1}",
            f"sentinel auth-pass {name} {self.password}",
            f"sentinel down-after-milliseconds {name} {self.down_after_ms}",
            f"sentinel failover-timeout {name} {self.failover_timeout_ms}",
            f"sentinel parallel-syncs {name} 1",
            # What a Sentinel would learn in its first 10 s (the primary's INFO every 10 s, the others' hellos
            # every 2 s), told up front as its own config rewrite would record it: it can fail over at once.
            f"sentinel myid {self._sentinel_id(watcher)}",
            *(f"sentinel known-replica {name} 127.0.0.1 {n.port}" for n in self.nodes if n.port != primary_port),
            *(
                f"sentinel known-sentinel {name} 127.0.0.1 {w.port} {self._sentinel_id(w)}"
                for w in self.watchers
                if w is not watcher
            ),
        ]
        watcher.conf.touch(mode=0o600)  # Sentinel rewrites it as the primary moves
        watcher.conf.write_text("\n".join(lines) + "\n")

    def _sentinel_id(self, watcher: _Process) -> str:
        return f"{self.watchers.index(watcher) + 1:040x}"

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> SentinelCluster:
        primary = self.nodes[0]
        self._write_node_conf(primary, None)
        for node in self.nodes[1:]:
            self._write_node_conf(node, primary.port)
        for node in self.nodes:
            node.start()
        for w in self.watchers:
            self._write_sentinel_conf(w, primary.port)
            w.start()
        deadline = time.monotonic() + timeout
        self._until(deadline, lambda: self._synced(0), "the replicas did not sync with the primary")
        self._until(
            deadline,
            self._sentinels_ready,
            "the Sentinels did not find every replica and each other, or do not all see the primary up",
        )
        return self

    def _until(self, deadline: float, ready: object, what: str) -> None:
        while True:
            try:
                if ready():  # type: ignore[operator]
                    return
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} (logs in {self.root})")
            time.sleep(0.1)

    def _synced(self, primary: int) -> bool:
        """Every replica connected and past its initial sync: a replica still loading the primary's RDB counts
        as connected but acknowledges no WAIT (a fresh-clone CI run saw a first WAIT get 0 of 1)."""
        info = self.client(primary).info("replication")
        online = [
            v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online"
        ]
        return len(online) >= len(self.nodes) - 1

    def _sentinels_ready(self) -> bool:
        """Every Sentinel knows every replica and the other Sentinels, and has pinged the primary and flags it
        plain "master". The known-replica and known-sentinel lines make the first true before any ping; a
        Sentinel started on a loaded machine may flag the primary s_down or disconnected for its first moments,
        and a client that asks then finds no master."""
        primary = self.nodes[0].port
        for i in range(len(self.watchers)):
            state: Any = self.sentinel_client(i).sentinel_master(self.master_name)
            if int(state["num-slaves"]) < self.replicas or int(state["num-other-sentinels"]) < self.sentinels - 1:
                return False
            if int(state["port"]) != primary or not state["is_master"]:
                return False
            if state["is_sdown"] or state["is_odown"] or state["is_disconnected"]:
                return False
        return True

    def primary_port(self, sentinel: int | None = None) -> int | None:
        """The primary's port as the Sentinels (a majority of those answering, or one) name it now."""
        answers: dict[int, int] = {}
        for i, w in enumerate(self.watchers):
            if sentinel is not None and i != sentinel:
                continue
            try:
                host_port: Any = self.sentinel_client(i).sentinel_get_master_addr_by_name(self.master_name)
            except redis.RedisError:
                continue
            if host_port:
                port = int(host_port[1])
                answers[port] = answers.get(port, 0) + 1
        if not answers:
            return None
        return max(answers, key=lambda p: answers[p])

    def primary_index(self) -> int:
        port = self.primary_port()
        for i, n in enumerate(self.nodes):
            if n.port == port:
                return i
        raise RuntimeError(f"no data node on the primary's port {port}")

    def wait_failover(self, old_port: int, timeout: float = 30.0) -> int:
        """Blocks until every answering Sentinel names a primary other than `old_port` and that node answers
        as a primary; returns its index."""
        deadline = time.monotonic() + timeout

        def moved() -> bool:
            port = self.primary_port()
            if port is None or port == old_port:
                return False
            index = next(i for i, n in enumerate(self.nodes) if n.port == port)
            return bool(self.client(index, socket_timeout=1).info("replication")["role"] == "master")

        self._until(deadline, moved, f"no failover away from port {old_port}")
        return self.primary_index()

    def kill(self, index: int) -> None:
        self.nodes[index].kill()

    def freeze(self, index: int) -> None:
        self.nodes[index].signal(signal.SIGSTOP)
        self.nodes[index].frozen = True

    def thaw(self, index: int) -> None:
        self.nodes[index].signal(signal.SIGCONT)
        self.nodes[index].frozen = False

    def restart(self, index: int) -> None:
        """Starts data node `index` again with its data, as a replica of the primary the Sentinels name (as
        the chart's start script does); as the primary only if they still name it."""
        node = self.nodes[index]
        node.kill()
        port = self.primary_port()
        self._write_node_conf(node, None if port in (None, node.port) else port)
        node.start()
        # Answering before returning: a caller's next command must not race the process's listen (the
        # client's own retries on a refused connection differ between redis-py versions).
        self._until(time.monotonic() + 10, lambda: self.client(index).ping(), f"node {index} did not restart")

    def alive(self, index: int) -> bool:
        return self.nodes[index].alive()

    def stop(self, remove: bool = True) -> None:
        """Ends every process; `remove`: also the directory (data, configurations, logs)."""
        for p in [*self.watchers, *self.nodes]:
            if p.frozen:
                p.signal(signal.SIGCONT)
            if p.proc is not None:
                stop_child(p.proc)
                p.proc = None
        if remove:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> SentinelCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def sentinel_available() -> bool:
    return shutil.which("redis-server") is not None and os.access(shutil.which("redis-server") or "", os.X_OK)
