"""The scheduler's per-pod metrics, kept cheap: one pass over a unit's verdicts, one observation per unit.

A unit (a gang's popped pods, or a round's pods without a gang) is judged at once; its pods' first
verdicts give the results (see SCHEDULE_ATTEMPTS' HELP), and the unit's duration is observed once per
result with the number of its pods. Children are bound to their labels here, once per scheduler.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from phalanx.metrics.catalog import ATTEMPT_DURATION, POD_E2E, SCHEDULE_ATTEMPTS
from phalanx.queueing.scheduling_queue import Outcome

if TYPE_CHECKING:
    from phalanx.scheduling.ports import Popped, Verdict

_PLACED = (Outcome.ASSUMED, Outcome.BOUND)
_POD_E2E = POD_E2E.labels()


class AttemptTally:
    def __init__(self, profile: str) -> None:
        self._scheduled = SCHEDULE_ATTEMPTS.labels("scheduled", profile)
        self._unschedulable = SCHEDULE_ATTEMPTS.labels("unschedulable", profile)
        self._error = SCHEDULE_ATTEMPTS.labels("error", profile)
        self._scheduled_seconds = ATTEMPT_DURATION.labels("scheduled", profile)
        self._unschedulable_seconds = ATTEMPT_DURATION.labels("unschedulable", profile)
        self._error_seconds = ATTEMPT_DURATION.labels("error", profile)
        self.judged = 0  # pods judged in the current round (see failed)

    def new_round(self) -> None:
        self.judged = 0

    def unit(self, items: Sequence["Popped"], verdicts: Sequence["Verdict"], mark: int, seconds: float) -> None:
        """`items` were judged in `seconds`; their verdicts are among verdicts[mark:] (with others': pods
        released along the way are answered too, and are not attempts). A pod with no verdict there was
        handed on (a satisfied gang's pods go with the pods without a gang) and is counted there."""
        waiting = {id(item) for item in items}
        placed = refused = 0
        for i in range(mark, len(verdicts)):
            v = verdicts[i]
            key = id(v.item)
            if key in waiting:
                waiting.discard(key)
                if v.outcome in _PLACED:
                    placed += 1
                else:
                    refused += 1
        if placed:
            self._scheduled.inc(placed)
            self._scheduled_seconds.observe(seconds, placed)
        if refused:
            self._unschedulable.inc(refused)
            self._unschedulable_seconds.observe(seconds, refused)
        self.judged += placed + refused

    def failed(self, popped: int, seconds: float) -> None:
        """The round raised: its `popped` pods that were not judged yet are errors."""
        errors = popped - self.judged
        if errors > 0:
            self._error.inc(errors)
            self._error_seconds.observe(seconds, errors)
        self.judged = 0


def observe_bound(now: float, created_at: float) -> None:
    """A pod the binder bound: its end-to-end latency (never negative: clocks of machines differ)."""
    seconds = now - created_at
    _POD_E2E.observe(seconds if seconds > 0.0 else 0.0)
