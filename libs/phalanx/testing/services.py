"""One Phalanx service (queue, binder or scheduler) as a child process: started as deployed
(`python -m phalanx_<service>`), killed, restarted in place on the same address. The simulator's stack
(phalanx.sim.services) and the chaos stack (phalanx.testing.stack) both run their services through it.

Each start appends to the service's log, after a line naming the incarnation, and the child ends with this
process (phalanx.testing.children).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phalanx.faults import FAULT_ENV
from phalanx.rpc.server import wait_healthy
from phalanx.security.tls import PLAINTEXT, SERVICE_IDENTITIES, Security
from phalanx.telemetry.tracing import quiet_unless_exporting
from phalanx.testing.children import exit_with_parent_env, stop_child
from phalanx.testing.layouts import COMBINED

_INCARNATION = "=== incarnation "


class ServiceExited(SystemExit):
    """A service ended while starting; its message is the service's own last line (e.g. the profile
    field it refused). A SystemExit, so `phalanx simulate` ends with that line rather than a traceback."""


@dataclass
class ServiceProcess:
    name: str  # queue, binder or scheduler
    module: str  # phalanx_<name>
    args: list[str]  # after --listen and --metrics-listen
    port: int
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    extra_env: dict[str, str] = field(default_factory=dict)  # every incarnation's environment, over this one's
    security: Security = PLAINTEXT  # how the starter reaches the service
    # /metrics: off unless asked (the default ports of several stacks on one machine would collide).
    metrics_port: int = 0
    health_port: int = 0  # a plaintext health-only listener (what kubelet probes, given in `args`); 0: none
    incarnations: int = 0
    fault: str = ""  # PHALANX_FAULT of the current incarnation ("" for none)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def health_address(self) -> str:
        return f"127.0.0.1:{self.health_port or self.port}"

    @property
    def identity(self) -> str:
        return SERVICE_IDENTITIES[self.name]

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics" if self.metrics_port else ""

    def argv(self) -> list[str]:
        metrics = f"127.0.0.1:{self.metrics_port}" if self.metrics_port else "off"
        return [sys.executable, "-m", self.module, "--listen", self.address, "--metrics-listen", metrics, *self.args]

    def start(self, extra_env: dict[str, str] | None = None, wait: bool = True, fault: str | None = None) -> None:
        """Starts a new incarnation; `wait`: until it serves (ServiceExited if it ends first). `fault`: this
        incarnation's PHALANX_FAULT ("" for none, replacing one inherited); None leaves the environment be."""
        env = {**os.environ, **self.extra_env, **(extra_env or {})}
        if fault is not None:
            env.pop(FAULT_ENV, None)
            if fault:
                env[FAULT_ENV] = fault
            self.fault = fault
        env = exit_with_parent_env(env)
        quiet_unless_exporting(env)
        self.incarnations += 1
        with open(self.log_path, "ab") as log:
            said_fault = f" {FAULT_ENV}={fault}" if fault else ""
            log.write(f"\n{_INCARNATION}{self.incarnations}{said_fault} ===\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.argv(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env
            )
        if wait:
            try:
                self.wait_healthy()
            except TimeoutError:
                raise RuntimeError(f"{self.name} did not become healthy; its log:\n{self.log_tail()}") from None

    def wait_healthy(self, timeout: float = 60, *, health_port: bool = False) -> None:
        """Waits for SERVING; a process that exits meanwhile raises ServiceExited at once. `health_port`: asks
        the plaintext health-only listener (what kubelet probes) instead of the service's own port."""
        address, security, peer = (
            (self.health_address, PLAINTEXT, "") if health_port else (self.address, self.security, self.identity)
        )
        self._wait_serving(address, security, peer, time.monotonic() + timeout)

    def _wait_serving(self, address: str, security: Security, peer: str, deadline: float) -> None:
        while True:
            self._raise_if_exited()
            try:
                wait_healthy(
                    address, timeout=min(1.0, max(deadline - time.monotonic(), 0.0)), security=security, peer=peer
                )
                return
            except TimeoutError:
                if time.monotonic() >= deadline:
                    self._raise_if_exited()
                    raise

    def _raise_if_exited(self) -> None:
        code = self.exit_code()
        if code is None:
            return
        lines = [line for line in self.log_tail(50).splitlines() if line.strip() and not line.startswith(_INCARNATION)]
        last = lines[-1].strip() if lines else ""
        if last.startswith(f"phalanx-{self.name}:"):  # the service said why, in one line
            raise ServiceExited(last)
        raise ServiceExited(
            f"phalanx-{self.name} exited with status {code} while starting"
            + (f": {last}" if last else "")
            + f" (log: {self.log_path})"
        )

    def exit_code(self) -> int | None:
        """None while running (or never started); after kill(), the killed incarnation's status."""
        return None if self.proc is None else self.proc.poll()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crashed container; the process is reaped, its exit status kept."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        """SIGTERM (the graceful shutdown), SIGKILL after 10 s."""
        if self.proc is None:
            return
        stop_child(self.proc, grace=10)
        self.proc = None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class CombinedProcess(ServiceProcess):
    """The queue, the binder and the scheduler as one `phalanx-combined` process (the combined layout):
    `parts` are the three services' own settings (ports, flags, logs unused), whose command lines become
    its sections; it serves on each part's addresses."""

    parts: list[ServiceProcess] = field(default_factory=list)

    @classmethod
    def of(cls, parts: list[ServiceProcess], log_path: Path, **fields: Any) -> CombinedProcess:
        """The process of `parts` (queue, binder, scheduler, in the order of their sections), known by the
        last part's port (the scheduler's)."""
        return cls(COMBINED, "phalanx_combined", [], parts[-1].port, log_path, parts=parts, **fields)

    @property
    def identity(self) -> str:
        return self.parts[-1].identity

    def argv(self) -> list[str]:
        out = [sys.executable, "-m", self.module]
        for i, part in enumerate(self.parts):
            out += ([] if i == 0 else ["--"]) + [part.name, *part.argv()[3:]]  # past `python -m <module>`
        return out

    def wait_healthy(self, timeout: float = 60, *, health_port: bool = False) -> None:
        """Every part SERVING on its own address (or its health-only listener)."""
        deadline = time.monotonic() + timeout
        for part in self.parts:
            if health_port:
                self._wait_serving(part.health_address, PLAINTEXT, "", deadline)
            else:
                self._wait_serving(part.address, part.security, part.identity, deadline)
