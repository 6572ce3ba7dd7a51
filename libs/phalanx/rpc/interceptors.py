"""gRPC interceptors that carry trace context in call metadata, leaving health checks out of traces."""

from __future__ import annotations

from typing import Any, Callable

import grpc
from opentelemetry import propagate
from opentelemetry.trace import SpanKind, Status, StatusCode

from phalanx.telemetry.tracing import tracer

_UNTRACED = ("/grpc.health.v1.Health/",)


class _ClientCallDetails(grpc.ClientCallDetails):
    def __init__(self, base: grpc.ClientCallDetails, metadata: list[tuple[str, str]]) -> None:
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = metadata
        self.credentials = base.credentials
        self.wait_for_ready = getattr(base, "wait_for_ready", None)
        self.compression = getattr(base, "compression", None)


class TracingClientInterceptor(grpc.UnaryUnaryClientInterceptor):
    def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, request: Any
    ) -> Any:
        with tracer().start_as_current_span(f"client {details.method}", kind=SpanKind.CLIENT) as span:
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            metadata = list(details.metadata or []) + list(carrier.items())
            response = continuation(_ClientCallDetails(details, metadata), request)
            if response.exception() is not None:
                span.set_status(Status(StatusCode.ERROR, str(response.code())))
            return response


class TracingServerInterceptor(grpc.ServerInterceptor):
    def intercept_service(self, continuation: Callable[..., Any], details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(details)
        method = details.method
        if handler is None or handler.unary_unary is None or method.startswith(_UNTRACED):
            return handler
        carrier = {k: v for k, v in (details.invocation_metadata or ())}
        inner = handler.unary_unary

        def traced(request: Any, ctx: grpc.ServicerContext) -> Any:
            parent = propagate.extract(carrier)
            with tracer().start_as_current_span(f"server {method}", context=parent, kind=SpanKind.SERVER) as span:
                try:
                    return inner(request, ctx)
                except Exception as exc:
                    span.record_exception(exc)
                    span.set_status(Status(StatusCode.ERROR, str(exc)))
                    raise

        return grpc.unary_unary_rpc_method_handler(
            traced, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )
