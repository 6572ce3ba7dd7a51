"""The binder's watch-fed view of the cluster, which its checks (kube_guard.py) read:
- nodes: name -> being deleted;
- pods with spec.schedulerName = ours (a field selector): uid, nodeName, being deleted, PodGroups named,
  their owners;
so the bind path makes no API call per pod. A miss (a pod created a moment ago that the watch has not
delivered yet, the cache not synced, a pod of another scheduler) is one GET.

In the combined process (phalanx_combined) the view has no watches of its own: it follows the scheduler's
cluster feed, which watches every pod and node anyway and hands each event here before its own batch takes
it (`follow`, `pod_event`, `node_event`). The same objects were otherwise listed, streamed and decoded twice
in one interpreter, and the binder's list of a gang burst's pods ran while the scheduler built its first
placement.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from phalanx import fast_json
from phalanx.backends.api_calls import json_or_none
from phalanx.backends.base import BindFailure
from phalanx.backends.kube_guard import NodeFacts, PodFacts, verdict
from phalanx.kube.watch import Collection, Watcher
from phalanx.model.binding import Assignment
from phalanx.model.objects import Resources

log = logging.getLogger(__name__)

_PODS, _NODES = "binder-pods", "binder-nodes"
VACATED_KEPT = 10_000  # PodGroups remembered as ours after their last pod of ours was deleted
# How long a report on a PodGroup not in the view waits for the view's watch before the namespace is listed:
# the scheduler's watch saw the pods a moment before this one did. A write lane waits this long only for a
# PodGroup no pod of ours names (a report on a gang whose pods were deleted meanwhile, or a forged one).
OWNER_WAIT_S = 1.0
# How long after the view's watches started a PodGroup report waits for their first lists (a restart's first
# reports come while a large list is still paced, below): its owner and occupiedBy are read from them. Past
# this (an API server that cannot list), the namespace's pods are listed for the owner.
REPORT_SYNC_WAIT_S = 60.0
# A list of our pods longer than this many pages (of VIEW_PAGE) waits, before its next page, for the binder's
# first bind or report, PACE_LIMIT_S at most: at a restart of a large cluster the scheduler lists the same pods for
# its rebuild, which nothing here can help before it is done, and the API server encoded every pod twice at
# once (a whole-stack restart with 30,000 bound pods scheduled 3.5 s sooner without it). A small cluster's
# list is in by the first bind, which then checks from the cache instead of GETting its pods.
PACED_AFTER_PAGES = 10  # 2,000 pods
PACE_LIMIT_S = 30.0
# Objects per page of the view's lists. The view keeps a few fields of each pod, so a decoded page (500 bench
# pods: ~4 MiB with their managedFields), with the next being fetched meanwhile, set the binder's peak memory
# at a launch: pages of 200 took it 7 MiB lower on a 3,000-pod gang burst at the same CPU (bench/issue25-ab.txt,
# section 27). Its long lists are paced (above), off the path to the first binding.
VIEW_PAGE = 200


class ClusterView:
    """The binder's watch-fed view of nodes and of our scheduler's pods, with a GET on a miss."""

    def __init__(
        self,
        core: Any,
        scheduler_name: str,
        *,
        request_timeout: float = 15.0,
        watch_timeout: int = 300,
        page_size: int = VIEW_PAGE,
        paced_after_pages: int = PACED_AFTER_PAGES,
        own_watches: bool = True,
    ) -> None:
        """`own_watches` False: the view starts no watch and is fed by `follow` (the combined process);
        until then every lookup is a miss."""
        self.core = core
        self.scheduler_name = scheduler_name
        self.request_timeout = request_timeout
        self.watch_timeout = watch_timeout
        self._lock = threading.Lock()
        self._pod_seen = threading.Condition(self._lock)  # notified at a pod the watch delivers, if waited for
        self._owner_waits = 0  # owns_podgroup calls waiting on it
        self._pods: dict[str, PodFacts] = {}
        self._nodes: dict[str, NodeFacts] = {}
        self._podgroups: Counter[tuple[str, str, str]] = Counter()  # (group, namespace, name) -> our pods naming it
        # PodGroups whose last pods naming them were ours and are deleted (the most recent VACATED_KEPT): a
        # report that their pods are gone may still be written, so a gang evicted whole is not left Running.
        self._vacated: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._podgroup_owners: dict[tuple[str, str, str], Counter[str]] = {}  # -> owners of those pods
        self._stop = threading.Event()
        self._watchers: list[Watcher] = []
        self.own_watches = own_watches
        self._followed: list[threading.Event] = []  # the followed watches' first lists (see `follow`)
        self.hits = self.misses = 0  # lookups answered by the cache / by a GET (for tests and metrics)
        self._started_at: float | None = None  # time.monotonic() when the watches started
        self.page_size = page_size
        self.paced_after_pages = paced_after_pages
        self._wanted = threading.Event()  # set at the first bind or report: a paced list goes on (see _pace)
        self._wanted_at: float | None = None  # time.monotonic() of that first bind or report

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self, after_sync: Callable[[], object] | None = None, sync_limit: float = 60.0) -> ClusterView:
        """Starts the watches (once; later calls do nothing). `after_sync`: called on a thread of its own once
        both first lists are in, or after `sync_limit` seconds (the binder freezes its heap there)."""
        with self._lock:
            if self._watchers or self._stop.is_set() or not self.own_watches:
                return self
            self._started_at = time.monotonic()
            pods = Collection(
                _PODS,
                self.core.list_pod_for_all_namespaces,
                "Pod",
                "v1",
                kwargs={"field_selector": f"spec.schedulerName={self.scheduler_name}"},
            )
            nodes = Collection(_NODES, self.core.list_node, "Node", "v1")
            self._watchers = [
                Watcher(
                    c,
                    self._sink,
                    self._stop,
                    watch_timeout=self.watch_timeout,
                    request_timeout=self.request_timeout,
                    limit=self.page_size,
                    pace=self._pace if c is pods else None,
                )
                for c in (pods, nodes)
            ]
        for w in self._watchers:
            w.start()
        if after_sync is not None:

            def when_synced() -> None:
                self.wait_synced(sync_limit)
                after_sync()

            threading.Thread(target=when_synced, name="view-synced", daemon=True).start()
        return self

    @property
    def watches(self) -> int:
        """How many watches the view runs itself (0 when it follows another's, or has not started)."""
        return len(self._watchers)

    def follow(self, synced: list[threading.Event]) -> None:
        """Fed from now on by another watch of the same pods and nodes (the scheduler's feed in this process),
        through `pod_event` and `node_event`; `synced`: set once each of its lists is in. Before a call (a
        combined replica on standby, whose feed starts when it leads) the view holds nothing."""
        with self._lock:
            self._followed = list(synced)
            self._started_at = time.monotonic()

    def pod_event(self, kind: str, obj: dict[str, Any]) -> None:
        """A watch event of any pod (the followed watch sees every scheduler's): ours are kept."""
        if kind == "DELETED" or (obj.get("spec") or {}).get("schedulerName") == self.scheduler_name:
            self._sink(_PODS, kind, obj)  # a DELETED with no spec (a re-list's) names what it replaces

    def node_event(self, kind: str, obj: dict[str, Any]) -> None:
        self._sink(_NODES, kind, obj)

    def want(self) -> ClusterView:
        """The binder has work (a bind or a report): started if it was not, and a paced list goes on."""
        if not self._wanted.is_set():
            with self._lock:
                if self._wanted_at is None:
                    self._wanted_at = time.monotonic()
            self._wanted.set()
        return self.start()

    def _pace(self, pages: int) -> None:
        """The pods list read `pages` pages and has more: at `paced_after_pages` and before any work, waits for
        the first bind or report (PACE_LIMIT_S at most, or until the view stops)."""
        if pages != self.paced_after_pages or self._wanted.is_set():
            return
        log.info(
            "binder's view: more than %d of our pods; the rest are listed with the first bind or report (in %gs"
            " at most)",
            pages * self.page_size,
            PACE_LIMIT_S,
        )
        deadline = time.monotonic() + PACE_LIMIT_S
        while not self._wanted.wait(0.2) and not self._stop.is_set() and time.monotonic() < deadline:
            pass

    def wait_synced(self, timeout: float | None = None) -> bool:
        events = self._followed or [w.synced for w in self._watchers]
        return all(e.wait(timeout) for e in events) and bool(events)

    def wait_first_lists(self, limit: float) -> bool:
        """Waits for the first lists until `limit` seconds after the watches started or, later, the first bind or
        report let a paced list go on, at most: a view that cannot list (the API server refusing, say) holds
        each caller back only until then, not each for `limit` again. Whether they are in."""
        with self._lock:
            since = max((t for t in (self._started_at, self._wanted_at) if t is not None), default=None)
        if since is None:
            return False
        return self.wait_synced(max(0.0, since + limit - time.monotonic()))

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for w in self._watchers:
            w.interrupt()
        for w in self._watchers:
            w.join(timeout)

    def _sink(self, collection: str, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        with self._lock:
            if collection == _NODES:
                if kind == "DELETED":
                    self._nodes.pop(name, None)
                else:
                    self._nodes[name] = NodeFacts.of(obj)
                return
            namespace = str(meta.get("namespace") or "")
            key = f"{namespace}/{name}"
            # A re-list's DELETED carries only the name: what it named comes from the entry it replaces.
            before = self._pods.pop(key, None)
            for group, pg in before.podgroups if before is not None else ():
                ref = (group, namespace, pg)
                self._podgroups[ref] -= 1
                if self._podgroups[ref] <= 0:
                    del self._podgroups[ref]
                    self._vacated[ref] = None
                    if len(self._vacated) > VACATED_KEPT:
                        self._vacated.popitem(last=False)
                owners = self._podgroup_owners.get(ref)
                if owners is not None and before is not None:
                    owners.subtract(before.owners)
                    if not +owners:
                        del self._podgroup_owners[ref]
            if kind != "DELETED":
                facts = PodFacts.of(obj)
                self._pods[key] = facts
                self._podgroups.update((g, namespace, n) for g, n in facts.podgroups)
                for g, n in facts.podgroups:
                    self._vacated.pop((g, namespace, n), None)
                for g, n in facts.podgroups if facts.owners else ():
                    self._podgroup_owners.setdefault((g, namespace, n), Counter()).update(facts.owners)
            if self._owner_waits:
                self._pod_seen.notify_all()

    # -- bind checks -------------------------------------------------------------------------------------
    def check(
        self, assignments: list[Assignment], fetch: Callable[[Callable[[str], Any], Iterable[str]], Iterator[Any]] = map
    ) -> dict[str, BindFailure]:
        """Failures by pod key for the assignments that may not be bound. `fetch` maps the GETs of cache
        misses (a thread pool's map makes them concurrent)."""
        pods: dict[str, PodFacts | None | Exception] = {}
        missing: list[str] = []
        with self._lock:
            for a in assignments:
                facts = self._pods.get(a.pod_key)
                if facts is not None and (not a.uid or facts.uid == a.uid):
                    pods[a.pod_key] = facts
                else:  # not seen yet, another scheduler's, or the cache lags a recreation: ask
                    missing.append(a.pod_key)
            self.hits += len(assignments) - len(missing)
            self.misses += len(missing)
        pods.update(zip(missing, fetch(self._fetch_pod, missing)))
        wanted = {a.node for a in assignments if isinstance(pods[a.pod_key], PodFacts)}
        nodes: dict[str, NodeFacts | None | Exception] = {}
        with self._lock:
            for n in wanted:
                if n in self._nodes:
                    nodes[n] = self._nodes[n]
        absent = sorted(wanted - nodes.keys())
        nodes.update(zip(absent, fetch(self._fetch_node, absent)))
        out: dict[str, BindFailure] = {}
        for a in assignments:
            failure = verdict(a, pods[a.pod_key], nodes.get(a.node), self.scheduler_name)
            if failure is not None:
                out[a.pod_key] = failure
        return out

    # -- report checks -----------------------------------------------------------------------------------
    def pod(self, pod_key: str) -> PodFacts | None:
        """The pod's facts, from the cache or one GET; None when it does not exist. Raises on API errors."""
        with self._lock:
            facts = self._pods.get(pod_key)
        if facts is not None:
            return facts
        return self._get_pod(pod_key)

    def spec_requests(self, pod_key: str) -> Resources | str | None:
        """What the pod's spec asks, from the cache or one GET; None when the pod does not exist."""
        facts = self.pod(pod_key)
        return None if facts is None else facts.requests

    def cached(self, pod_key: str) -> bool:
        """Whether the watch has delivered the pod (as one of our scheduler's)."""
        with self._lock:
            return pod_key in self._pods

    def ours(self, pod: PodFacts | Mapping[str, Any]) -> bool:
        scheduler = pod.scheduler if isinstance(pod, PodFacts) else ((pod.get("spec") or {}).get("schedulerName"))
        return scheduler == self.scheduler_name

    def occupied_by(self, group: str, namespace: str, name: str) -> str:
        """The workloads whose pods form the PodGroup, as scheduler-plugins' controller writes its
        `occupiedBy`: "namespace/owner", sorted, comma-separated; "" when its pods have no owner."""
        with self._lock:
            owners = +self._podgroup_owners.get((group, namespace, name), Counter())
        return ",".join(sorted(f"{namespace}/{o}" for o in owners))

    def vacated(self, group: str, namespace: str, name: str) -> bool:
        """Whether the last pods that named the PodGroup were ours, all deleted since (and none named it
        again): no pod makes it ours, yet its status must still say that its pods are gone."""
        with self._lock:
            return (group, namespace, name) in self._vacated

    def owns_podgroup(self, group: str, namespace: str, name: str) -> bool:
        """A PodGroup is Phalanx's when at least one pod naming our scheduler names it."""
        ref, deadline = (group, namespace, name), time.monotonic() + OWNER_WAIT_S
        with self._lock:
            # The scheduler reports a gang once its own watch has the gang's pods; this view's watch of the
            # same pods may be a moment behind. Waiting for it costs nothing; listing the namespace's pods
            # instead cost the binder and the API server a list of every pod there, once every few dozen
            # gangs under steady arrival (bench/issue25-ab.txt, section 12).
            while self._podgroups.get(ref, 0) <= 0:
                left = deadline - time.monotonic()
                if left <= 0 or not self.wait_synced(0):
                    break
                self._owner_waits += 1
                try:
                    self._pod_seen.wait(left)
                finally:
                    self._owner_waits -= 1
            else:
                return True
        # Not in the cache (not synced yet, or its pods still not seen): list our pods of its namespace.
        resp = self.core.list_namespaced_pod(
            namespace,
            field_selector=f"spec.schedulerName={self.scheduler_name}",
            _preload_content=False,
            _request_timeout=self.request_timeout,
        )
        items = fast_json.loads(resp.data).get("items") or []
        return any((group, name) in PodFacts.of(item).podgroups for item in items)

    # -- API calls ---------------------------------------------------------------------------------------
    def _get_pod(self, pod_key: str) -> PodFacts | None:
        namespace, name = pod_key.split("/", 1)
        obj = json_or_none(
            lambda: self.core.read_namespaced_pod(
                name, namespace, _preload_content=False, _request_timeout=self.request_timeout
            )
        )
        return PodFacts.of(obj) if obj is not None else None

    def _fetch_pod(self, pod_key: str) -> PodFacts | None | Exception:
        try:
            return self._get_pod(pod_key)
        except Exception as exc:  # judged by verdict(): retryable when transient
            return exc

    def _fetch_node(self, name: str) -> NodeFacts | None | Exception:
        try:
            obj = json_or_none(
                lambda: self.core.read_node(name, _preload_content=False, _request_timeout=self.request_timeout)
            )
        except Exception as exc:
            return exc
        return NodeFacts.of(obj) if obj is not None else None
