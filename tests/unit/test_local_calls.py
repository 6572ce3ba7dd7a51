"""In-process calls (phalanx.rpc.local), what phalanx-combined's scheduler uses to call its own queue and
binder: the caller sees what a gRPC channel would give it (a response, or an RpcError with a code and
details, never the handler's own exception), on unary calls and on the streams StreamCaller carries."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from builders import model_pod

from phalanx.clock import Clock
from phalanx.queueing.scheduling_queue import QueueSettings, SchedulingQueue
from phalanx.rpc.clients import QueueClient
from phalanx.rpc.local import LocalStub
from phalanx.rpc.stream_call import StreamCaller, serve_stream
from phalanx.security.tls import PLAINTEXT
from phalanx.telemetry.failures import rpc_failure
from phalanx_queue.servicer import QueueServicer


class Echo:
    """A servicer: Say answers, fails as told, and counts its ended calls."""

    def __init__(self) -> None:
        self.ended = 0
        self.active_seen: list[bool] = []

    def Say(self, request: str, context: Any) -> str:
        context.add_callback(self._end)
        if request == "abort":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "request: 'abort' is refused")
        if request == "crash":
            raise ValueError("a bug in the handler")
        self.active_seen.append(context.is_active())
        return f"heard {request}"

    def _end(self) -> None:
        self.ended += 1

    def SayStream(self, requests: Iterator[str], context: Any) -> Iterator[str]:
        context.add_callback(self._end)
        return serve_stream(self.Say)(requests, context)


def test_a_unary_call_answers_and_ends() -> None:
    echo = Echo()
    assert LocalStub(echo).Say("hi", timeout=5) == "heard hi"
    assert echo.active_seen == [True] and echo.ended == 1


@pytest.mark.parametrize(
    ("request_", "code", "details"),
    [
        ("abort", grpc.StatusCode.INVALID_ARGUMENT, "request: 'abort' is refused"),
        ("crash", grpc.StatusCode.UNKNOWN, "Exception calling application: a bug in the handler"),
    ],
)
def test_a_failed_call_raises_an_rpc_error_with_its_status(request_: str, code: grpc.StatusCode, details: str) -> None:
    echo = Echo()
    with pytest.raises(grpc.RpcError) as exc:
        LocalStub(echo).Say(request_)
    assert exc.value.code() == code and exc.value.details() == details  # type: ignore[attr-defined]
    assert rpc_failure(exc.value) == f"{code.name}: {details}"
    assert echo.ended == 1


def test_a_stream_carries_calls_and_is_reopened_after_a_failure() -> None:
    echo = Echo()
    caller: StreamCaller[str, str] = StreamCaller(LocalStub(echo).SayStream, timeout=5)
    assert [caller.call("a"), caller.call("b")] == ["heard a", "heard b"]
    with pytest.raises(grpc.RpcError) as exc:
        caller.call("abort")
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    assert caller.call("c") == "heard c"  # a new stream
    # The failed stream ended and its context's callbacks ran (the queue's long poll is woken by one): its own
    # and one per Say on it (a, b, abort); the new stream's have not.
    assert echo.ended == 4
    caller.close()


def test_the_queue_client_adds_and_pops_through_the_servicer_in_process() -> None:
    """The scheduler's queue client on the queue's servicer: the same pods out, in the queue's order."""
    servicer = QueueServicer(SchedulingQueue(QueueSettings(unschedulable_flush=0.0)), Clock(virtual=True))
    client = QueueClient("127.0.0.1:1", PLAINTEXT, consumer="s", servicer=servicer)  # no channel is made
    assert client.channel is None
    pods = [model_pod(f"g-{i}", "g", created=1.0) for i in range(3)] + [model_pod("solo", created=0.5)]
    assert client.add(pods, now=1.0).added == 4
    assert client.incarnation == servicer.incarnation
    popped = client.pop(10, now=2.0)
    assert [p.pod.name for p in popped.items] == ["solo", "g-0", "g-1", "g-2"]
    assert servicer.queue.stats(2.0).in_flight == 4  # lent to this consumer, as over gRPC
    client.close()
