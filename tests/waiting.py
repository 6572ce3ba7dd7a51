"""Helpers for tests that wait on real servers (API server, services on the wall clock).

A test that asserts something did not happen first waits for a positive signal that the code under test
has decided (a condition it wrote, a later pod bound, calls it made): a sleep followed by a negative
assertion passes on a slow machine whatever the code does.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def recording_calls(obj: Any, method: str) -> Iterator[list[tuple[Any, ...]]]:
    """Within the block, `obj.method` still runs but each call's positional arguments are appended to the
    yielded list first (whether the call then succeeds or raises): how a test sees that a component acted."""
    original = getattr(obj, method)
    own = method in vars(obj)  # an instance attribute (a callback) rather than a method of its class
    calls: list[tuple[Any, ...]] = []

    def recorded(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return original(*args, **kwargs)

    setattr(obj, method, recorded)
    try:
        yield calls
    finally:
        if own:
            setattr(obj, method, original)
        else:
            delattr(obj, method)
