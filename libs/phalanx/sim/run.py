"""Runs one simulation end to end: the stack (started here unless given), the driver, the report."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from phalanx.rpc.clients import QueueClient, SchedulerClient
from phalanx.security.tls import PLAINTEXT, security_from_env
from phalanx.sim.driver import SimOptions, Simulation
from phalanx.sim.jobs import report as job_report
from phalanx.sim.report import build_report
from phalanx.sim.services import Stack
from phalanx.sim.workload import Workload
from phalanx.state.keys import Keys
from phalanx.state.store import StateStore
from phalanx.testing.layouts import SEPARATE


@dataclass
class Endpoints:
    """Already-running services (all in virtual-clock mode, simulated backend, fresh state)."""

    redis_url: str
    queue: str
    scheduler: str
    prefix: str = "phalanx"


def simulate(
    workload: Workload,
    options: SimOptions,
    endpoints: Endpoints | None = None,
    profile: str | None = None,
    scheduler_env: dict[str, str] | None = None,
    log_dir: Path | None = None,
    layout: str = SEPARATE,
) -> dict[str, Any]:
    """`layout`: the embedded stack's processes ("services", or "combined": phalanx-combined)."""
    stack: Stack | None = None
    if endpoints is None:
        stack = Stack.launch(
            default_wait=options.default_wait,
            profile=profile,
            scheduler_env=scheduler_env,
            log_dir=log_dir,
            gang_retry_backoff=options.gang_retry_backoff,
            layout=layout,
        )
        endpoints = Endpoints(stack.redis_url, stack.queue.address, stack.scheduler.address, stack.prefix)
    client = redis.Redis.from_url(endpoints.redis_url, decode_responses=True)
    keys = Keys(endpoints.prefix)
    # The embedded stack is plaintext on loopback; services elsewhere (docker-compose) are called with the
    # simulator's certificate from PHALANX_TLS_DIR.
    security = PLAINTEXT if stack is not None else security_from_env()
    queue = QueueClient(endpoints.queue, security)
    scheduler = SchedulerClient(endpoints.scheduler, security)

    def recover() -> SchedulerClient:
        """The scheduler process died: start it again (it rebuilds from Redis) and carry on."""
        if stack is None:
            raise RuntimeError("the scheduler at %s is unavailable" % endpoints.scheduler)
        process = stack.combined or stack.scheduler  # the combined layout restarts the three together
        process.kill()
        process.start()
        return SchedulerClient(stack.scheduler.address, security)

    try:
        if stack is not None:
            StateStore(client, keys)  # a fresh redis-server: nothing to wipe
        result = Simulation(workload, queue, scheduler, client, keys, options, recover).run()
        report = build_report(result)
        report["summary"]["schedulerRestarts"] = 0 if stack is None else _restarts(stack)
        if result.jobs:  # PhalanxJobs: their stages as the controller took them on the virtual clock
            report["jobs"] = job_report(result.jobs)
        report.update(result.series)
        return report
    finally:
        queue.close()
        scheduler.close()
        client.close()
        if stack is not None:
            stack.stop()


def _restarts(stack: Stack) -> int:
    try:
        log = (stack.combined or stack.scheduler).log_path
        return log.read_text(errors="replace").count("fault injection: exiting")
    except OSError:
        return 0
