"""Time for the services: the wall clock, or a virtual clock set by each request (simulation)."""

from __future__ import annotations

import time


class Clock:
    """`now(requested)` returns the request's time in virtual mode and the wall clock otherwise."""

    def __init__(self, virtual: bool) -> None:
        self.virtual = virtual

    def now(self, requested: float = 0.0) -> float:
        return requested if self.virtual else time.time()
