"""What a scheduling replica runs (phalanx.cluster.duties): the feed first, its rebuild awaited, then the
loop on the wall clock only; both stopped together."""

from __future__ import annotations

import threading
import time
from typing import Any

from phalanx.cluster.duties import SchedulingDuties
from phalanx.rpc.health import HealthMonitor, Heartbeat


class IdleLoop:
    """Stands for SchedulingLoop: beats once, then waits to be stopped."""

    def __init__(self) -> None:
        self.started = threading.Event()

    def run(self, stop: threading.Event, idle_wait: float = 0.2, beat: Heartbeat | None = None) -> None:
        assert beat is not None
        beat.beat()
        self.started.set()
        stop.wait()


class UnsyncedFeed:
    def __init__(self) -> None:
        self.stop_event = threading.Event()
        self.stopped = False

    def wait_synced(self, timeout: float | None = None) -> bool:
        time.sleep(timeout or 0.0)
        return False

    def stop(self) -> None:
        self.stopped = True


def duties(loop: IdleLoop, feed: Any = None, *, run_loop: bool = True, sync_timeout: float = 5.0) -> SchedulingDuties:
    return SchedulingDuties(
        loop,
        HealthMonitor(object(), "phalanx.v1.Scheduler"),  # type: ignore[arg-type]
        start_feed=lambda: feed,
        run_loop=run_loop,
        liveness_timeout=30.0,
        sync_timeout=sync_timeout,
    )


def test_the_loop_runs_on_the_wall_clock_and_stops_with_halt() -> None:
    loop = IdleLoop()
    d = duties(loop)
    d.start_feed()
    d.wait_synced()  # no feed: nothing to wait for
    d.start_loop()
    assert loop.started.wait(5)
    assert [hb.name for hb in d.monitor.heartbeats] == ["scheduling"]
    d.halt(5)
    assert d.loop_thread is not None and not d.loop_thread.is_alive()


def test_no_loop_on_the_virtual_clock() -> None:
    d = duties(IdleLoop(), run_loop=False)
    d.start_loop()
    assert d.loop_thread is None and d.monitor.heartbeats == []
    d.halt()


def test_waiting_for_the_rebuild_is_bounded_and_stops_when_told() -> None:
    feed = UnsyncedFeed()
    d = duties(IdleLoop(), feed, sync_timeout=0.3)
    d.start_feed()
    started = time.monotonic()
    d.wait_synced()
    assert 0.3 <= time.monotonic() - started < 3
    started = time.monotonic()
    d.wait_synced(keep_waiting=lambda: False)
    assert time.monotonic() - started < 1
    d.halt()
    assert feed.stop_event.is_set() and feed.stopped
