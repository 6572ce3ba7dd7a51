"""Health that tells the truth: liveness from loop heartbeats, readiness from dependency checks.

Each service answers the standard gRPC health service under three names:
- `liveness`: every loop the service runs has beaten within its allowed silence. A loop stuck while
  work is pending stops beating, the probe fails and Kubernetes restarts the container.
- `readiness` (and "" and `phalanx.v1.<Service>`): alive, and every dependency check passes (Redis
  reachable, the cluster feed synced, ...). A service that cannot do its work is taken out of rotation.
A watchdog thread re-evaluates both every second and logs every change with its reason.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from grpc_health.v1 import health_pb2

log = logging.getLogger(__name__)

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
LIVENESS, READINESS = "liveness", "readiness"


class Heartbeat:
    """Beaten by a loop at every iteration; stale after `max_silence` seconds without a beat."""

    def __init__(self, name: str, max_silence: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.max_silence = max_silence
        self._clock = clock
        self.last = clock()

    def beat(self) -> None:
        self.last = self._clock()

    def problem(self) -> str:
        silent = self._clock() - self.last
        return (
            f"{self.name} loop silent for {silent:.0f}s (limit {self.max_silence:g}s)"
            if silent > self.max_silence
            else ""
        )


class HealthMonitor:
    def __init__(self, servicer: object, service_name: str, interval: float = 1.0) -> None:
        self.servicer = servicer  # grpc_health.v1.health.HealthServicer
        self.service_name = service_name
        self.interval = interval
        self.heartbeats: list[Heartbeat] = []
        self.checks: list[tuple[str, Callable[[], str]]] = []
        self._stop = threading.Event()
        self._state: tuple[str, str] | None = None

    def add_heartbeat(self, hb: Heartbeat) -> Heartbeat:
        self.heartbeats.append(hb)
        return hb

    def add_check(self, name: str, check: Callable[[], str]) -> None:
        """`check` returns "" when fine, else why not; an exception counts as a failure."""
        self.checks.append((name, check))

    def evaluate(self) -> tuple[str, str]:
        """(why not live, why not ready); empty strings when fine."""
        dead = "; ".join(p for hb in self.heartbeats if (p := hb.problem()))
        unready = [dead] if dead else []
        for name, check in self.checks:
            try:
                why = check()
            except Exception as exc:
                why = f"{type(exc).__name__}: {exc}"
            if why:
                unready.append(f"{name}: {why}")
        return dead, "; ".join(unready)

    def apply(self) -> None:
        dead, unready = self.evaluate()
        set_status = self.servicer.set  # type: ignore[attr-defined]
        set_status(LIVENESS, NOT_SERVING if dead else SERVING)
        ready = NOT_SERVING if unready else SERVING
        for name in (READINESS, "", self.service_name):
            set_status(name, ready)
        if (dead, unready) != self._state:
            if dead or unready:
                log.warning("health: %s", unready or dead)
            elif self._state is not None:
                log.info("health: serving again")
            self._state = (dead, unready)

    def start(self) -> "HealthMonitor":
        self.apply()
        threading.Thread(target=self._run, name="health", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.apply()
            except Exception:  # the watchdog itself must not die
                log.exception("health: evaluation failed")


def redis_check(client: object) -> Callable[[], str]:
    def check() -> str:
        client.ping()  # type: ignore[attr-defined]
        return ""

    return check
