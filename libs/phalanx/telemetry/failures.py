"""Failures told in one line: a failed call's status, and a failure that repeats logged once, not every retry."""

from __future__ import annotations

import logging
import time


def rpc_failure(exc: BaseException) -> str:
    """One line for a failed call: gRPC's status and details (its str() spans several lines and opens with
    "<_InactiveRpcError of RPC that terminated with:"), or the exception's first line."""
    code, details = getattr(exc, "code", None), getattr(exc, "details", None)
    if callable(code) and callable(details):  # a grpc.RpcError, known by its shape: no gRPC import needed here
        status = code()
        name = status.name if status is not None else "UNKNOWN"
        lines = (details() or "").splitlines()
        return f"{name}: {lines[0]}" if lines else name
    text = str(exc).splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class FailureLog:
    """Logs a failure that repeats (a dependency down, every retry failing) as one line, again only when
    the line changes or `every` seconds later, and once more when it clears."""

    def __init__(self, logger: logging.Logger, every: float = 30.0) -> None:
        self.logger = logger
        self.every = every
        self.line = ""
        self._logged_at = 0.0

    def failed(self, line: str) -> None:
        now = time.monotonic()
        if line != self.line or now - self._logged_at >= self.every:
            self.logger.error("%s", line)
            self._logged_at = now
        self.line = line

    def cleared(self, what: str) -> None:
        if self.line:
            self.logger.warning("%s works again", what)
            self.line = ""
