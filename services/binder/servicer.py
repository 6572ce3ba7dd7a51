"""gRPC servicer of the binder: validates requests, converts them to the model (phalanx.rpc.convert) and
delegates to BatchBinder and the backend; protobuf stops here."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TypeVar

import grpc

from phalanx.backends.base import ClusterBackend
from phalanx.binding.batch_binder import BatchBinder
from phalanx.binding.lock import LockTimeout
from phalanx.clock import Clock
from phalanx.config import redis_unreachable
from phalanx.model.binding import Assignment
from phalanx.rpc import validation
from phalanx.rpc.convert import (
    assignment_from_pb,
    bind_result_to_pb,
    evict_result_to_pb,
    gang_report_from_pb,
    pod_report_from_pb,
    victim_from_pb,
)
from phalanx.rpc.stream_call import serve_stream
from phalanx.telemetry.failures import FailureLog
from phalanx.v1 import binder_pb2, binder_pb2_grpc

log = logging.getLogger(__name__)
T = TypeVar("T")


class BinderServicer(binder_pb2_grpc.BinderServicer):
    def __init__(self, binder: BatchBinder, backend: ClusterBackend, clock: Clock) -> None:
        self.binder = binder
        self.backend = backend
        self.clock = clock
        self._failures = FailureLog(log)

    def _with_redis(self, context: grpc.ServicerContext, call: Callable[[], T]) -> T:
        """Runs `call`; Redis unreachable answers UNAVAILABLE naming it (the scheduler keeps the bind and
        sends it again) and logs one line, instead of gRPC's traceback for every call."""
        try:
            result = call()
        except Exception as exc:
            store = getattr(self.binder, "store", None)
            unreachable = redis_unreachable(exc, store.redis) if store is not None else ""
            if not unreachable:
                raise
            self._failures.failed(f"binder: {unreachable}")
            context.abort(grpc.StatusCode.UNAVAILABLE, unreachable)
        self._failures.cleared("binder: Redis")
        return result

    def Bind(self, request: binder_pb2.BindRequest, context: grpc.ServicerContext) -> binder_pb2.BindResponse:
        validation.abort_if_invalid(context, validation.bind_request(request))
        return self._bind(
            [assignment_from_pb(a) for a in request.assignments],
            request.all_or_nothing,
            request.now,
            request.trace_parent,
            context,
        )

    def BindManyStream(
        self, requests: Iterator[binder_pb2.BindManyRequest], context: grpc.ServicerContext
    ) -> Iterator[binder_pb2.BindManyResponse]:
        return serve_stream(self._bind_many)(requests, context)

    def _bind_many(
        self, request: binder_pb2.BindManyRequest, context: grpc.ServicerContext
    ) -> binder_pb2.BindManyResponse:
        validation.abort_if_invalid(context, validation.bind_many_request(request))
        batches = [
            ([assignment_from_pb(a) for a in b.assignments], b.all_or_nothing, b.trace_parent) for b in request.batches
        ]
        try:
            done = self._with_redis(context, lambda: self.binder.bind_many(batches, self.clock.now(request.now)))
        except LockTimeout as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        return binder_pb2.BindManyResponse(
            batches=[binder_pb2.BindResponse(results=[bind_result_to_pb(x) for x in r], fence=f) for r, f in done]
        )

    def _bind(
        self, assignments: list[Assignment], all_or_nothing: bool, now: float, trace: str, context: grpc.ServicerContext
    ) -> binder_pb2.BindResponse:
        try:
            results, fence = self._with_redis(
                context, lambda: self.binder.bind(assignments, all_or_nothing, self.clock.now(now), trace)
            )
        except LockTimeout as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        return binder_pb2.BindResponse(results=[bind_result_to_pb(r) for r in results], fence=fence)

    def BindStream(
        self, requests: Iterator[binder_pb2.BindRequest], context: grpc.ServicerContext
    ) -> Iterator[binder_pb2.BindResponse]:
        return serve_stream(self.Bind)(requests, context)

    def Report(self, request: binder_pb2.ReportRequest, context: grpc.ServicerContext) -> binder_pb2.ReportResponse:
        validation.abort_if_invalid(context, validation.report_request(request))
        pods = [pod_report_from_pb(p) for p in request.pods]
        gangs = [gang_report_from_pb(g) for g in request.gangs]
        self._with_redis(context, lambda: self.backend.report(pods, gangs, self.clock.now(request.now)))
        return binder_pb2.ReportResponse()

    def ReportStream(
        self, requests: Iterator[binder_pb2.ReportRequest], context: grpc.ServicerContext
    ) -> Iterator[binder_pb2.ReportResponse]:
        return serve_stream(self.Report)(requests, context)

    def Evict(self, request: binder_pb2.EvictRequest, context: grpc.ServicerContext) -> binder_pb2.EvictResponse:
        validation.abort_if_invalid(context, validation.evict_request(request))
        victims = [victim_from_pb(v) for v in request.victims]
        results = self._with_redis(context, lambda: self.backend.evict(victims, self.clock.now(request.now)))
        return binder_pb2.EvictResponse(results=[evict_result_to_pb(r) for r in results])
