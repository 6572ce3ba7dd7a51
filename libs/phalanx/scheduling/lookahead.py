"""The simulator's look-ahead: instants to come at which only pods arrive or finish, handed to a step.

A real cluster cannot know its future, so the production loop passes none. The simulator knows its
workload: while the cluster stays quiet (every pod of an instant placed, the queue about to be empty, no
gang timer due before the next instant), the step moves on to the next instant within the same pop, so a
run of arrivals costs one pop and one bind per instant and no extra round trip. At the first instant that
is not quiet the step stops and says how many instants it consumed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from phalanx.queueing.scheduling_queue import Outcome
from phalanx.scheduling.ports import Popped, PopResult, Verdict


@dataclass
class Instant:
    at: float
    arrivals: list[Popped] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)  # pod keys


# What a quiet round may have told every pod it popped: it left the queue.
_SETTLED = (Outcome.ASSUMED, Outcome.BOUND, Outcome.DROPPED)


class Lookahead:
    def __init__(self, instants: Iterable[Instant] = ()) -> None:
        self._instants = deque(instants)
        self.consumed = 0

    def __bool__(self) -> bool:
        return bool(self._instants)

    def next_at(self) -> float:
        return self._instants[0].at

    def take(self) -> Instant:
        self.consumed += 1
        return self._instants.popleft()

    def quiet_after(
        self, popped: PopResult, verdicts: list[Verdict], gangs_failed: bool, no_timer_before: Callable[[float], bool]
    ) -> bool:
        """Whether, once this round's verdicts reach the queue, nothing is left to do before the next
        instant: the queue held only what was popped, every popped pod leaves it, no gang failed, and no
        gang timer falls due in between."""
        if not self._instants or popped.pending != len(popped.items) or gangs_failed:
            return False
        if any(v.outcome not in _SETTLED for v in verdicts):
            return False
        return no_timer_before(self.next_at())

    def idle_until_next(self, popped: PopResult, no_timer_before: Callable[[float], bool]) -> bool:
        """Nothing was popped and nothing waits: the next instant (if only finishes happen in between)
        can start at once."""
        return bool(self._instants) and popped.pending == 0 and no_timer_before(self.next_at())
