"""The wall-clock scheduling loop: one GangScheduler stepped continuously, and what its health reads of it."""

from __future__ import annotations

import logging
import threading
import time

import grpc

from phalanx.clock import Clock
from phalanx.config import redis_unreachable
from phalanx.rpc.health import Heartbeat
from phalanx.scheduling.ports import QueuePort
from phalanx.scheduling.scheduler import GangScheduler
from phalanx.state.store import FencedOut
from phalanx.telemetry.failures import FailureLog, rpc_failure

log = logging.getLogger(__name__)

# The idle long poll of the queue lasts until the first timer the step left (a gang's timeout, a bind's
# retry, a backed-off pod's return), within these bounds: a pod's arrival ends it at once whatever its length.
# At a fixed 0.2 s an idle scheduler and queue spent ~30 ms of CPU a second on polls that found nothing.
IDLE_WAIT = 0.2  # the shortest: a timer due sooner is served this late at most, as every timer was before
MAX_IDLE_WAIT = 1.0  # the longest, with no timer due: what the loop has to do unprompted waits this long at most


class SchedulingLoop:
    """Steps `scheduler` under `lock`, which every other user of the scheduler (cluster events, the
    Scheduler API) holds too: the scheduler's memory is single-threaded by design."""

    def __init__(
        self, scheduler: GangScheduler, queue: QueuePort, clock: Clock, lock: threading.Lock | None = None
    ) -> None:
        self.scheduler = scheduler
        self.queue = queue
        self.clock = clock
        self.lock = lock if lock is not None else threading.Lock()
        self.failing_since: float | None = None  # monotonic time of the first of the failing steps
        self.last_error = ""
        self._failures = FailureLog(log)

    def recover(self) -> None:
        """Rebuilds the scheduler's memory from Redis (a new leader taking over)."""
        with self.lock:
            self.scheduler.recover(self.clock.now())

    def run(
        self,
        stop: threading.Event,
        idle_wait: float = IDLE_WAIT,
        beat: Heartbeat | None = None,
        max_idle_wait: float = MAX_IDLE_WAIT,
    ) -> None:
        """Steps until `stop`; between steps, long-polls the queue for the next pod, until the step's next timer
        (`poll_seconds`). `beat` is beaten at every iteration (liveness); a step that keeps failing is reported
        through `step_error` (readiness)."""
        prefetched = None
        while not stop.is_set():
            if beat is not None:
                beat.beat()
            try:
                with self.lock:
                    result = self.scheduler.step(self.clock.now(), prefetched=prefetched)
                    wait = self.poll_seconds(result.next_wakeup, idle_wait, max_idle_wait)
                self.failing_since = None
                self._failures.cleared("scheduling")
                # A step ends when the queue had nothing runnable, so the next question is a long poll, even
                # after a step that scheduled pods: stepping again at once asked the queue a second time for
                # nothing (a third of the pops under steady arrival). Outside the lock: cluster events must
                # not wait behind it.
                prefetched = self.scheduler.wait_for_work(self.clock.now(), wait)
            except FencedOut as exc:  # another replica leads (leader election): never retried
                log.error("scheduling stopped: %s", exc)
                self.last_error = f"FencedOut: {exc}"
                stop.set()
                return
            except Exception as exc:  # keep serving: the step's pods went back to the queue; it is retried
                unreachable = self.unreachable(exc)
                if unreachable:  # a dependency is down: one line naming it, not a traceback every second
                    self._failures.failed(f"scheduling step failed: {unreachable}; retrying every second")
                    self.last_error = unreachable
                else:
                    log.exception("scheduling step failed")
                    self.last_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
                if self.failing_since is None:
                    self.failing_since = time.monotonic()
                prefetched = None
                stop.wait(1.0)

    def poll_seconds(self, next_wakeup: float | None, shortest: float, longest: float) -> float:
        """How long the idle long poll may wait: until `next_wakeup` (the step's first timer), between
        `shortest` and `longest`; `shortest` while the scheduler has work no arrival or timer announces
        (evictions under way: GangScheduler.unprompted_work). Caller holds the lock."""
        if longest <= shortest or self.scheduler.unprompted_work():
            return shortest
        if next_wakeup is None:
            return longest
        return min(longest, max(shortest, next_wakeup - self.clock.now()))

    def unreachable(self, exc: Exception) -> str:
        """One line naming the dependency a failed step could not reach ("" for any other failure). The
        step's gRPC calls go to the queue (the binder's are answered inside it: a bind that fails is kept
        and sent again)."""
        if isinstance(exc, grpc.RpcError) and exc.code() in (
            grpc.StatusCode.UNAVAILABLE,
            grpc.StatusCode.DEADLINE_EXCEEDED,
        ):
            return f"the queue at {getattr(self.queue, 'address', '?')} did not answer: {rpc_failure(exc)}"
        store = getattr(self.scheduler, "store", None)
        return redis_unreachable(exc, store.redis) if store is not None else ""

    def step_error(self, grace: float = 10.0) -> str:
        """Readiness: why scheduling has been failing for longer than `grace` seconds, or ""."""
        since = self.failing_since
        if since is None or time.monotonic() - since < grace:
            return ""
        return f"every scheduling step for {time.monotonic() - since:.0f}s failed, last: {self.last_error}"
