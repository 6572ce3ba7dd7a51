"""How the binder makes a call to the API server and reads its answer, in one place."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from phalanx import fast_json
from phalanx.kube.errors import api_errors, is_api_error


def json_or_none(call: Callable[[], Any]) -> dict[str, Any] | None:
    """The JSON answer of `call` (made with _preload_content=False); None when the object does not exist."""
    try:
        resp = call()
    except api_errors() as exc:
        if exc.status == 404:
            return None
        raise
    return fast_json.loads(resp.data)


def release(resp: Any) -> None:
    """Reads an answer taken with _preload_content=False, which gives its connection back to the pool.
    Unread, the connection is dropped and the next call opens a new TLS connection: measured on the local
    API server, 300 Events unread made 300 connections and cost the client 4x the CPU (0.87 s against
    0.22 s) and 3.3x the time."""
    try:
        resp.read()
        resp.release_conn()
    except Exception:  # the status was read and was a success: the rest only recycles the connection
        pass


def transient(exc: BaseException) -> bool:
    """No answer, or an answer that says "later": 429, 5xx, timeouts, connection errors."""
    import urllib3

    if is_api_error(exc):
        return exc.status == 429 or (exc.status or 0) >= 500
    return isinstance(exc, (urllib3.exceptions.HTTPError, OSError))


def api_message(exc: Any) -> str:
    """The message of an API server's error answer."""
    try:
        return str(fast_json.loads(exc.body).get("message") or exc.reason)
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)
