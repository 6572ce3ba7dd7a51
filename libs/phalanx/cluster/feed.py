"""The cluster feed: Kubernetes objects in, scheduler and queue calls out. Runs inside the scheduler process.

It watches (phalanx.kube.watch) Nodes, all Pods, the PodGroups of every API group Phalanx reads, and
ConfigMaps, and applies what changed in batches under the scheduler's lock, through the scheduler's one set
of cluster-event handlers (phalanx.scheduling.events) and the gang intake it shares with the simulator
(gang_intake.py):

- Nodes: upsert_nodes when a node's scheduling-relevant content changed; remove_nodes on deletion, whose
  reserved (not yet bound) pods go back to the queue.
- PodGroups and gang ConfigMaps: into the GangResolver; pods that waited for one are resolved again, and a
  changed spec of a gang already in use is sent with upsert_gangs.
- Pods: every pod bound to a node holds capacity, whichever scheduler bound it (add_bound_pods, skipped
  for the pods Phalanx already accounts for); finished (Succeeded/Failed) or deleted pods give it back
  (release_pods). Phalanx's unbound pods (spec.schedulerName) are resolved to their gang and handed to the
  queue; a pod whose declaration is refused is not scheduled and gets PodScheduled=False with the
  refusal's text, through the binder's report path.

Why all pods rather than a field selector: capacity needs other schedulers' bound pods, and the PodGroup
counters (running/succeeded/failed) need the phases of finished pods, which a phase selector would hide.
kube-scheduler keeps the same set in its cache.

The first batch (everything the initial lists returned) is the rebuild: whatever Redis lacks (a lost or
stale Redis) is recovered from the API server, and reservations of pods that no longer exist are released,
so a lost Redis costs time, not correctness. Pods annotated as timed out (Koordinator's forms, whose timeouts
are final) are never queued again, so the timeout survives a lost Redis too; a retrying form's gang keeps
its pods in the queue through its backoff (phalanx.scheduling.timeouts).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from phalanx.cluster.gang_intake import GangIntake
from phalanx.cluster.reconcile import Maintenance
from phalanx.intake.budgets import parse_budget
from phalanx.intake.errors import IntakeError
from phalanx.intake.gangs import timeout_mark_holds
from phalanx.intake.nodes import parse_node
from phalanx.intake.pods import parse_pod, scheduler_name
from phalanx.kube import podgroups
from phalanx.kube.watch import Collection, Watcher, object_key
from phalanx.model.binding import GangReport, PodReport
from phalanx.model.keys import KOORD_TIMEOUT
from phalanx.model.objects import GangSpec, NodeInfo, PodInfo
from phalanx.model.policies import with_gang_queue
from phalanx.model.status import EventReason, GangPhase
from phalanx.queueing.hints import FreedCapacity
from phalanx.scheduling.events import API_SERVER, ClusterChange, ClusterEvents
from phalanx.scheduling.hints import refresh_freed
from phalanx.scheduling.ports import Verdict
from phalanx.scheduling.scheduler import GangScheduler
from phalanx.state.store import FencedOut

log = logging.getLogger(__name__)

TERMINAL = ("Succeeded", "Failed")
_PHALANX_WRITTEN = (KOORD_TIMEOUT,)  # annotations Phalanx itself writes: not a change by the user
_NODES, _PODS, _CONFIGMAPS = "nodes", "pods", "configmaps"
_BUDGETS = "poddisruptionbudgets"  # for preemption's choice of victims (phalanx.scheduling.preemption)


class FeedQueue(Protocol):
    """The queue client; one that also has `on_restart(listener)` gets its pods re-added after a queue restart."""

    def add(self, pods: list[PodInfo], now: float, only_missing: bool = False) -> Any: ...

    def remove(self, keys: list[str]) -> None: ...

    def done(self, verdicts: list[Verdict], activate: list[str], failed: list[str], now: float) -> None: ...

    def move_all(self, event: str, now: float, freed: FreedCapacity | None = None) -> None: ...


class Reporter(Protocol):
    def report(self, pods: list[PodReport], gangs: list[GangReport], now: float) -> None: ...


@dataclass
class _Pod:
    """What the feed remembers of one pod between events."""

    uid: str
    ours: bool
    node: str = ""
    phase: str = ""
    gang: str = ""
    queued: bool = False  # handed to the queue and not taken back
    fingerprint: tuple[Any, ...] | None = None  # of what scheduling reads: a change means "queue it again"
    info: PodInfo | None = None  # parsed, for resolving it again when its gang object changes
    queued_as: PodInfo | None = None  # as last handed to the queue (resolved to its gang): what is placed


class _Counts(NamedTuple):
    """What the feed last reported of a PodGroup: its counters, and the phase its pods imply."""

    scheduled: int
    running: int
    succeeded: int
    failed: int
    phase: str


# A gang never reported: a new gang of pending pods is Pending without being told so (the scheduler reports
# its progress from there), so the first report goes out when a pod is placed, runs or ends.
_UNREPORTED = _Counts(0, 0, 0, 0, GangPhase.PENDING)


@dataclass
class _QueueOps:
    """Queue calls not yet delivered."""

    add: dict[str, PodInfo] = field(default_factory=dict)
    remove: set[str] = field(default_factory=set)
    verdicts: list[Verdict] = field(default_factory=list)
    activate: set[str] = field(default_factory=set)  # gangs declared or changed: their pods get another try
    move_all: bool = False  # nodes added or changed: every unschedulable pod gets another try
    freed: FreedCapacity = field(default_factory=FreedCapacity)  # capacity freed: the pods it may help do

    def pending(self) -> bool:
        return bool(self.add or self.remove or self.verdicts or self.activate or self.move_all or self.freed)


@dataclass
class _Batch:
    """What one batch of events asks of the scheduler, the queue and the binder's report path."""

    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    nodes_removed: set[str] = field(default_factory=set)
    gangs: dict[str, GangSpec] = field(default_factory=dict)
    changed_gangs: set[str] = field(default_factory=set)  # gang keys whose PodGroup/ConfigMap changed
    released: set[str] = field(default_factory=set)
    succeeded: set[str] = field(default_factory=set)  # of `released`: finished their work (see _succeeded)
    bound: dict[str, PodInfo] = field(default_factory=dict)
    queue_add: dict[str, PodInfo] = field(default_factory=dict)
    queue_remove: set[str] = field(default_factory=set)
    reports: dict[str, str] = field(default_factory=dict)  # pod key -> why it is not scheduled
    counted: set[str] = field(default_factory=set)  # gangs whose pods changed (for PodGroup counters)
    unreferenced: set[str] = field(default_factory=set)  # gangs that lost their last pod or their object
    deleted: set[str] = field(default_factory=set)  # pods deleted


