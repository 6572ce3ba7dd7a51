"""The cluster feed: dispatches watched Kubernetes objects to the modules that handle them, one batch at a time.

Runs inside the scheduler process. It watches (phalanx.kube.watch) Nodes, all Pods, the PodGroups of every
API group Phalanx reads, and ConfigMaps, and applies what changed in batches under the scheduler's lock,
through the scheduler's one set of cluster-event handlers (phalanx.scheduling.events) and the gang intake it
shares with the simulator (gang_intake.py). It is the thin composition of one module per job: the mirror
of what the API server holds (mirror.py), the intake flow turning watched objects into scheduler and queue
work (intake_flow.py), the queue's outbox (outbox.py), the PodGroup status (gang_counts.py), and
reconciliation (reconcile.py, a comparer that knows only the mirror, the scheduler and the feed's public
handlers). Pods refused at intake are told so through the scheduler's own reports (one record of what each
pod was last told). What the batches do:

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
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from phalanx.cluster.batch import Batch
from phalanx.cluster.gang_counts import GangCounts
from phalanx.cluster.gang_intake import GangIntake
from phalanx.cluster.inbox import Inbox
from phalanx.cluster.intake_flow import Early, IntakeFlow, parse_early, parsed_skeleton
from phalanx.cluster.mirror import Mirror
from phalanx.cluster.outbox import FeedQueue, QueueOutbox
from phalanx.cluster.reconcile import Maintenance
from phalanx.cluster.sources import BUDGETS, CONFIGMAPS, NODES, PODS, Follower
from phalanx.intake.budgets import parse_budget
from phalanx.intake.errors import IntakeError
from phalanx.intake.gang_kinds import CONFIGMAP_KIND, PODGROUP_KIND
from phalanx.kube.watch import Collection, Watcher, object_key
from phalanx.model.binding import GangReport, PodReport
from phalanx.model.objects import PodInfo
from phalanx.scheduling.events import API_SERVER, ClusterChange, ClusterEvents
from phalanx.scheduling.scheduler import GangScheduler
from phalanx.state.store import FencedOut

log = logging.getLogger(__name__)

# The rebuild hands the queue this many pending pods (whole gangs, in the queue's order) before the loop may
# start: the loop's first pops take a few gangs, then double up to its pop batch. The rest follow in chunks,
# outside the lock, while the loop runs (outbox.py): 3,000 pods under the lock held the start back ~0.3 s.
FIRST_ADDS = 256
BACKLOG_CHUNK = 500


class Reporter(Protocol):
    """The binder's report path, which the PodGroup status goes to."""

    def report(self, pods: list[PodReport], gangs: list[GangReport], now: float) -> None: ...


