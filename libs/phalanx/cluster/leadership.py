"""One scheduler replica under leader election (leader.py): what it starts when it wins the Lease, and how
it stops when it loses it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from phalanx.cluster.duties import SchedulingDuties
from phalanx.cluster.leader import ElectionConfig, LeaderElector, claim_fencing_term
from phalanx.cluster.loop import SchedulingLoop
from phalanx.rpc.health import HealthMonitor, Heartbeat
from phalanx.state.store import FencedOut

log = logging.getLogger(__name__)


class Leadership:
    """Standby (serving health) until it wins the Lease; then it claims the fencing term in Redis, starts the
    cluster feed gated (its full lists of the API server run meanwhile), rebuilds the scheduler's memory from
    Redis (recover), opens the feed to apply what it listed and, once it has synced, starts the scheduling
    loop. Losing the Lease, or a write refused as fenced out, stops the loop and the feed at once and calls
    `on_lost(reason)` (the service exits, as kube-scheduler does, and restarts as a standby). A graceful `stop` releases the Lease.

    `api_client`: a KubeConnection (kube/connection.py) or a kubernetes ApiClient, for the Lease; `new_duties` builds what the leader runs; `ready`,
    if given, blocks on the takeover thread after the term is claimed until what recovery and scheduling
    need serves (the queue and the binder: the replica campaigns while it still waits for them); False gives
    the takeover up (the process is ending)."""

    def __init__(
        self,
        api_client: Any,
        config: ElectionConfig,
        loop: SchedulingLoop,
        monitor: HealthMonitor,
        new_duties: Callable[[], SchedulingDuties],
        *,
        on_lost: Callable[[str], None] | None = None,
        ready: Callable[[], bool] | None = None,
    ) -> None:
        from phalanx.kube.api import KubeApi

        self.config = config
        self.loop = loop
        self.store = loop.scheduler.store
        self.new_duties = new_duties
        self.on_lost = on_lost
        self.ready = ready
        beat = monitor.add_heartbeat(Heartbeat("leader election", max(60.0, 4 * config.lease_duration)))
        self.elector = LeaderElector(
            KubeApi(api_client),
            config,
            on_started_leading=self._lead,
            on_stopped_leading=self._lose,
            on_tick=beat.beat,
        )
        self.store.on_fenced = lambda exc: self._lose(str(exc))  # "fenced out: ..."
        self._stop = threading.Event()  # ends the elector's loop
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.scheduling: SchedulingDuties | None = None
        self.closed = False  # stopping or lost: nothing starts any more
        self.lost = ""
        self.scheduling_since: float | None = None  # monotonic time the loop started (takeover measurements)

    @property
    def identity(self) -> str:
        return self.config.identity

    def start(self) -> Leadership:
        self._thread = self.elector.start(self._stop)
        return self

    def is_leader(self) -> bool:
        return self.elector.is_leader() and not self.closed

    def standby_reason(self) -> str:
        """Why this replica does not schedule, "" when it leads: a standby's memory is empty."""
        return "" if self.is_leader() else f"scheduler replica {self.identity} is a standby; the leader holds the gangs"

    # -- taking over -------------------------------------------------------------------------------------
    def _lead(self, term: int) -> None:
        claimed = self._retry(lambda: claim_fencing_term(self.elector, self.store), "claiming the fencing term")
        if claimed is None:
            return
        self.store.term = claimed
        if self.ready is not None and not self.ready():
            return
        log.info("leader election: %s took over with fencing term %d; recovering from Redis", self.identity, claimed)
        # The feed's lists start now, gated: they run while memory is recovered from Redis, and nothing is
        # applied to the scheduler before that ends (the rebuild compares the API server with what Redis holds).
        with self._lock:
            if self.closed:
                return
            self.scheduling = scheduling = self.new_duties()
            scheduling.start_feed()
        if self._retry(self._recover, "recovering from Redis") is None:
            return  # lost or stopping: _lose / stop halt the feed, which applied nothing
        with self._lock:
            if self.closed:
                return
            scheduling.open_feed()
        scheduling.wait_synced(lambda: not self.closed)
        with self._lock:
            if self.closed:
                return
            scheduling.start_loop()
            self.scheduling_since = time.monotonic()
        log.info("leader election: %s is scheduling", self.identity)

    def _recover(self) -> bool:
        self.loop.recover()
        return True

    def _retry(self, fn: Callable[[], Any], what: str) -> Any:
        """fn() until it succeeds; None once leadership is lost or the replica stops."""
        while not self.closed:
            try:
                return fn()
            except FencedOut as exc:
                self._lose(str(exc))
                return None
            except Exception as exc:
                if not self.elector.leading.is_set():
                    return None
                log.warning("leader election: %s failed (%s); retrying", what, str(exc).splitlines()[0][:200] or exc)
                self._stop.wait(1.0)
        return None

    # -- giving up -----------------------------------------------------------------------------------------
    def _lose(self, reason: str) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self.lost = reason or "leadership lost"
            self.store.depose(self.lost)  # every later write fails here, before Redis
            scheduling = self.scheduling
        self._stop.set()
        if scheduling is not None:
            scheduling.signal_stop()
        log.error("leader election: %s steps down: %s", self.identity, self.lost)
        threading.Thread(target=self._finish_loss, args=(scheduling,), name="step-down", daemon=True).start()

    def _finish_loss(self, scheduling: SchedulingDuties | None) -> None:
        if scheduling is not None:
            scheduling.halt()
        if self.on_lost is not None:
            self.on_lost(self.lost)

    def stop(self) -> None:
        """A graceful stop (SIGTERM): scheduling stops first, then the Lease is released so a standby takes
        over within a retry period."""
        with self._lock:
            already = self.closed
            self.closed = True
            scheduling = self.scheduling
        self._stop.set()
        if scheduling is not None:
            scheduling.halt()  # the step under way finishes
        self.store.depose(self.lost or "shut down")
        if self._thread is not None:
            self._thread.join(self.config.renew_deadline)
        if not already:
            self.elector.release()

    def abandon(self) -> None:
        """Stops everything without releasing the Lease: what a crashed replica leaves behind (tests)."""
        with self._lock:
            self.closed = True
            self.store.depose("abandoned")
            scheduling = self.scheduling
        self._stop.set()
        if scheduling is not None:
            scheduling.halt()
