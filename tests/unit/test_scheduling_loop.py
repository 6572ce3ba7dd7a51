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

    def unprompted_work(self) -> bool:
        return False

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


class _Timers:
    """A scheduler whose steps leave a timer (or none) and that may have work nothing announces."""

    def __init__(self, stop: threading.Event, next_wakeup: float | None, unprompted: bool = False) -> None:
        self.stop, self.next_wakeup, self.unprompted = stop, next_wakeup, unprompted
        self.waits: list[float] = []

    def step(self, now: float, prefetched: PopResult | None = None) -> StepResult:
        return StepResult(next_wakeup=None if self.next_wakeup is None else now + self.next_wakeup)

    def unprompted_work(self) -> bool:
        return self.unprompted

    def wait_for_work(self, now: float, timeout: float) -> PopResult | None:
        self.waits.append(timeout)
        self.stop.set()
        return None


def _first_wait(next_wakeup: float | None, unprompted: bool = False) -> float:
    stop = threading.Event()
    sched = _Timers(stop, next_wakeup, unprompted)
    SchedulingLoop(sched, None, Clock(False)).run(stop, idle_wait=0.2, max_idle_wait=1.0)  # type: ignore[arg-type]
    [wait] = sched.waits
    return wait


def test_an_idle_long_poll_lasts_until_the_steps_first_timer_within_its_bounds() -> None:
    """A fixed 0.2 s poll cost an idle scheduler and queue ~30 ms of CPU a second for polls that found nothing:
    with no timer due the poll lasts the longest bound; a timer due sooner ends it then, never before 0.2 s."""
    assert _first_wait(None) == 1.0
    assert _first_wait(30.0) == 1.0
    assert abs(_first_wait(0.5) - 0.5) < 0.05
    assert _first_wait(0.05) == 0.2


def test_work_no_arrival_announces_keeps_the_poll_short() -> None:
    """A resync, evictions under way or verdicts the queue has not taken: the step must come round soon."""
    assert _first_wait(None, unprompted=True) == 0.2
