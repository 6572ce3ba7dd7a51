"""Polling helper for tests that wait on real servers (API server, services on the wall clock)."""

from __future__ import annotations

import time
from typing import Any, Callable


def wait_for(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    """Calls `check` until it returns something truthy (returned), failing after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)
