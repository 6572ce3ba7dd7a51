"""OpenTelemetry for the three services.

A gang's path is one trace: the queue opens it when the gang's first pod is enqueued and hands its W3C
traceparent along with every pod of the gang (the queue is asynchronous, so gRPC metadata alone cannot
carry it); the scheduler's attempts and the binder's batch are spans under it. gRPC calls themselves are
also traced through metadata, so a call's server span sits under the client's span.

Configuration is the standard OTEL_* environment: OTEL_EXPORTER_OTLP_ENDPOINT enables OTLP export,
OTEL_SERVICE_NAME overrides the service name, OTEL_SDK_DISABLED=true turns tracing off.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Iterable, Iterator

from opentelemetry import context, propagate, trace
from opentelemetry.trace import Link, Span

_TRACER_NAME = "phalanx"


def tracing_enabled() -> bool:
    return os.environ.get("OTEL_SDK_DISABLED", "").lower() != "true"


def exporting(env: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Whether an OTLP endpoint is configured in `env` (the standard variables)."""
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def quiet_unless_exporting(env: dict[str, str]) -> dict[str, str]:
    """The environment for services a harness starts (`phalanx simulate`, the chaos stack): tracing off,
    since nobody would read the spans, unless the user configured an OTLP endpoint; an explicit
    OTEL_SDK_DISABLED is kept either way."""
    if not exporting(env):
        env.setdefault("OTEL_SDK_DISABLED", "true")
    return env


def setup_tracing(service_name: str) -> None:
    """Installs a tracer provider unless one is already installed (tests install an in-memory one)."""
    if not tracing_enabled():
        return
    # The SDK only when tracing is on: importing it costs each service ~60 ms of CPU at start.
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return
    name = os.environ.get("OTEL_SERVICE_NAME", service_name)
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    if exporting():
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)


def tracer() -> trace.Tracer:
    return trace.get_tracer(_TRACER_NAME)


def traceparent_of(span: Span) -> str:
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent", "")


def context_from_traceparent(traceparent: str) -> context.Context | None:
    if not traceparent:
        return None
    return propagate.extract({"traceparent": traceparent})


def links_to(traceparents: Iterable[str]) -> list[Link]:
    """Span links to the spans the traceparents name (empty or malformed ones are skipped): a bind made for
    several gangs at once belongs to one gang's trace and links to the others'."""
    links = []
    for parent in traceparents:
        ctx = context_from_traceparent(parent)
        if ctx is None:
            continue
        span_context = trace.get_current_span(ctx).get_span_context()
        if span_context.is_valid:
            links.append(Link(span_context))
    return links


@contextmanager
def child_span(
    name: str, traceparent: str, attributes: dict[str, Any] | None = None, linked: Iterable[str] = ()
) -> Iterator[Span]:
    """A span in the gang's trace named by `traceparent` (a new trace when it is empty). When the current
    span already belongs to that trace (a gRPC server span of a call made for this gang), the new span
    nests under it, so the tree shows the hop; otherwise it hangs off the gang's root. `linked`: the
    traceparents of other gangs this span also works for."""
    ctx = context_from_traceparent(traceparent)
    current = trace.get_current_span().get_span_context()
    if ctx is not None and current.is_valid:
        wanted = trace.get_current_span(ctx).get_span_context()
        if wanted.trace_id == current.trace_id:
            ctx = None  # nest under the current span
    links = links_to(p for p in linked if p and p != traceparent)
    with tracer().start_as_current_span(name, context=ctx, attributes=attributes or {}, links=links) as span:
        yield span


def mark_linked(name: str, traceparents: Iterable[str], target: Span, attributes: dict[str, Any] | None = None) -> None:
    """In each trace named by `traceparents`, a short span linking to `target` (a span of another trace):
    whichever gang of a group a user looks at, its trace leads to the shared bind."""
    link = Link(target.get_span_context())
    for parent in traceparents:
        ctx = context_from_traceparent(parent)
        if ctx is None:
            continue
        tracer().start_span(name, context=ctx, attributes=attributes or {}, links=[link]).end()


def nested_traceparent(traceparent: str) -> str:
    """The traceparent to hand to the next hop: the current span's when it belongs to the same trace
    (so the next service's spans nest under it), else `traceparent` itself."""
    current = trace.get_current_span()
    ctx = context_from_traceparent(traceparent)
    if ctx is not None and current.get_span_context().is_valid:
        if trace.get_current_span(ctx).get_span_context().trace_id == current.get_span_context().trace_id:
            return traceparent_of(current)
    return traceparent


def start_root(name: str, attributes: dict[str, Any] | None = None) -> str:
    """Opens and ends a span that starts a new trace; returns its traceparent for later children, "" when
    no tracer provider is installed (tracing off: the span would be invalid, and has no traceparent)."""
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return ""  # the queue opens a root per plain pod: 8 us each, for nothing, with tracing off
    span = tracer().start_span(name, context=context.Context(), attributes=attributes or {})
    parent = traceparent_of(span)
    span.end()
    return parent
