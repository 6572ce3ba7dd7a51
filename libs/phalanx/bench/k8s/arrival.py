"""bench-k8s's steady arrival: gangs created at a fixed rate while the scheduler runs, and their latencies.

Gang i (its PodGroup, then its pods, one POST each) is due at t0 + i / rate; a dispatcher thread hands each
gang to a pool of workers at its time, so a slow answer delays no later gang. Each pod's creation time is
the monotonic time just before its POST was sent; its binding time is when the harness's pod watch saw it
bound (observe.py). `figures` turns both into the report's numbers: the achieved rate, how late gangs
started against their schedule, and creation -> binding percentiles.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from phalanx.bench.k8s.kubeapi import call
from phalanx.bench.k8s.report import dist
from phalanx.bench.k8s.workloads import PODGROUPS_PATH, PODS_PATH, WARMUP_GANG, Shape, pod_body, podgroup_body
from phalanx.kube.api import KubeApi


def due_offsets(rate: float, count: int) -> list[float]:
    """Seconds after the start at which each of `count` gangs is due, at `rate` gangs a second."""
    if rate <= 0:
        raise ValueError("rate must be positive")
    return [i / rate for i in range(count)]


def workers_for(rate: float, gang_size: int, request_s: float = 0.1) -> int:
    """Threads enough for `rate` gangs a second whose 1 + gang_size POSTs take up to `request_s` each, with
    room for four times that (a loaded API server): at least 4."""
    return max(4, int(rate * (1 + gang_size) * request_s * 4) + 1)


@dataclass
class ArrivalLog:
    """What the arrivals did, in time.monotonic() seconds."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    t0: float = 0.0
    t0_unix: float = 0.0  # t0 on the wall clock, to line the slowest pods up with the services' logs
    due: dict[str, float] = field(default_factory=dict)  # gang -> when it was due
    started: dict[str, float] = field(default_factory=dict)  # gang -> its PodGroup's POST was sent
    created: dict[str, float] = field(default_factory=dict)  # pod -> just before its POST was sent
    errors: list[str] = field(default_factory=list)


class Arrivals:
    """Creates a steady shape's gangs (all but the warm-up one) at its rate, from `start` on."""

    def __init__(
        self,
        api: KubeApi,
        shape: Shape,
        scheduler_name: str,
        gangs: dict[str, int],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api, self.shape, self.scheduler_name, self.clock = api, shape, scheduler_name, clock
        self.names = [g for g in gangs if g != WARMUP_GANG]
        self.sizes = gangs
        self.log = ArrivalLog()
        self.workers = workers_for(shape.arrival_gps, shape.gang_size)
        self._thread = threading.Thread(target=self._run, name="bench-k8s-arrivals", daemon=True)
        self._stop = threading.Event()

    def start(self) -> None:
        self.log.t0 = self.clock() + 0.01
        self.log.t0_unix = time.time() + (self.log.t0 - self.clock())
        self._thread.start()

    def join(self, timeout: float) -> bool:
        """Waits until every gang was created; False on timeout (then stops handing out more)."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._stop.set()
            return False
        return True

    def _gang(self, name: str) -> None:
        log = self.log
        try:
            with log.lock:
                log.started[name] = self.clock()
            call(self.api, "POST", PODGROUPS_PATH, podgroup_body(name, self.sizes[name]))
            for i in range(self.sizes[name]):
                pod = f"{name}-{i}"
                body = pod_body(self.shape, pod, name, self.scheduler_name)
                t = self.clock()
                with log.lock:
                    log.created[pod] = t
                call(self.api, "POST", PODS_PATH, body)
        except Exception as exc:  # reported with the run; the rest still arrive
            with log.lock:
                log.errors.append(f"{name}: {type(exc).__name__}: {exc}"[:300])

    def _run(self) -> None:
        offsets = due_offsets(self.shape.arrival_gps, len(self.names))
        with ThreadPoolExecutor(self.workers, thread_name_prefix="bench-k8s-arrive") as pool:
            for name, offset in zip(self.names, offsets):
                due = self.log.t0 + offset
                while (left := due - self.clock()) > 0:
                    time.sleep(min(left, 0.02))
                if self._stop.is_set():
                    break
                with self.log.lock:
                    self.log.due[name] = due
                pool.submit(self._gang, name)


def figures(log: ArrivalLog, bound: dict[str, float], rate: float) -> dict[str, Any]:
    """The report's numbers from an arrival log and the pods' binding times (pod -> watch time)."""
    with log.lock:
        started = sorted(log.started.values())
        lags = [log.started[g] - log.due[g] for g in log.started if g in log.due]
        arrived = [(bound[p] - t, t - log.t0) for p, t in log.created.items() if p in bound]  # (latency, when)
        # from the first gang's due time to the last of these pods' binding: the window the arrivals took
        span_s = max((lat + at for lat, at in arrived), default=0.0)
        latency = [lat for lat, _ in arrived]
        # The slowest 1% with when they arrived: clustered in time, the tail is a pause of the scheduler's
        # (a lock held, a collection); spread, it is each pod's own path.
        worst = sorted(arrived, reverse=True)[: max(1, len(arrived) // 100)]
        slowest = [[round(at, 2), round(lat * 1000, 1)] for lat, at in worst]
        pods_created, gangs_started, errors = len(log.created), len(log.started), list(log.errors)
    span = started[-1] - started[0] if len(started) > 1 else 0.0
    return {
        "target_gangs_per_s": rate,
        "gangs_created": gangs_started,
        "pods_created": pods_created,
        "pods_bound": len(latency),
        # (gangs - 1) intervals between the first and the last gang's first POST
        "achieved_gangs_per_s": round((len(started) - 1) / span, 3) if span > 0 else None,
        "start_lag_ms": dist(lags, 1000, 1),  # a gang's first POST after the time it was due
        "latency_ms": dist(latency, 1000, 1),  # a pod's POST sent -> the watch saw it bound
        "slowest": sorted(slowest),  # [seconds after the first gang was due, latency ms] of the slowest 1%
        "first_due_unix": round(log.t0_unix, 3),
        "span_s": round(span_s, 3),
        "errors": errors[:10],
        "error_count": len(errors),
    }
