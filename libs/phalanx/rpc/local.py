"""Calls to a service in the same process (the combined layout, phalanx_combined): the servicer's own
handlers are called with the request message on the caller's thread, with no channel, TLS, HTTP/2 framing,
serialization or hand-off to a server thread in between.

What the handlers see is what a gRPC call gives them: the same request messages, a context whose `abort`
ends the call with a status, whose `is_active` says whether the caller still waits, and whose callbacks run
when the call ends. What the caller sees is what a channel gives it: a response, or a grpc.RpcError with a
code and details (a handler that raises anything else fails the call with UNKNOWN, as a gRPC server does,
instead of raising into the caller). The queue's, binder's and scheduler's mutual TLS and authorization are
not involved: nothing leaves the process. A call has no deadline: a gRPC caller's deadline guards against a
server that hangs or has no thread left, whereas here the handler runs on the caller's own thread and ends
by itself (the queue's long poll at its wait, at most 30 s; a bind after its bounded retries).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import grpc

log = logging.getLogger(__name__)


class LocalRpcError(grpc.RpcError):
    """The status an in-process call ended with, shaped as a gRPC client's error (code() and details())."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


class LocalContext:
    """The part of grpc.ServicerContext Phalanx's handlers use."""

    def __init__(self) -> None:
        self._callbacks: list[Callable[[], None]] = []
        self._active = True

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn:
        raise LocalRpcError(code, details)

    def is_active(self) -> bool:
        return self._active

    def add_callback(self, callback: Callable[[], None]) -> bool:
        self._callbacks.append(callback)
        return True

    def invocation_metadata(self) -> tuple[()]:
        return ()

    def end(self) -> None:
        self._active = False
        for callback in self._callbacks:
            try:
                callback()
            except Exception as exc:  # as gRPC does with a failing termination callback
                log.warning("in-process call: a termination callback failed: %s", exc)


def _failed(name: str, exc: Exception) -> LocalRpcError:
    log.exception("in-process call %s: the handler raised", name)
    return LocalRpcError(grpc.StatusCode.UNKNOWN, f"Exception calling application: {exc}")


class LocalStub:
    """Stands where a generated stub would (`stub.Done(request, timeout=...)`, `stub.PopStream(requests)`),
    calling `servicer`'s handler of the same name. Methods named ...Stream are bidirectional streams: the
    handler's responses are produced as the caller asks for them (StreamCaller puts a request, then takes
    one response)."""

    def __init__(self, servicer: Any) -> None:
        self._servicer = servicer

    def __getattr__(self, name: str) -> Callable[..., Any]:
        handler = getattr(self._servicer, name)
        if name.endswith("Stream"):
            return lambda requests: _stream(name, handler, requests)
        return lambda request, timeout=None, **_: _unary(name, handler, request)


def _unary(name: str, handler: Callable[[Any, Any], Any], request: Any) -> Any:
    context = LocalContext()
    with _as_call(name, context):
        return handler(request, context)


def _stream(
    name: str, handler: Callable[[Iterator[Any], Any], Iterator[Any]], requests: Iterator[Any]
) -> Iterator[Any]:
    context = LocalContext()
    with _as_call(name, context):
        yield from handler(requests, context)


@contextmanager
def _as_call(name: str, context: LocalContext) -> Iterator[None]:
    """A handler's end as a call's: its RpcError as is, anything else as UNKNOWN; the callbacks after."""
    try:
        yield
    except grpc.RpcError:
        raise
    except Exception as exc:
        raise _failed(name, exc) from exc
    finally:
        context.end()
