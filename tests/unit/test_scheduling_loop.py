"""The wall-clock loop's rhythm: a step, then a long poll of the queue, whatever the step did."""

from __future__ import annotations

import threading

from phalanx.clock import Clock
from phalanx.cluster.loop import SchedulingLoop
from phalanx.scheduling.ports import PopResult
from phalanx.scheduling.scheduler import StepResult


class _Recording:
    """Steps that always schedule something, and long polls that find work every other time."""

    def __init__(self, stop: threading.Event, calls: int) -> None:
        self.stop, self.left = stop, calls
        self.log: list[str] = []
        self.prefetched_seen: list[bool] = []

    def _count(self, what: str) -> None:
        self.log.append(what)
        self.left -= 1
        if self.left <= 0:
            self.stop.set()

    def step(self, now: float, prefetched: PopResult | None = None) -> StepResult:
        self.prefetched_seen.append(prefetched is not None)
        self._count("step")
        return StepResult(attempted=3, bound=3)

    def wait_for_work(self, now: float, timeout: float) -> PopResult | None:
        self._count("poll")
        return PopResult([], None, 0) if self.log.count("poll") % 2 else None


def test_a_step_that_scheduled_pods_is_followed_by_a_long_poll_not_another_step() -> None:
    """A step runs until the queue had nothing runnable; asking again at once is a pop that finds nothing
    (a third of the pops under steady arrival when the loop did so)."""
    stop = threading.Event()
    sched = _Recording(stop, calls=8)
    loop = SchedulingLoop(sched, None, Clock(False))  # type: ignore[arg-type]
    loop.run(stop, idle_wait=0.0)
    assert sched.log == ["step", "poll"] * 4
    # What a poll found goes to the next step; a poll that found nothing leaves the step to pop itself.
    assert sched.prefetched_seen == [False, True, False, True]