def collections(api_client: Any) -> list[Collection]:
    from phalanx.kube.api import KubeApi

    api = KubeApi(api_client)  # not the client's generated API classes: see kube/api.py
    out = [
        Collection(_NODES, api.list_node, "Node", "v1"),
        Collection(_PODS, api.list_pod_for_all_namespaces, "Pod", "v1"),
        Collection(_CONFIGMAPS, api.list_config_map_for_all_namespaces, "ConfigMap", "v1"),
        Collection(_BUDGETS, api.list_pod_disruption_budget_for_all_namespaces, "PodDisruptionBudget", "policy/v1"),
    ]
    for group, version in podgroups.WATCHED_VERSIONS.items():
        out.append(
            Collection(
                f"{podgroups.PLURAL}.{group}",
                api.list_cluster_custom_object,
                "PodGroup",
                f"{group}/{version}",
                args=(group, version, podgroups.PLURAL),
            )
        )
    return out


class ClusterFeed:
    def __init__(
        self,
        scheduler: GangScheduler,
        lock: threading.Lock,
        queue_client: FeedQueue,
        reporter: Reporter,
        sources: list[Collection],
        *,
        scheduler_name: str,
        now: Callable[[], float] = time.time,
        watch_timeout: int = 300,
        missing_retry: float = 30.0,
        reconcile_interval: float = 10.0,
    ) -> None:
        self.scheduler = scheduler
        self.lock = lock
        self.queue = queue_client
        self.reporter = reporter
        self.name = scheduler_name
        self.now = now
        self.events = ClusterEvents(scheduler, API_SERVER)
        self.intake = GangIntake(retry_refused=True)
        self.stop_event = threading.Event()
        self.synced = threading.Event()  # set once the rebuild (the first batch) has been applied
        self._events: queue.Queue[tuple[str, str, dict[str, Any]]] = queue.Queue()
        self._watchers = [
            Watcher(c, self._sink, self.stop_event, watch_timeout=watch_timeout, missing_retry=missing_retry)
            for c in sources
        ]
        self._nodes: dict[str, NodeInfo] = {}
        self._pods: dict[str, _Pod] = {}
        self.specs_unsure = False  # set when a batch failed to apply; reconciliation re-sends every spec
        self._reported: dict[str, str] = {}  # pod key -> last message sent
        self._counts: dict[str, _Counts] = {}  # gang -> the PodGroup counters and phase last reported
        self._members: dict[str, set[str]] = {}  # gang key -> our pods resolved to it (for the counters)
        self._queue_ops = _QueueOps()
        self._queue_restarted = threading.Event()
        self._thread: threading.Thread | None = None
        self.maintenance = Maintenance(self, reconcile_interval=reconcile_interval)

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> ClusterFeed:
        on_restart = getattr(self.queue, "on_restart", None)
        if on_restart is not None:  # the queue keeps its contents in memory: a restart empties it
            on_restart(self._queue_restarted.set)
        for w in self._watchers:
            w.start()
        self._thread = threading.Thread(target=self._run, name="cluster-feed", daemon=True)
        self._thread.start()
        return self

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self.synced.wait(timeout)

    def not_synced(self) -> str:
        """Readiness: "" once the rebuild has been applied."""
        return "" if self.synced.is_set() else "not synced yet"

    def stop(self, timeout: float = 5.0) -> None:
        self.stop_event.set()
        for w in self._watchers:
            w.interrupt()
        if self._thread is not None:
            self._thread.join(timeout)
        for w in self._watchers:
            w.join(timeout)

    def _sink(self, collection: str, kind: str, obj: dict[str, Any]) -> None:
        self._events.put((collection, kind, obj))

    def _run(self) -> None:
        while not self.stop_event.is_set() and not all(w.synced.is_set() for w in self._watchers):
            self.stop_event.wait(0.02)
        watched = [w.collection.name for w in self._watchers if w.served]
        missing = [w.collection.name for w in self._watchers if w.served is False]
        log.info(
            "cluster feed: watching %s%s",
            ", ".join(watched),
            # a CRD not installed, or an alpha API not enabled (scheduling.k8s.io): the common case
            f"; not served (looked for again every {self._watchers[0].missing_retry:g}s): {', '.join(missing)}"
            if missing
            else "",
        )
        first = True
        while not self.stop_event.is_set():
            if self._queue_restarted.is_set():
                self._queue_restarted.clear()
                self._requeue_all()
            if not first:
                self._maintain()
            batch = self._drain(block=not first)
            if not batch and not first:
                if self._queue_ops.pending():
                    with self.lock:
                        self._flush_queue(self.now())
                    self.stop_event.wait(1.0)
                continue
            try:
                self._apply(batch, initial=first)
            except FencedOut as exc:  # another replica leads: this one is stepping down, nothing to retry
                log.error("cluster feed: %s; stopping", exc)
                return
            except Exception:
                # The mirror already holds these events; what failed is applying them (Redis down, say).
                # Nothing is dropped: a full reconciliation from the mirror retries until it succeeds.
                log.exception(
                    "cluster feed: applying %d events failed; reconciling from the API server's view", len(batch)
                )
                # Specs of this batch count as sent but may not be in Redis: reconciliation sends them all.
                self.specs_unsure = True
                self.maintenance.request_reconcile()
            if first:
                first = False
                self.synced.set()
                log.info(
                    "cluster feed: rebuilt from the API server (%d nodes, %d pods)", len(self._nodes), len(self._pods)
                )

    def _drain(self, block: bool) -> list[tuple[str, str, dict[str, Any]]]:
        out = []
        if block:
            try:
                out.append(self._events.get(timeout=0.2))
            except queue.Empty:
                return out
        while True:
            try:
                out.append(self._events.get_nowait())
            except queue.Empty:
                return out

    # -- one batch ---------------------------------------------------------------------------------------
    def _apply(self, events: list[tuple[str, str, dict[str, Any]]], initial: bool) -> None:
        # Nodes first (bound pods need their node), then gang objects (pods resolve against them).
        rank = {_NODES: 0, _PODS: 2}
        b = _Batch()
        with self.lock:
            for collection, kind, obj in sorted(events, key=lambda e: rank.get(e[0], 1)):
                try:
                    if collection == _NODES:
                        self._on_node(kind, obj, b)
                    elif collection == _PODS:
                        self._on_pod(kind, obj, b)
                    elif collection == _BUDGETS:
                        self._on_budget(kind, obj)
                    else:
                        self._on_gang_object(collection, kind, obj, b)
                except Exception:
                    log.exception("cluster feed: %s %s %s could not be handled", kind, collection, object_key(obj))
            self._reresolve(b)
            self._commit(b, initial)
            gang_reports = self._gang_counts(b.counted)
        self._send_reports(b.reports, gang_reports)

    def _on_budget(self, kind: str, obj: Mapping[str, Any]) -> None:
        """A PodDisruptionBudget: preemption keeps within it. One that cannot be read is left out of the plans
        (logged, naming the field); the Eviction API still enforces it, and a refusal drops the plan."""
        key = object_key(obj)
        if kind == "DELETED":
            self.scheduler.preemption.set_budgets([], [key])
            return
        try:
            budget = parse_budget(obj)
        except IntakeError as exc:
            log.warning("cluster feed: %s; preemption does not count on it", exc)
            self.scheduler.preemption.set_budgets([], [key])
            return
        self.scheduler.preemption.set_budgets([budget], [])

    def _on_node(self, kind: str, obj: Mapping[str, Any], b: _Batch) -> None:
        name = object_key(obj)
        if kind == "DELETED":
            self._nodes.pop(name, None)
            b.nodes.pop(name, None)
            b.nodes_removed.add(name)
            return
        try:
            node = parse_node(obj)
        except IntakeError as exc:
            log.warning("cluster feed: %s; the node is not used", exc)
            return
        if self._nodes.get(name) == node:
            return  # status heartbeats and the like: nothing scheduling reads
        self._nodes[name] = node
        b.nodes[name] = node
        b.nodes_removed.discard(name)

    def _on_gang_object(self, collection: str, kind: str, obj: Mapping[str, Any], b: _Batch) -> None:
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace") or "", meta.get("name") or ""
        if collection == _CONFIGMAPS:
            ref_kind = "ConfigMap"
            if kind != "DELETED" and not GangIntake.is_gang_object(obj):
                kind = "DELETED"  # an ordinary ConfigMap, or one that stopped declaring a gang
        else:
            ref_kind = f"PodGroup.{collection.partition('.')[2]}"
        if kind == "DELETED":
            key = self.intake.remove_object(ref_kind, namespace, name)
            if key:
                b.unreferenced.add(key)
        else:
            try:
                key = self.intake.add_object(obj, created_at=_created(obj))
            except IntakeError as exc:  # recorded as invalid: its pods are refused with this text
                log.warning("cluster feed: %s", exc)
                key = f"{namespace}/{name}"
        if key:
            b.changed_gangs.add(key)

    def _on_pod(self, kind: str, obj: Mapping[str, Any], b: _Batch) -> None:
        key = object_key(obj)
        prev = self._pods.get(key)
        if kind == "DELETED":
            self._forget(key, prev, b)
            return
        meta, spec, status = (obj.get(k) or {} for k in ("metadata", "spec", "status"))
        uid = meta.get("uid") or ""
        if prev is not None and prev.uid and uid and prev.uid != uid:
            self._forget(key, prev, b)  # deleted and recreated under the same name between two events
            prev = None
        state = prev or _Pod(uid, scheduler_name(obj) == self.name)
        self._pods[key] = state
        phase, node = status.get("phase") or "", spec.get("nodeName") or ""
        was_finished, state.phase = state.phase in TERMINAL, phase
        if state.ours and state.gang:
            b.counted.add(state.gang)
        if phase in TERMINAL:
            if not was_finished:  # the kubelet stopped it: its resources are free
                b.released.add(key)
                if _succeeded(phase, meta, status):
                    b.succeeded.add(key)
                b.bound.pop(key, None)
                if state.ours and not state.gang:  # first seen finished (a restart): count it in its gang
                    try:
                        self._join_gang(key, parse_pod(obj), state, b)
                    except IntakeError:
                        pass
            self._take_back(key, state, b)
            return
        if node:
            if state.node != node:
                state.node = node
                self._on_bound(key, obj, state, b)
            self._take_back(key, state, b)
            return
        if state.ours:
            self._on_pending(key, obj, meta, state, b)

    def _on_bound(self, key: str, obj: Mapping[str, Any], state: _Pod, b: _Batch) -> None:
        try:
            pod = parse_pod(obj)
        except IntakeError as exc:
            log.warning("cluster feed: %s; its resources are not counted", exc)
            return
        if state.ours:
            self._join_gang(key, pod, state, b)
        state.info = pod  # what it holds: reconciliation re-counts it if Redis lost it
        b.bound[key] = pod

    def _join_gang(self, key: str, pod: PodInfo, state: _Pod, b: _Batch) -> None:
        """Records which gang a pod that is past scheduling (bound or finished) belongs to."""
        res = self.intake.resolve(key, pod, parked_under=state.gang, park=False)  # past scheduling: never waits
        pod.gang = res.gang_key if not res.error else ""
        self._set_gang(key, state, pod.gang, b)
        if res.spec is not None:  # a rebuild after a lost Redis: the scheduler learns the gang too
            with_gang_queue(pod, res.spec.queue)  # what it holds counts against its gang's queue (DRF)
            self._send_spec(res.spec, b)

    def _on_pending(self, key: str, obj: Mapping[str, Any], meta: Mapping[str, Any], state: _Pod, b: _Batch) -> None:
        annotations = meta.get("annotations") or {}
        if meta.get("deletionTimestamp") or (annotations.get(KOORD_TIMEOUT) == "true" and _timed_out_for_good(obj)):
            # Being deleted, or its gang timed out for good: not scheduled again (until the user recreates it).
            self._take_back(key, state, b)
            return
        try:
            pod = parse_pod(obj)
        except IntakeError as exc:
            self._refuse(key, str(exc), state, b)
            state.fingerprint = None
            return
        fingerprint = _fingerprint(pod)
        if state.queued and state.fingerprint == fingerprint:
            return  # our own writes (condition, annotations) or a change scheduling does not read
        state.fingerprint, state.info = fingerprint, pod
        self._resolve(key, replace(pod), state, b)

    def _resolve(self, key: str, pod: PodInfo, state: _Pod, b: _Batch) -> None:
        # Parked when it waits, or is refused, for its gang: a new or corrected PodGroup/ConfigMap resolves it again.
        res = self.intake.resolve(key, pod, parked_under=state.gang)
        self._set_gang(key, state, res.gang_key, b)
        if res.error or res.waiting_for:
            why = res.error or f"gang {res.gang_key}: {res.waiting_for}; the pod waits for it"
            self._refuse(key, why, state, b)
            return
        pod.gang = res.gang_key
        if res.spec is not None:
            pod.gang_created_at = res.spec.created_at
            with_gang_queue(pod, res.spec.queue)
            self._send_spec(res.spec, b)
        b.queue_add[key] = pod
        b.queue_remove.discard(key)
        state.queued, state.queued_as = True, pod

    def _reresolve(self, b: _Batch) -> None:
        for gang in sorted(b.changed_gangs):
            spec = self.intake.gang(gang)
            if spec is not None and self.intake.was_sent(gang):
                self._send_spec(spec, b)  # a gang in use changed (or became invalid)
            for key in sorted(self.intake.parked(gang)):
                state = self._pods.get(key)
                if state is not None and state.info is not None and not state.node:
                    self._resolve(key, replace(state.info), state, b)

    def _send_spec(self, spec: GangSpec, b: _Batch) -> None:
        if self.intake.note_sent(spec):
            b.gangs[spec.key] = spec

    def _refuse(self, key: str, message: str, state: _Pod, b: _Batch) -> None:
        self._take_back(key, state, b)
        b.reports[key] = message

    def _take_back(self, key: str, state: _Pod, b: _Batch) -> None:
        b.queue_add.pop(key, None)
        if state.queued:
            b.queue_remove.add(key)
            state.queued = False

    def _forget(self, key: str, prev: _Pod | None, b: _Batch) -> None:
        b.released.add(key)
        b.deleted.add(key)
        b.bound.pop(key, None)
        b.queue_add.pop(key, None)
        b.reports.pop(key, None)
        self._reported.pop(key, None)
        if prev is None:
            return
        if prev.queued:
            b.queue_remove.add(key)
        self.intake.unpark(key, prev.gang)
        self._set_gang(key, prev, "", b)
        self._pods.pop(key, None)

    def _set_gang(self, key: str, state: _Pod, gang: str, b: _Batch) -> None:
        for g in {state.gang, gang} - {""}:
            b.counted.add(g)
        if state.gang and state.gang != gang:
            members = self._members.get(state.gang, set())
            members.discard(key)
            if not members:
                self._members.pop(state.gang, None)
                b.unreferenced.add(state.gang)
        if gang:
            self._members.setdefault(gang, set()).add(key)
        state.gang = gang

    def _maintain(self) -> None:
        try:
            self.maintenance.tick()
        except Exception as exc:  # Redis or the queue is down: the next tick tries again
            log.warning("cluster feed: maintenance failed (%s); retrying", exc)

    # -- what reconciliation reads and repairs (see reconcile.py) --------------------------------------------
    def mirror_nodes(self) -> dict[str, NodeInfo]:
        return dict(self._nodes)

    def mirror_bound(self) -> dict[str, PodInfo]:
        """Every pod the API server shows bound and not finished, whichever scheduler bound it."""
        return {
            k: replace(p.info, node_name=p.node)
            for k, p in self._pods.items()
            if p.node and p.phase not in TERMINAL and p.info is not None
        }

    # -- the API server's copy of what is placed (phalanx.scheduling.pod_source) ---------------------------
    def schedulable_pod(self, key: str) -> PodInfo | None:
        """The pending pod of ours this feed handed to the queue, as the API server has it; None when there
        is none (deleted, bound, finished, refused by intake, or never seen). Caller holds the lock."""
        state = self._pods.get(key)
        if state is None or not state.queued or state.node or state.phase in TERMINAL or state.queued_as is None:
            return None
        return replace(state.queued_as)  # the scheduler's copy: nothing it does can alter the feed's record

    def ready(self) -> bool:
        return self.synced.is_set()

    def mirror_has(self, key: str) -> bool:
        p = self._pods.get(key)
        return p is not None and p.phase not in TERMINAL

    def retry_unschedulable(self) -> None:
        """Reconciliation repaired what scheduling reads (nodes, usage, reservations, memory) without a watch
        event: every unschedulable pod is given another try, as a node event gives it. A pod judged while the
        repair was pending (no nodes known, Redis down mid-rebuild) would otherwise wait for an unrelated
        event or the queue's flush interval. Caller holds the lock."""
        self._queue_ops.move_all = True
        self._flush_queue(self.now())

    def resend_gangs(self) -> None:
        """After Redis was emptied: the scheduler learns every gang in use again."""
        self.intake.forget_sent()
        b = _Batch()
        for gang in sorted(self._members):
            spec = self.intake.gang(gang)
            if spec is not None:
                self._send_spec(spec, b)
        if b.gangs:
            self.scheduler.upsert_gangs(list(b.gangs.values()))

    def requeue_missing(self) -> int:
        """Hands the queue, again, every pending pod of ours that the scheduler does not hold; pods the
        queue still holds stay where they are. Caller holds the lock."""
        b = self._resolve_unheld()
        if b.gangs:
            self.scheduler.upsert_gangs(list(b.gangs.values()))
        pods = list(b.queue_add.values())
        if pods:
            self.queue.add(pods, self.now(), only_missing=True)
        return len(pods)

    def _resolve_unheld(self) -> _Batch:
        """A batch with every pending pod of ours the scheduler does not hold (reserved pods wait for their
        gang in Redis, not in the queue), resolved to its gang as when it was first handed over."""
        b = _Batch()
        held = set(self.scheduler.assumed) | self.scheduler.bound
        for key, state in sorted(self._pods.items()):
            if state.queued and state.info is not None and not state.node and key not in held:
                self._resolve(key, replace(state.info), state, b)
        return b

    def _requeue_all(self) -> None:
        """The queue restarted and lost what it held: hand it again every pending pod of ours that the
        scheduler has not reserved (reserved pods wait for their gang in Redis, not in the queue)."""
        with self.lock:
            b = self._resolve_unheld()
            self._commit(b, initial=False)
        log.warning("cluster feed: the queue restarted; %d pending pods added again", len(b.queue_add))

    # -- applying it -------------------------------------------------------------------------------------
    def _commit(self, b: _Batch, initial: bool) -> None:
        s, now = self.scheduler, self.now()
        if initial:  # what Redis holds but the API server no longer has (or has differently)
            b.nodes_removed |= set(s.snapshot.index) - set(self._nodes)
            b.released |= (set(s.assumed) | s.bound) - set(self._pods)
            # "bound" in Redis but pending in the cluster (a stale Redis): schedule it afresh
            b.released |= {k for k in s.bound if k in self._pods and not self._pods[k].node}
            # gangs Redis remembers whose pods were all deleted while no scheduler watched
            b.unreferenced |= set(s.gangs.specs) | set(s.gangs.records)
        change = ClusterChange(
            nodes=list(b.nodes.values()),
            nodes_removed=sorted(b.nodes_removed),
            gangs=list(b.gangs.values()),
            # Any pod that finished or was deleted, whichever scheduler's: only those the scheduler holds cost a
            # release. The queue hears of deleted pods through the feed's own ledger (_QueueOps), below.
            released=sorted(k for k in b.released if k in s.assumed or k in s.bound),
            succeeded=sorted(b.succeeded),
            bound=[p for _, p in sorted(b.bound.items())],
            forgotten=sorted(b.deleted),
        )
        # A reserved pod of a removed node goes back to the queue only if the API server still has it.
        carry = self.events.apply(change, now, still_exists=self._pods.__contains__)
        self._forget_unreferenced(b)
        ops = self._queue_ops
        for key in b.queue_remove - b.queue_add.keys():
            ops.add.pop(key, None)
            ops.remove.add(key)
        for key, pod in b.queue_add.items():
            ops.remove.discard(key)
            ops.add[key] = pod
        ops.verdicts += carry.verdicts
        ops.activate.update(carry.activate)  # a gang declared or changed: its own pods may be schedulable now
        ops.move_all = ops.move_all or carry.move_all
        ops.freed.merge(carry.freed)
        self._flush_queue(now)

    def _forget_unreferenced(self, b: _Batch) -> None:
        """Gangs with no pod left forget their first pod's declaration; those no object declares either
        are dropped from the scheduler and Redis, so memory follows the live jobs, not every job seen."""
        idle = sorted(g for g in b.unreferenced if g not in self._members)
        for gang in idle:
            self.intake.resolver.forget_link(gang)
        unused = [g for g in idle if not self.intake.resolver.has_object(g)]
        for gang in self.scheduler.forget_gangs(unused):
            self.intake.forget_sent(gang)
            self._counts.pop(gang, None)

    def _flush_queue(self, now: float) -> None:
        """Sends the queue what it must hear; what fails is kept and sent again later (the feed never
        forgets a pod because the queue was briefly unreachable)."""
        ops = self._queue_ops
        try:
            if ops.remove:
                self.queue.remove(sorted(ops.remove))
                ops.remove.clear()
            if ops.add:
                self.queue.add(list(ops.add.values()), now)
                ops.add.clear()
            if ops.verdicts or ops.activate:
                self.queue.done(ops.verdicts, sorted(ops.activate), [], now)
                ops.verdicts = []
                ops.activate = set()
            if ops.move_all:
                self.queue.move_all("cluster-changed", now)
                ops.move_all = False
                ops.freed = FreedCapacity()
            elif ops.freed:
                refresh_freed(ops.freed, self.scheduler.snapshot)  # current amounts, should this be a retry
                self.queue.move_all("capacity-freed", now, ops.freed)
                ops.freed = FreedCapacity()
        except Exception as exc:
            log.warning("cluster feed: the queue did not answer (%s); retrying", exc)

    def _add_bound(self, pods: list[PodInfo]) -> None:
        # Bound pods are facts: recorded even where they over-commit their node as Redis counts it.
        self.scheduler.add_bound_pods(pods)

    # -- reports -----------------------------------------------------------------------------------------
    def _gang_counts(self, gangs: Iterable[str]) -> list[GangReport]:
        """PodGroup counters and phase from the pods, for gangs declared by a PodGroup whose pods changed
        (deleted ones included: a gang that lost every pod goes back to Pending). Caller holds the lock."""
        reports = []
        for gang in sorted(gangs):
            spec = self.intake.gang(gang)
            if spec is None or podgroups.group_of(spec.source) is None:
                continue
            members = [p for k in self._members.get(gang, ()) if (p := self._pods.get(k)) is not None]
            live = [p for p in members if p.phase not in TERMINAL]
            bound = sum(1 for p in live if p.node)
            rec = self.scheduler.gangs.records.get(gang)
            reserved = len(rec.assumed) if rec is not None else 0  # placed, not bound yet: the scheduler's
            running = sum(1 for p in members if p.phase == "Running")
            succeeded = sum(1 for p in members if p.phase == "Succeeded")
            failed = sum(1 for p in members if p.phase == "Failed")
            last = self._counts.get(gang, _UNREPORTED)
            phase = podgroups.pods_phase(
                spec.min_available,
                live=len(live),
                placed=bound + reserved,
                bound=bound,
                running=running,
                succeeded=succeeded,
                failed=failed,
                previous=last.phase,
            )
            counts = _Counts(sum(1 for p in members if p.node), running, succeeded, failed, phase)
            if counts == last:
                continue
            self._counts[gang] = counts
            reports.append(
                GangReport(
                    gang_key=gang,
                    source=spec.source,
                    scheduled=counts.scheduled,
                    has_counts=True,
                    running=running,
                    succeeded=succeeded,
                    failed=failed,
                    phase=phase,
                )
            )
        return reports

    def _send_reports(self, refusals: Mapping[str, str], gangs: list[GangReport]) -> None:
        fresh = {k: m for k, m in refusals.items() if self._reported.get(k) != m}
        if not fresh and not gangs:
            return
        pods = [
            PodReport(pod_key=k, unschedulable_message=m, event_reason=EventReason.FAILED_SCHEDULING, event_message=m)
            for k, m in sorted(fresh.items())
        ]
        try:
            self.reporter.report(pods, gangs, self.now())
        except Exception as exc:  # the binder is down: these are retried when the pods change again
            log.warning("cluster feed: reporting %d pods failed: %s", len(pods), exc)
            return
        self._reported.update(fresh)


