"""`phalanx simulate` exports its services' traces when the user sets OTEL_EXPORTER_OTLP_ENDPOINT (and
nothing else), and a GangGroup's bind is reachable from every member gang's trace.

The receiver is a real OTLP/gRPC trace service on a loopback port, the simulator the real CLI in a child
process with the three services as its children.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from builders import make_node, make_pod
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from phalanx.model.keys import KOORD_GROUPS, KOORD_MIN_AVAILABLE, KOORD_NAME

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: bytes
    span_id: bytes
    attributes: dict[str, str]
    links: tuple[tuple[bytes, bytes], ...]


class TraceReceiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.lock = threading.Lock()

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        received = []
        for resource_spans in request.resource_spans:
            service = next(
                (a.value.string_value for a in resource_spans.resource.attributes if a.key == "service.name"), ""
            )
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    attributes = {a.key: a.value.string_value for a in span.attributes}
                    links = tuple((link.trace_id, link.span_id) for link in span.links)
                    received.append(ReceivedSpan(service, span.name, span.trace_id, span.span_id, attributes, links))
        with self.lock:
            self.spans.extend(received)
        return trace_service_pb2.ExportTraceServiceResponse()


@pytest.fixture
def receiver() -> Iterator[tuple[str, TraceReceiver]]:
    servicer = TraceReceiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"http://127.0.0.1:{port}", servicer
    server.stop(0)


def _gang_group_workload(path: Path) -> None:
    group = json.dumps(["team-a/trainer", "team-b/evaluator"])
    objects: list[dict[str, Any]] = [make_node("n1").cpu("64").memory("256Gi").gpu(4).build()]
    for ns, gang in (("team-a", "trainer"), ("team-b", "evaluator")):
        for i in range(2):
            objects.append(
                make_pod(f"{gang}-{i}", ns)
                .scheduler("phalanx")
                .container()
                .gpu(1)
                .cpu("1")
                .annotation(KOORD_NAME, gang)
                .annotation(KOORD_MIN_AVAILABLE, "2")
                .annotation(KOORD_GROUPS, group)
                .build()
            )
    path.write_text(yaml.safe_dump_all(objects))


def test_simulate_exports_to_the_configured_endpoint_and_links_a_group_bind(
    tmp_path: Path, receiver: tuple[str, TraceReceiver]
) -> None:
    endpoint, servicer = receiver
    workload = tmp_path / "group.yaml"
    _gang_group_workload(workload)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    # Only the endpoint, as the README tells users: no OTEL_SDK_DISABLED=false needed.
    env.update(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_EXPORTER_OTLP_INSECURE="true")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "phalanx.cli.main",
            "simulate",
            "-f",
            str(workload),
            "-o",
            str(tmp_path / "report.json"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "report.json").read_text())["summary"]["podsBound"] == 4

    spans = list(servicer.spans)  # the services flushed their batches on exit, before simulate returned
    assert {s.service for s in spans} >= {"phalanx-queue", "phalanx-scheduler", "phalanx-binder"}, sorted(
        {s.service for s in spans}
    )

    roots = {
        s.attributes["phalanx.gang"]: s.trace_id
        for s in spans
        if s.name == "phalanx.queue.enqueue" and "phalanx.gang" in s.attributes
    }
    assert set(roots) == {"team-a/trainer", "team-b/evaluator"}
    assert roots["team-a/trainer"] != roots["team-b/evaluator"]  # each gang has its own trace
    dispatch = [s for s in spans if s.name == "phalanx.scheduler.dispatch_bind"]
    assert len(dispatch) == 1, [s.name for s in spans]
    bind = dispatch[0]
    assert any(s.name == "phalanx.binder.bind_batch" and s.trace_id == bind.trace_id for s in spans)
    for gang, trace_id in roots.items():
        in_trace = [s for s in spans if s.trace_id == trace_id]
        reaches_bind = bind.trace_id == trace_id or any((bind.trace_id, bind.span_id) in s.links for s in in_trace)
        assert reaches_bind, f"{gang}'s trace has no bind span nor a link to the group's bind"
    # and the bind links back to the member gang whose trace it is not in
    other = next(t for t in roots.values() if t != bind.trace_id)
    assert any(trace_id == other for trace_id, _ in bind.links)
