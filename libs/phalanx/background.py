"""One call on a daemon thread of its own, its outcome in a Future.

For work a long-lived thread hands off and collects later (a list's next page fetched while this one is
delivered, a reconciliation pass's Redis reads while the feed goes on applying events). A daemon thread, not an
executor's: an executor's threads are joined at interpreter exit, and a call stuck on a dead peer must not hold
the process there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

_T = TypeVar("_T")


def in_background(fn: Callable[..., _T], *args: Any, name: str) -> Future[_T]:
    """`fn(*args)` started now on a daemon thread named `name`; its result, or what it raised, in the Future."""
    future: Future[_T] = Future()

    def run() -> None:
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to whoever takes the result, which raises it
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future