# A watch event: collection, kind (ADDED, MODIFIED, DELETED), the object, and a pod's early parse.
Event = tuple[str, str, dict[str, Any], Early]


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
        linger: float = 0.0,
        gang_hold: float = 0.0,
        gated: bool = False,
        after_rebuild: Callable[[], object] | None = None,
        follower: Follower | None = None,
    ) -> None:
        """`gated`: the watches list at once, but nothing is applied to the scheduler until `open()` (a new
        leader lists the API server while it recovers its memory from Redis; the rebuild needs both).
        `after_rebuild`: called once the first batch is applied (the service freezes its heap there).
        `linger`: seconds a batch that ends a lull waits for the events right behind its first (Inbox.drain).
        `gang_hold`: seconds a new gang's first pods may wait for the rest of its minimum (outbox.py).
        `follower`: given every pod and node event as it arrives, and the pods' and nodes' first lists."""
        self.scheduler = scheduler
        self.lock = lock
        self.queue = queue_client
        self.name = scheduler_name
        self.now = now
        self.events = ClusterEvents(scheduler, API_SERVER)
        self.mirror = Mirror()
        self.counts = GangCounts()
        # PodGroup status has one author, gang_counts.py: the scheduler's gang reports go through it.
        self.scheduler.reports.gang_author = self._author_status
        self.flow = IntakeFlow(self.mirror, self.counts, scheduler_name)
        self.outbox = QueueOutbox(
            queue_client,
            lambda: scheduler.snapshot,
            self.mirror.verdicts_delivered,
            hold=gang_hold,
            gathered=self._gathered,
        )
        self.reporter = reporter
        self.linger = linger
        self.stop_event = threading.Event()
        self.synced = threading.Event()  # set once the rebuild (the first batch) has been applied
        self._after_rebuild = after_rebuild
        self.applying = threading.Event()  # the gate: set once the scheduler may be fed (see `gated`)
        if not gated:
            self.applying.set()
        self._events: Inbox[Event] = Inbox()
        self._watchers = [
            Watcher(c, self._sink, self.stop_event, watch_timeout=watch_timeout, missing_retry=missing_retry)
            for c in sources
        ]
        self.follower = follower
        if follower is not None:
            follower.follow([w.synced for w in self._watchers if w.collection.name in (PODS, NODES)])
        self._queue_restarted = threading.Event()
        self._thread: threading.Thread | None = None
        self.maintenance = Maintenance(self.mirror, scheduler, self, lock, now, reconcile_interval=reconcile_interval)

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

    def open(self) -> None:
        """Opens the gate (`gated`): the scheduler recovered from Redis, the feed may apply to it. What the
        watches delivered meanwhile waits in the feed's own queue, untouched; if the process dies before this,
        nothing was applied and the next leader lists again."""
        self.applying.set()

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
        if self.follower is not None:  # before event(): it trims a pod to what the scheduler reads
            try:
                if collection == PODS:
                    self.follower.pod_event(kind, obj)
                elif collection == NODES:
                    self.follower.node_event(kind, obj)
            except Exception:  # the follower's problem: the scheduler still gets the event
                log.exception(
                    "the binder's view could not take a %s %s event; the scheduler still does", kind, collection
                )
        self._events.put(self.event(collection, kind, obj))

    def event(self, collection: str, kind: str, obj: dict[str, Any]) -> Event:
        """A watch event as the feed's batch takes it. Pods are parsed here, on their watch thread, not in the
        batch under the scheduler's lock (intake_flow.parse_early)."""
        if collection != PODS:
            return collection, kind, obj, None
        known = self.mirror.pods.get(object_key(obj))  # read without the lock: see parse_early
        early = parse_early(kind, obj, self.name, None if known is None else known.node)
        return collection, kind, parsed_skeleton(obj, early), early

    def _run(self) -> None:
        while not self.stop_event.is_set() and not (
            self.applying.is_set() and all(w.synced.is_set() for w in self._watchers)
        ):
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
                if self.outbox.pending():
                    with self.lock:
                        delivered = self.outbox.flush(self.now())
                    if not delivered:  # the queue is down: retried every second
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
                self.maintenance.request_reconcile(specs_unsure=True)
            if first:
                first = False
                self.maintenance.rebuilt()
                self.synced.set()
                log.info(
                    "cluster feed: rebuilt from the API server (%d nodes, %d pods)",
                    len(self.mirror.nodes),
                    len(self.mirror.pods),
                )
                if self._after_rebuild is not None:
                    self._after_rebuild()
                self._send_backlog()

    def _send_backlog(self) -> None:
        """The rebuild's pending pods that its flush kept back (FIRST_ADDS) go to the queue now, while the loop
        schedules the first: the lock is held to take them, not while the queue takes them."""
        with self.lock:
            pods = self.outbox.take_adds(self.now())
        if pods and self.outbox.send_adds(pods, self.now(), BACKLOG_CHUNK):
            log.debug("cluster feed: %d more pending pods handed to the queue after the rebuild", len(pods))

    def _drain(self, block: bool) -> list[Event]:
        timeout = 0.2 if block else 0.0
        release = self.outbox.next_release()  # pods held for their gang go at this time, events or not
        if release is not None:
            timeout = max(0.0, min(timeout, release - self.now()))
        return self._events.drain(timeout, linger=self.linger)

    def _maintain(self) -> None:
        try:
            self.maintenance.tick()
        except Exception as exc:  # Redis or the queue is down: the next tick tries again
            log.warning("cluster feed: maintenance failed (%s); retrying", exc)

    # -- one batch: dispatch -----------------------------------------------------------------------------
    def _apply(self, events: list[Event], initial: bool) -> None:
        # Nodes first (bound pods need their node), then gang objects (pods resolve against them).
        rank = {NODES: 0, PODS: 2}
        b = Batch()
        with self.lock:
            for collection, kind, obj, early in sorted(events, key=lambda e: rank.get(e[0], 1)):
                try:
                    if collection == NODES:
                        self.flow.on_node(kind, obj, b)
                    elif collection == PODS:
                        self.flow.on_pod(kind, obj, b, early)
                    elif collection == BUDGETS:
                        self._on_budget(kind, obj)
                    else:
                        self._on_gang_object(collection, kind, obj, b)
                except Exception:
                    log.exception("cluster feed: %s %s %s could not be handled", kind, collection, object_key(obj))
            self.flow.reresolve(b)
            self._commit(b, initial)
            self._report_refusals(b.reports)
            gang_reports = self.counts.reports(b.counted, self.mirror, self.flow.intake.gang, self._scheduler_view)
        self._report_status(gang_reports)

    def _report_refusals(self, refusals: Mapping[str, str]) -> None:
        """Pods of ours refused at intake get PodScheduled=False and an Event, through the scheduler's reports:
        one record of what each pod was last told, whether the feed or the scheduler told it, so a message
        is neither repeated nor wrongly skipped as said already. Caller holds the lock."""
        if not refusals:
            return
        for key, message in sorted(refusals.items()):
            self.scheduler.reports.pod(key, message)
        self.scheduler.reports.flush(self.scheduler.binder, self.now())  # kept there while the binder is down

    def _report_status(self, gangs: list[GangReport]) -> None:
        if not gangs:
            return
        try:
            self.reporter.report([], gangs, self.now())
        except Exception as exc:  # the binder is down: sent again when the gangs' pods change again
            log.warning("cluster feed: reporting %d PodGroups failed: %s", len(gangs), exc)

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

    def _on_gang_object(self, collection: str, kind: str, obj: Mapping[str, Any], b: Batch) -> None:
        if collection == CONFIGMAPS:
            if kind != "DELETED" and not GangIntake.is_gang_object(obj):
                kind = "DELETED"  # an ordinary ConfigMap, or one that stopped declaring a gang
            self.flow.on_gang_object(kind, CONFIGMAP_KIND, obj, b)
            return
        group = collection.partition(".")[2]
        key = self.flow.on_gang_object(kind, f"{PODGROUP_KIND}.{group}", obj, b)
        if key and kind != "DELETED":
            # What its status shows already is not written again (a restart's rebuild: gang_counts.observe).
            self.counts.observe(key, group, obj.get("status"))

    # -- one batch: committed ----------------------------------------------------------------------------
    def _commit(self, b: Batch, initial: bool) -> None:
        s, now, pods = self.scheduler, self.now(), self.mirror.pods
        if initial:  # what Redis holds but the API server no longer has (or has differently)
            b.nodes_removed |= set(s.snapshot.index) - set(self.mirror.nodes)
            b.released |= (set(s.assumed) | s.bound) - set(pods)
            # "bound" in Redis but pending in the cluster (a stale Redis): schedule it afresh
            b.released |= {k for k in s.bound if k in pods and not pods[k].node}
            # gangs Redis remembers whose pods were all deleted while no scheduler watched
            b.unreferenced |= set(s.gangs.specs) | set(s.gangs.records)
        change = ClusterChange(
            nodes=list(b.nodes.values()),
            nodes_removed=sorted(b.nodes_removed),
            gangs=list(b.gangs.values()),
            # Any pod that finished or was deleted, whichever scheduler's: only those the scheduler holds cost a
            # release. The queue hears of deleted pods through the feed's own outbox, below.
            released=sorted(k for k in b.released if k in s.assumed or k in s.bound),
            succeeded=sorted(b.succeeded),
            bound=[p for _, p in sorted(b.bound.items())],
            forgotten=sorted(b.deleted),
        )
        # A reserved pod of a removed node goes back to the queue only if the API server still has it.
        carry = self.events.apply(change, now, still_exists=self.mirror.__contains__)
        # A gang the scheduler learns with its first pod has nothing in the queue to activate (the pod joins
        # it active): no Done call for it, which was one per new gang under steady arrival.
        carry.activate = [g for g in carry.activate if g not in b.first_sent]
        # Gangs no pod and no object names any more are dropped, so memory follows the live jobs.
        for gang in s.forget_gangs(self.flow.forget_unreferenced(b.unreferenced)):
            self.flow.intake.forget_sent(gang)
            self.counts.forget(gang)
        self.outbox.stage(b.queue_add, b.queue_remove, carry)
        self.outbox.flush(now, first_adds=FIRST_ADDS if initial else 0)

    def _gathered(self, gang: str) -> bool:
        """Whether the gang has as many pods of ours known as its minimum, or waiting cannot help (the
        scheduler does not know the gang yet, or it is invalid: its pods get their answer at once)."""
        spec = self.scheduler.gangs.specs.get(gang)
        if spec is None or spec.invalid:
            return True
        return self.counts.member_count(gang) >= spec.min_available

    def _scheduler_view(self, gang: str) -> tuple[int, int]:
        """Of the gang's pods, those the scheduler placed and has not bound yet (the mirror cannot see them),
        and those it has recorded bound (before the watch shows them). Caller holds the lock."""
        rec = self.scheduler.gangs.records.get(gang)
        return (len(rec.assumed), len(rec.bound)) if rec is not None else (0, 0)

    def _author_status(self, scheduler_reports: list[GangReport]) -> list[GangReport]:
        """The scheduler's gang reports, made the PodGroups' one report each (gang_counts.py). Called by the
        scheduler's reports as they are sent, under the lock."""
        return self.counts.author(scheduler_reports, self.mirror, self.flow.intake.gang, self._scheduler_view)

    # -- public handlers, which reconciliation repairs through (reconcile_views.FeedHandlers) -----------------------
    def add_bound(self, pods: list[PodInfo]) -> None:
        """Pods the API server shows bound that the scheduler does not count. Bound pods are facts: recorded
        even where they over-commit their node as Redis counts it. Caller holds the lock."""
        self.scheduler.add_bound_pods(pods)

    def retry_unschedulable(self) -> None:
        """Reconciliation repaired what scheduling reads (nodes, usage, reservations, memory) without a watch
        event: every unschedulable pod is given another try, as a node event gives it. A pod judged while the
        repair was pending (no nodes known, Redis down mid-rebuild) would otherwise wait for an unrelated
        event or the queue's flush interval. Caller holds the lock."""
        self.outbox.move_all()
        self.outbox.flush(self.now())

    def resend_gangs(self) -> None:
        """After Redis was emptied: the scheduler learns every gang in use again."""
        specs = self.flow.specs_in_use()
        if specs:
            self.scheduler.upsert_gangs(specs)

    def requeue_missing(self) -> int:
        """Hands the queue, again, every pending pod of ours that the scheduler does not hold; pods the
        queue still holds stay where they are. Caller holds the lock."""
        b = self.flow.unheld(self._held())
        if b.gangs:
            self.scheduler.upsert_gangs(list(b.gangs.values()))
        pods = list(b.queue_add.values())
        self.outbox.add_missing(pods, self.now())
        return len(pods)

    def _held(self) -> set[str]:
        return set(self.scheduler.assumed) | self.scheduler.bound

    def _requeue_all(self) -> None:
        """The queue restarted and lost what it held: hand it again every pending pod of ours that the
        scheduler has not reserved (reserved pods wait for their gang in Redis, not in the queue)."""
        with self.lock:
            b = self.flow.unheld(self._held())
            self._commit(b, initial=False)
        log.warning("cluster feed: the queue restarted; %d pending pods added again", len(b.queue_add))

    # -- the API server's copy of what is placed (phalanx.scheduling.pod_source.PodSource) ------------------
