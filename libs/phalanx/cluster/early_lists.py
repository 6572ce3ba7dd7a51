"""The cluster's first lists, asked of the API server as the scheduler starts rather than once it leads.

A replica used to list nodes, pods and gang objects only once it had won the Lease, claimed its fencing term
and started its feed: on the 3,000-pod gang burst (bench-startup's phases) the lists came in 0.2-0.4 s after
the Lease was won, while the API server, which does most of that work, had had nothing to do since the launch.
kube-scheduler starts its informers before its leader election for the same reason. Here `main` starts the
lists as soon as its flags are read, before the replica builds itself, waits for the queue and the binder and
campaigns; the feed of its first takeover adopts them (`ClusterFeed(early=...)`): every event they delivered
meanwhile is handed over in the order it came, and the watches go on feeding that feed as if it had started
them. (Started before the scheduler's own imports instead, the lists' decoding competed with them for the
interpreter and the replica served 0.3-0.4 s later: no gain; bench/issue25-ab.txt, section 28.)

Only what a gated feed would have held is held: parsed as the feed parses on its watch threads (its mirror is
empty until the first apply, so nothing differs), nothing applied to the scheduler, nothing written anywhere.
A replica that is not about to lead drops them: its campaign found the Lease held by another (a standby keeps
no copy of the cluster; its takeover lists afresh, as before), or no feed adopted them within `keep_s`. A
process that dies with the lists held loses only reads: nothing crosses to Redis, the queue or the API server
before the adopting feed applies, after recovery, as before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from phalanx.cluster.watched import Event, collections, feed_event
from phalanx.kube.watch import Collection, Sink, Watcher

log = logging.getLogger(__name__)

# How long held lists wait for a feed to adopt them. A replica that leads adopts them once the queue and the
# binder serve and its term is claimed (a second or two at a launch); past this something else holds it back
# (a dependency not serving), and whatever the lists hold is better listed again then.
KEEP_S = 30.0


@dataclass(frozen=True)
class Adopted:
    """What a feed takes over: the running watches and the event that stops them."""

    watchers: list[Watcher]
    stop: threading.Event


class EarlyLists:
    """Watches of `sources` started before the feed that will apply them exists; see the module docstring."""

    def __init__(self, sources: list[Collection], scheduler_name: str, *, keep_s: float = KEEP_S) -> None:
        self.scheduler_name = scheduler_name
        self.keep_s = keep_s
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._held: list[Event] = []
        self._sink: Sink | None = None  # the adopting feed's, once adopted
        self.dropped = ""  # why the lists were dropped ("" while held or adopted)
        self.watchers = [Watcher(c, self._deliver, self.stop) for c in sources]
        self._timer: threading.Timer | None = None

    def start(self) -> EarlyLists:
        for w in self.watchers:
            w.start()
        self._timer = threading.Timer(self.keep_s, self.drop, (f"no feed adopted them within {self.keep_s:g}s",))
        self._timer.daemon = True
        self._timer.name = "early-lists-limit"
        self._timer.start()
        return self

    def held(self) -> int:
        with self._lock:
            return len(self._held)

    @property
    def adopted(self) -> bool:
        return self._sink is not None

    def _deliver(self, collection: str, kind: str, obj: dict[str, Any]) -> None:
        sink = self._sink
        if sink is None:
            # Parsed off the lock, on this watch thread, as the feed's own sink would have.
            event = feed_event(collection, kind, obj, self.scheduler_name, None)
            with self._lock:
                sink = self._sink
                if sink is None:
                    if not self.dropped:
                        self._held.append(event)
                    return
        sink(collection, kind, obj)  # adopted meanwhile: the feed parses against its own mirror

    def adopt(self, put: Callable[[Event], object], sink: Sink) -> Adopted | None:
        """Hands what was held to `put`, in order, and what comes next to `sink`; None if already dropped (the
        caller then starts watches of its own)."""
        with self._lock:
            if self.dropped or self._sink is not None:
                return None
            held, self._held = self._held, []
            for event in held:
                put(event)
            self._sink = sink
        if self._timer is not None:
            self._timer.cancel()
        log.info("cluster feed: adopted the lists started at launch (%d events held)", len(held))
        return Adopted(self.watchers, self.stop)

    def drop(self, reason: str) -> None:
        """Stops the watches and forgets what they held, unless a feed adopted them."""
        with self._lock:
            if self._sink is not None or self.dropped:
                return
            self.dropped = reason
            held, self._held = len(self._held), []
        if self._timer is not None:
            self._timer.cancel()
        self.stop.set()
        for w in self.watchers:
            w.interrupt()
        log.info("cluster feed: dropped the lists started at launch (%d events held): %s", held, reason)


def start_early_lists(args: Any) -> EarlyLists | None:
    """The scheduler's lists, started from its parsed flags (`backend`, `clock`, `kubeconfig`, `scheduler_name`):
    in Kubernetes mode on the wall clock, where a cluster feed will adopt them; None otherwise."""
    if args.backend != "kubernetes" or args.clock != "real":
        return None
    from phalanx.kube.connection import connection_of

    return EarlyLists(collections(connection_of(args)), args.scheduler_name).start()
