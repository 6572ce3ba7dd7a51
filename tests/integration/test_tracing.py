"""A gang's path is one trace: enqueue, each scheduling attempt, the bind batch, across real gRPC servers.

The three services run in this process (so an in-memory exporter sees every span) but as real gRPC
servers on loopback ports, against a real redis-server, driven by the simulator.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import yaml
from builders import make_node, make_pod
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from phalanx.model.keys import KOORD_MIN_AVAILABLE, KOORD_NAME, KOORD_WAITING_TIME
from phalanx.rpc.clients import QueueClient, SchedulerClient
from phalanx.security.tls import PLAINTEXT
from phalanx.sim.driver import SimOptions, Simulation
from phalanx.sim.workload import load_workload
from phalanx.state.keys import Keys
from phalanx.state.store import StateStore
from phalanx.testing.redis_server import RedisServer
from phalanx_binder.__main__ import build as build_binder
from phalanx_binder.__main__ import parser as binder_parser
from phalanx_queue.__main__ import build as build_queue
from phalanx_queue.__main__ import parser as queue_parser
from phalanx_scheduler.__main__ import build as build_scheduler
from phalanx_scheduler.__main__ import parser as scheduler_parser

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    exp = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exp))
    return exp


@pytest.fixture
def services(
    redis_server: RedisServer, exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, str, str]]:
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    prefix = "tracing"
    StateStore(redis.Redis.from_url(redis_server.url, decode_responses=True), Keys(prefix)).wipe()
    common = ["--listen", "127.0.0.1:0", "--plaintext", "--clock", "virtual"]
    state = ["--redis-url", redis_server.url, "--redis-prefix", prefix]
    queue = build_queue(queue_parser().parse_args([*common, "--unschedulable-flush", "0"])).start()
    binder = build_binder(binder_parser().parse_args([*common, *state, "--backend", "simulated"])).start()
    sched, _ = build_scheduler(
        scheduler_parser().parse_args(
            [*common, *state, "--backend", "simulated", "--queue", queue.address, "--binder", binder.address]
        )
    )
    sched.start()
    exporter.clear()
    yield queue.address, sched.address, prefix
    for server in (sched, binder, queue):
        server.stop(grace=0)


def test_gang_path_is_one_trace_across_services(
    tmp_path: Path, services: tuple[str, str, str], redis_server: RedisServer, exporter: InMemorySpanExporter
) -> None:
    queue_addr, sched_addr, prefix = services
    objects = [make_node("n1").cpu("8").memory("32Gi").gpu(2).build(), make_node("n2").cpu("8").memory("32Gi").build()]
    # Three one-GPU workers on two GPUs: the first attempt fails (Strict), the third pod arrives... never;
    # then a second node with GPUs appears and the next attempt binds the gang.
    for i in range(3):
        objects.append(
            make_pod(f"w{i}")
            .scheduler("phalanx")
            .container()
            .gpu(1)
            .annotation(KOORD_NAME, "train")
            .annotation(KOORD_MIN_AVAILABLE, "3")
            .annotation(KOORD_WAITING_TIME, "100s")
            .build()
        )
    objects.append(make_node("n3").cpu("8").memory("32Gi").gpu(2).created("2026-01-01T00:00:30Z").build())
    objects[0]["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    queue, sched = QueueClient(queue_addr, PLAINTEXT), SchedulerClient(sched_addr, PLAINTEXT)
    try:
        result = Simulation(load_workload([path]), queue, sched, client, Keys(prefix), SimOptions()).run()
    finally:
        queue.close()
        sched.close()
        client.close()
    assert sum(1 for t in result.pods.values() if t.bound_at == 30.0) == 3

    spans: list[ReadableSpan] = list(exporter.get_finished_spans())
    roots = [
        s for s in spans if s.name == "phalanx.queue.enqueue" and s.attributes.get("phalanx.gang") == "default/train"
    ]
    assert len(roots) == 1
    root = roots[0]
    in_trace = [s for s in spans if s.context.trace_id == root.context.trace_id]
    by_id = {s.context.span_id: s for s in in_trace}
    names = [s.name for s in in_trace]
    attempts = [s for s in in_trace if s.name == "phalanx.scheduler.gang_attempt"]
    assert len(attempts) == 2  # the Strict failure at t=0, the success at t=30
    assert sorted(a.attributes["phalanx.result"] for a in attempts) == ["assumed", "strict-failure"]
    assert all(a.parent is not None and a.parent.span_id == root.context.span_id for a in attempts)
    dispatch = [s for s in in_trace if s.name == "phalanx.scheduler.dispatch_bind"]
    assert len(dispatch) == 1
    bind = [s for s in in_trace if s.name == "phalanx.binder.bind_batch"]
    assert len(bind) == 1 and bind[0].attributes["phalanx.pods"] == 3
    # bind_batch (binder) -> dispatch_bind (scheduler) -> the gang's root (queue): the hops carry the
    # trace in the messages, as the queue is asynchronous and the hot paths are streams.
    chain = []
    span = bind[0]
    while span.parent is not None and span.parent.span_id in by_id:
        span = by_id[span.parent.span_id]
        chain.append(span.name)
    assert chain == ["phalanx.scheduler.dispatch_bind", "phalanx.queue.enqueue"], names
    # Health checks stay out of traces.
    assert not any("Health" in s.name for s in spans)
