"""Health that tells the truth: readiness follows Redis, liveness follows the loops' heartbeats.

A real binder (gRPC on a loopback port) against its own redis-server, which the test stops and starts."""

from __future__ import annotations

import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from waiting import wait_for

from phalanx.rpc.health import LIVENESS, READINESS, HealthMonitor, Heartbeat
from phalanx.testing.redis_server import RedisServer

pytestmark = pytest.mark.integration
SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


def status(address: str, service: str) -> int:
    with grpc.insecure_channel(address) as ch:
        return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status


def test_the_binder_is_not_ready_while_redis_is_down_and_ready_again_after() -> None:
    from phalanx_binder import __main__ as binder_main

    redis = RedisServer().start()
    server = binder_main.build(
        binder_main.parser().parse_args(
            [
                "--listen",
                "127.0.0.1:0",
                "--plaintext",
                "--clock",
                "virtual",
                "--backend",
                "simulated",
                "--redis-url",
                redis.url,
            ]
        )
    ).start()
    try:
        assert status(server.address, READINESS) == SERVING
        redis.kill()
        wait_for(lambda: status(server.address, READINESS) == NOT_SERVING, 10, "readiness drops with Redis")
        assert status(server.address, "") == NOT_SERVING
        assert status(server.address, LIVENESS) == SERVING  # alive: a restart would not bring Redis back
        redis.start()
        wait_for(lambda: status(server.address, READINESS) == SERVING, 10, "ready again with Redis back")
    finally:
        server.stop(0)
        redis.stop()


class FakeHealth:
    def __init__(self) -> None:
        self.statuses: dict[str, int] = {}

    def set(self, name: str, value: int) -> None:
        self.statuses[name] = value


def test_a_silent_loop_fails_liveness_and_a_failing_check_fails_readiness_only() -> None:
    clock = [0.0]
    health = FakeHealth()
    monitor = HealthMonitor(health, "phalanx.v1.Scheduler")
    beat = monitor.add_heartbeat(Heartbeat("scheduling", 30.0, clock=lambda: clock[0]))
    failing = [""]
    monitor.add_check("redis", lambda: failing[0])
    monitor.apply()
    assert health.statuses == {LIVENESS: SERVING, READINESS: SERVING, "": SERVING, "phalanx.v1.Scheduler": SERVING}
    failing[0] = "Connection refused"
    monitor.apply()
    assert health.statuses[LIVENESS] == SERVING and health.statuses[READINESS] == NOT_SERVING
    assert "redis: Connection refused" in monitor.evaluate()[1]
    failing[0] = ""
    clock[0] = 31.0  # the loop stopped beating: stuck
    monitor.apply()
    assert health.statuses[LIVENESS] == NOT_SERVING and health.statuses[READINESS] == NOT_SERVING
    assert "scheduling loop silent for 31s" in monitor.evaluate()[0]
    beat.beat()
    monitor.apply()
    assert health.statuses[LIVENESS] == SERVING


def test_a_check_that_raises_counts_as_not_ready() -> None:
    health = FakeHealth()
    monitor = HealthMonitor(health, "x")
    monitor.add_check("redis", lambda: (_ for _ in ()).throw(ConnectionError("refused")))
    monitor.apply()
    assert health.statuses[READINESS] == NOT_SERVING and health.statuses[LIVENESS] == SERVING


def test_the_scheduler_reports_steps_that_keep_failing() -> None:
    from phalanx.clock import Clock
    from phalanx.cluster.loop import SchedulingLoop

    class Failing:
        needs_resync = False

        def step(self, now: float, prefetched: object = None) -> object:
            raise ConnectionError("redis down")

    import threading

    scheduling = SchedulingLoop(Failing(), None, Clock(False))  # type: ignore[arg-type]
    stop = threading.Event()
    loop = threading.Thread(target=scheduling.run, args=(stop,), daemon=True)
    loop.start()
    try:
        wait_for(lambda: scheduling.failing_since is not None, 5, "the failure noticed")
        assert scheduling.step_error(grace=60) == ""  # a short failure is not yet a readiness problem
        time.sleep(0.2)
        assert "redis down" in scheduling.step_error(grace=0.1)
    finally:
        stop.set()
        loop.join(5)
