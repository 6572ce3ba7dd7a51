"""The API server's error answers, as the services raise and catch them without the kubernetes client.

Importing anything from the `kubernetes` package imports the whole client (its package `__init__` loads 330
modules: 19 MiB and 0.2-0.3 s of CPU per process, measured on this project's 2-core VM), so the services
raise `ApiError` of their own. It has the attributes of the client's `ApiException` (status, reason, body,
headers), and `api_errors()` also names that class once the client is loaded (by the job controller, the
explain command, tests driving the generated API classes), so one `except` reads both.
"""

from __future__ import annotations

import sys
from typing import Any, TypeGuard, cast


class ApiError(Exception):
    """An answer outside 2xx: `status` (int), `reason` (the HTTP reason, or the Status's message for an ERROR
    event of a watch), `body` (the answer's text, a Status in JSON), `headers`."""

    def __init__(
        self, status: int | None = None, reason: str | None = None, body: str | None = None, headers: Any = None
    ) -> None:
        super().__init__(status, reason)
        self.status = status
        self.reason = reason
        self.body = body
        self.headers = headers

    def __str__(self) -> str:
        text = f"({self.status})\nReason: {self.reason}\n"
        if self.body:
            text += f"HTTP response body: {self.body}\n"
        return text


def from_response(resp: Any) -> ApiError:
    """The error for an answer outside 2xx whose body has been read (status, reason, data, headers)."""
    data = getattr(resp, "data", b"") or b""
    body = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else str(data)
    return ApiError(
        status=resp.status, reason=getattr(resp, "reason", None), body=body, headers=getattr(resp, "headers", None)
    )


def api_errors() -> tuple[type[ApiError], ...]:
    """For `except`: ApiError, and the kubernetes client's ApiException when that client has been loaded
    (nothing can raise it before). Evaluated when an exception is being matched, so it costs nothing on the
    path that raises none."""
    client = sys.modules.get("kubernetes.client.exceptions")
    if client is None:
        return (ApiError,)
    # Typed as ApiError: the client's class has the same attributes, which is all the handlers read.
    return (ApiError, cast(type[ApiError], client.ApiException))


def is_api_error(exc: BaseException) -> TypeGuard[ApiError]:
    return isinstance(exc, api_errors())
