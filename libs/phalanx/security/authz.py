"""Who may call which method: one table, checked on every call before the method runs.

The caller's identity is the common name of the client certificate it presented (mutual TLS verified it
against the installation's CA). A call from an identity the table does not name for that method gets
PERMISSION_DENIED; a method the table does not know is refused to everyone (deny by default).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import grpc

from phalanx.security.tls import ALL_IDENTITIES, OPERATOR, SCHEDULER, SIMULATOR

log = logging.getLogger(__name__)

_Q, _B, _S = "/phalanx.v1.Queue/", "/phalanx.v1.Binder/", "/phalanx.v1.Scheduler/"
HEALTH = "/grpc.health.v1.Health/"

# Only the scheduler takes pods out of the queue and binds; the simulator's driver feeds pods and cluster
# events on the embedded cluster; an operator may read. Every identity may ask for health.
SIMULATED_POLICY: Mapping[str, frozenset[str]] = {
    _Q + "Add": frozenset({SCHEDULER, SIMULATOR}),
    _Q + "AddStream": frozenset({SCHEDULER, SIMULATOR}),
    _Q + "Pop": frozenset({SCHEDULER}),
    _Q + "PopStream": frozenset({SCHEDULER}),
    _Q + "Done": frozenset({SCHEDULER}),
    _Q + "Remove": frozenset({SCHEDULER}),
    _Q + "MoveAll": frozenset({SCHEDULER}),
    _Q + "ReleaseInFlight": frozenset({SCHEDULER, SIMULATOR}),
    _Q + "Stats": frozenset({SCHEDULER, SIMULATOR, OPERATOR}),
    _B + "Bind": frozenset({SCHEDULER}),
    _B + "BindStream": frozenset({SCHEDULER}),
    _B + "BindManyStream": frozenset({SCHEDULER}),
    _B + "Report": frozenset({SCHEDULER}),
    _B + "ReportStream": frozenset({SCHEDULER}),
    _B + "Evict": frozenset({SCHEDULER}),
    _S + "ApplyClusterEvents": frozenset({SIMULATOR}),
    _S + "Step": frozenset({SIMULATOR}),
    _S + "StepStream": frozenset({SIMULATOR}),
    _S + "ListGangs": frozenset({SIMULATOR, OPERATOR}),
    HEALTH + "Check": frozenset(ALL_IDENTITIES),
    HEALTH + "Watch": frozenset(ALL_IDENTITIES),
}


def _without(policy: Mapping[str, frozenset[str]], identity: str) -> dict[str, frozenset[str]]:
    return {m: who if m.startswith(HEALTH) else who - {identity} for m, who in policy.items()}


# In Kubernetes mode the API server is the only source of pods and cluster state: the simulator's identity
# may call nothing but health, so a pod spec reaches the queue from the scheduler's cluster feed alone
# (a queue that took pods from another caller let a forged spec be placed and over-commit GPUs).
KUBERNETES_POLICY: Mapping[str, frozenset[str]] = _without(SIMULATED_POLICY, SIMULATOR)
POLICY = SIMULATED_POLICY  # the table a server uses when it is not told its mode


def policy_for(kubernetes: bool) -> Mapping[str, frozenset[str]]:
    """The table for a service running against the Kubernetes API server (`kubernetes`) or the simulator."""
    return KUBERNETES_POLICY if kubernetes else SIMULATED_POLICY


MAX_LOGGED = 1_000  # distinct refusals logged; a flood of them must not flood the log


def caller_identity(context: grpc.ServicerContext) -> str:
    """The common name of the verified client certificate; "" when the connection has none."""
    names = context.auth_context().get("x509_common_name") or []
    return names[0].decode(errors="replace") if names else ""


def refusal(
    method: str, identity: str, policy: Mapping[str, frozenset[str]] = POLICY
) -> tuple[grpc.StatusCode, str] | None:
    """The status to refuse a call with, or None if `identity` may call `method`."""
    if not identity:
        return grpc.StatusCode.UNAUTHENTICATED, f"{method}: no client certificate; calls need mutual TLS"
    allowed = policy.get(method)
    # Said so that the caller knows why an identity that works on the embedded cluster is refused here.
    mode = " when running against the Kubernetes API server" if policy is KUBERNETES_POLICY else ""
    if not allowed:
        return grpc.StatusCode.PERMISSION_DENIED, f"{method}: not served to any caller{mode}"
    if identity not in allowed:
        return (
            grpc.StatusCode.PERMISSION_DENIED,
            f"{method}: {identity!r} may not call this method{mode} (allowed: {', '.join(sorted(allowed))})",
        )
    return None


class AuthorizationInterceptor(grpc.ServerInterceptor):
    def __init__(self, policy: Mapping[str, frozenset[str]] = POLICY) -> None:
        self.policy = policy
        self._logged: set[tuple[str, str]] = set()

    def _check(self, method: str, context: grpc.ServicerContext) -> None:
        identity = caller_identity(context)
        refused = refusal(method, identity, self.policy)
        if refused is None:
            return
        code, text = refused
        if len(self._logged) < MAX_LOGGED and (identity, method) not in self._logged:
            self._logged.add((identity, method))
            log.warning("refused %s from %s (%s): %s", method, context.peer(), identity or "no identity", code.name)
        context.abort(code, text)

    def intercept_service(self, continuation: Callable[..., Any], details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(details)
        if handler is None:
            return None
        method, check = details.method, self._check
        if handler.unary_unary is not None:
            inner_uu = handler.unary_unary

            def unary_unary(request: Any, context: grpc.ServicerContext) -> Any:
                check(method, context)
                return inner_uu(request, context)

            return handler._replace(unary_unary=unary_unary)
        if handler.unary_stream is not None:
            inner_us = handler.unary_stream

            def unary_stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
                check(method, context)
                yield from inner_us(request, context)

            return handler._replace(unary_stream=unary_stream)
        if handler.stream_unary is not None:
            inner_su = handler.stream_unary

            def stream_unary(requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
                check(method, context)
                return inner_su(requests, context)

            return handler._replace(stream_unary=stream_unary)
        inner_ss = handler.stream_stream

        def stream_stream(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
            check(method, context)
            yield from inner_ss(requests, context)

        return handler._replace(stream_stream=stream_stream)
