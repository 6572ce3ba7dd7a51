"""The cluster feed's watches, which can start before the scheduler they feed exists.

What a FeedSource holds: one Watcher per collection (list, then watch), the mirror that tells a pod's parse
whether its node changed (intake_flow.parse_early, done on the watch threads), and the inbox the events wait
in until the feed's thread takes them. It applies nothing: the ClusterFeed built around it does, once it is
opened. So its lists can run while the scheduler process is still importing its modules, building itself
and campaigning for the Lease (`EarlyLists`): kube-scheduler likewise starts its informers before leader
election. On this project's 2-core VM a new leader's first lists of 1,000 gangs of 3 took 0.4-0.6 s after
the Lease was won.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from phalanx.cluster.inbox import Inbox
from phalanx.cluster.intake_flow import Early, parse_early
from phalanx.cluster.mirror import Mirror
from phalanx.intake.gang_kinds import CONFIGMAP_KIND, PODGROUP_KINDS
from phalanx.kube import podgroups
from phalanx.kube.watch import Collection, Watcher, object_key

log = logging.getLogger(__name__)

NODES, PODS, CONFIGMAPS = "nodes", "pods", "configmaps"
BUDGETS = "poddisruptionbudgets"  # for preemption's choice of victims (phalanx.scheduling.preemption)

# A watch event: collection, kind (ADDED, MODIFIED, DELETED), the object, and a pod's early parse.
Event = tuple[str, str, dict[str, Any], Early]


def collections(api_client: Any) -> list[Collection]:
    """Every collection the feed watches, listed through `api_client` (a KubeConnection)."""
    from phalanx.kube.api import KubeApi

    api = KubeApi(api_client)  # not the client's generated API classes: see kube/api.py
    out = [
        Collection(NODES, api.list_node, "Node", "v1"),
        Collection(PODS, api.list_pod_for_all_namespaces, "Pod", "v1"),
        Collection(CONFIGMAPS, api.list_config_map_for_all_namespaces, CONFIGMAP_KIND, "v1"),
        Collection(BUDGETS, api.list_pod_disruption_budget_for_all_namespaces, "PodDisruptionBudget", "policy/v1"),
    ]
    for k in PODGROUP_KINDS:  # the gang-declaring kinds' one list (intake/gang_kinds.py)
        out.append(
            Collection(
                f"{podgroups.PLURAL}.{k.group}",
                api.list_cluster_custom_object,
                k.kind,
                k.api_version,
                args=(k.group, k.version, podgroups.PLURAL),
            )
        )
    return out


class FeedSource:
    """The watches of `sources`, parsing the pods of `scheduler_name` as they arrive into one inbox."""

    def __init__(
        self,
        sources: list[Collection],
        scheduler_name: str,
        *,
        watch_timeout: int = 300,
        missing_retry: float = 30.0,
    ) -> None:
        self.name = scheduler_name
        self.mirror = Mirror()
        self.inbox: Inbox[Event] = Inbox()
        self.stop_event = threading.Event()
        self.watchers = [
            Watcher(c, self._sink, self.stop_event, watch_timeout=watch_timeout, missing_retry=missing_retry)
            for c in sources
        ]
        self._started = False
        self._start_lock = threading.Lock()

    def start(self) -> FeedSource:
        """Starts the watches (once; a second call does nothing)."""
        with self._start_lock:
            if not self._started:
                self._started = True
                for w in self.watchers:
                    w.start()
        return self

    def synced(self) -> bool:
        """Every collection's first list is in."""
        return all(w.synced.is_set() for w in self.watchers)

    def stop(self, timeout: float = 5.0) -> None:
        self.stop_event.set()
        for w in self.watchers:
            w.interrupt()
        for w in self.watchers:
            w.join(timeout)

    def _sink(self, collection: str, kind: str, obj: dict[str, Any]) -> None:
        self.inbox.put(self.event(collection, kind, obj))

    def event(self, collection: str, kind: str, obj: dict[str, Any]) -> Event:
        """A watch event as the feed's batch takes it. Pods are parsed here, on their watch thread, not in the
        batch under the scheduler's lock (intake_flow.parse_early)."""
        if collection != PODS:
            return collection, kind, obj, None
        known = self.mirror.pods.get(object_key(obj))  # read without the lock: see parse_early
        return collection, kind, obj, parse_early(kind, obj, self.name, None if known is None else known.node)


class EarlyLists:
    """A FeedSource the service started first thing, for the replica's first feed to take over (`take`).

    A replica that finds another one leading drops it (`drop`): a standby would otherwise keep every event
    of the cluster in its inbox, unapplied, for as long as it waits. It lists again if it takes over later,
    as before. `after_first_lists`: what the feed that takes the source calls once its first lists are
    applied, or `drop` calls (the service paused garbage collection when the lists started, and freezes what
    they made then resumes it: gc_tuning.pause_until_frozen)."""

    def __init__(self, source: FeedSource, after_first_lists: Callable[[], object] | None = None) -> None:
        self._source: FeedSource | None = source
        self._lock = threading.Lock()
        self.after_first_lists = after_first_lists

    @property
    def pending(self) -> FeedSource | None:
        """The source while it is neither taken nor dropped."""
        return self._source

    def take(self) -> FeedSource | None:
        """The source, to the first caller only; None once taken or dropped."""
        with self._lock:
            source, self._source = self._source, None
        return source

    def drop(self, why: str) -> None:
        source = self.take()
        if source is None:
            return
        log.info("cluster feed: the lists started early are dropped (%s); they start again on taking over", why)
        source.stop()
        if self.after_first_lists is not None:
            self.after_first_lists()
