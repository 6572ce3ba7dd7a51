"""What a scheduling replica runs: the cluster feed (Kubernetes mode) and the scheduling loop (wall clock)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from phalanx.cluster.loop import SchedulingLoop
from phalanx.rpc.health import HealthMonitor, Heartbeat

if TYPE_CHECKING:
    from phalanx.cluster.feed import ClusterFeed

log = logging.getLogger(__name__)


class SchedulingDuties:
    """Started in order (the feed, its rebuild, then the loop: the rebuild comes before scheduling) and
    stopped together. `start_feed` starts the cluster feed, or returns None where there is none (the
    simulator's events come through the Scheduler API); `run_loop` is False on the virtual clock, where the
    simulator's Step calls do the scheduling."""

    def __init__(
        self,
        loop: SchedulingLoop,
        monitor: HealthMonitor,
        *,
        start_feed: Callable[[], ClusterFeed | None],
        run_loop: bool,
        liveness_timeout: float,
        sync_timeout: float,
    ) -> None:
        self.scheduling_loop = loop
        self.monitor = monitor
        self._start_feed = start_feed
        self.run_loop = run_loop
        self.liveness_timeout = liveness_timeout
        self.sync_timeout = sync_timeout
        self.feed: ClusterFeed | None = None
        self.stop_event = threading.Event()
        self.loop_thread: threading.Thread | None = None

    def start_feed(self) -> None:
        self.feed = self._start_feed()

    def open_feed(self) -> None:
        """A feed started gated (leadership.py: listing while the scheduler recovers) may apply now."""
        if self.feed is not None:
            self.feed.open()

    def wait_synced(self, keep_waiting: Callable[[], bool] = lambda: True) -> None:
        """Waits for the feed's first batch (at most `sync_timeout`, and only while `keep_waiting()`)."""
        if self.feed is None:
            return
        deadline = time.monotonic() + self.sync_timeout
        while not self.feed.wait_synced(0.2):
            if not keep_waiting():
                return
            if time.monotonic() > deadline:
                log.warning("the cluster feed has not synced after %gs; scheduling anyway", self.sync_timeout)
                return

    def start_loop(self) -> None:
        if not self.run_loop or self.stop_event.is_set():
            return
        beat = self.monitor.add_heartbeat(Heartbeat("scheduling", self.liveness_timeout))
        self.loop_thread = threading.Thread(
            target=self.scheduling_loop.run,
            args=(self.stop_event,),
            kwargs={"beat": beat},
            name="schedule-loop",
            daemon=True,
        )
        self.loop_thread.start()

    def signal_stop(self) -> None:
        """Stops the loop and the feed at their next check, without waiting (safe on their own threads)."""
        self.stop_event.set()
        if self.feed is not None:
            self.feed.stop_event.set()

    def halt(self, timeout: float = 10.0) -> None:
        """Stops both and waits for them (not from their own threads)."""
        self.signal_stop()
        if self.feed is not None:
            self.feed.stop()
        if self.loop_thread is not None:
            self.loop_thread.join(timeout)