def _succeeded(phase: str, meta: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Whether a pod that reached a terminal phase finished its work: Succeeded, and not stopped by a
    deletion or an eviction (a worker that exits 0 on SIGTERM ends Succeeded too; the kubelet marks a
    disrupted pod with the DisruptionTarget condition). Its gang did not lose it."""
    if phase != "Succeeded" or meta.get("deletionTimestamp"):
        return False
    return not any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True" for c in status.get("conditions") or ()
    )


def _timed_out_for_good(obj: Mapping[str, Any]) -> bool:
    """A pod marked timed out: whether the mark holds (phalanx.intake.gangs.timeout_mark_holds). One that
    cannot be read is left alone, as every marked pod was."""
    try:
        return timeout_mark_holds(parse_pod(obj))
    except IntakeError:
        return True


def _fingerprint(pod: PodInfo) -> tuple[Any, ...]:
    annotations = tuple(sorted((k, v) for k, v in pod.annotations.items() if k not in _PHALANX_WRITTEN))
    return (
        pod.uid,
        pod.priority,
        tuple(sorted(pod.requests.items())),
        pod.placement,
        tuple(sorted(pod.labels.items())),
        annotations,
    )


def _created(obj: Mapping[str, Any]) -> float:
    raw = (obj.get("metadata") or {}).get("creationTimestamp")
    if isinstance(raw, str) and raw:
        try:
            return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    return time.time()
