"""The cluster feed's translation of watch events into scheduler and queue calls, with a real scheduler
(and Redis) but events handed in directly instead of watched."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import redis
from waiting import wait_for

from phalanx.backends.simulated import SimulatedBackend
from phalanx.binding.batch_binder import BatchBinder
from phalanx.binding.lock import FencedLock
from phalanx.cluster.feed import ClusterFeed
from phalanx.cluster.reconcile import Maintenance
from phalanx.gang.manager import GangStatus
from phalanx.model.binding import GangReport, PodReport, Victim
from phalanx.model.keys import (
    KOORD_MIN_AVAILABLE,
    KOORD_NAME,
    KOORD_TIMEOUT,
    LABEL_X_K8S_PODGROUP,
    VOLCANO_GROUP_NAME,
)
from phalanx.model.objects import PodInfo
from phalanx.plugins.registry import in_tree_framework
from phalanx.preemption.nomination import Nomination
from phalanx.queueing.scheduling_queue import Outcome, QueueSettings, SchedulingQueue
from phalanx.scheduling.pod_source import PoppedPodCheck
from phalanx.scheduling.ports import Carry, PopResult, Verdict
from phalanx.scheduling.scheduler import GangScheduler, SchedulerSettings
from phalanx.state.store import StateStore, decoded
from phalanx.testing.in_process import LocalBinder, LocalQueue

NAME = "phalanx"


class Reports:
    """The feed's reporter: the PodGroup status (pods' refusals go through the scheduler's reports)."""

    def __init__(self) -> None:
        self.gangs: list[GangReport] = []

    def report(self, pods: list[PodReport], gangs: list[GangReport], now: float) -> None:
        assert not pods
        self.gangs.extend(gangs)


def node(name: str, gpus: int = 4) -> tuple[str, str, dict[str, Any]]:
    alloc = {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return (
        "nodes",
        "ADDED",
        {"kind": "Node", "apiVersion": "v1", "metadata": {"name": name}, "status": {"allocatable": alloc}},
    )


def pod(
    name: str,
    *,
    node_name: str = "",
    annotations: dict[str, str] | None = None,
    phase: str = "Pending",
    scheduler: str = NAME,
    kind: str = "ADDED",
    uid: str = "",
) -> tuple[str, str, dict[str, Any]]:
    return (
        "pods",
        kind,
        {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {
                "name": name,
                "namespace": "ns",
                "uid": uid or f"uid-{name}",
                "annotations": annotations or {},
                "creationTimestamp": "2026-01-01T00:00:00Z",
            },
            "spec": {
                "schedulerName": scheduler,
                "nodeName": node_name or None,
                "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}],
            },
            "status": {"phase": phase},
        },
    )


def koord(gang: str, minimum: str = "2") -> dict[str, str]:
    return {KOORD_NAME: gang, KOORD_MIN_AVAILABLE: minimum}


class CountingQueue(LocalQueue):
    """The in-process queue, recording the calls the feed's outbox makes (not those a pop carries)."""

    def __init__(self, queue: SchedulingQueue) -> None:
        super().__init__(queue)
        self.removes: list[list[str]] = []
        self.adds: list[list[str]] = []  # the pods of each Add call
        self.dones: list[tuple[int, list[str]]] = []  # (verdicts, gangs activated) of each Done
        self._popping = False

    def pop(self, max_pods: int, now: float, carry: Carry | None = None, wait_seconds: float = 0.0) -> PopResult:
        self._popping = True
        try:
            return super().pop(max_pods, now, carry, wait_seconds)
        finally:
            self._popping = False

    def add(self, pods: list[PodInfo], now: float, only_missing: bool = False) -> None:
        self.adds.append(sorted(p.key for p in pods))
        super().add(pods, now, only_missing)

    def remove(self, keys: list[str]) -> None:
        if keys and not self._popping:
            self.removes.append(sorted(keys))
        super().remove(keys)

    def done(self, verdicts: list[Verdict], activate: list[str], failed: list[str], now: float) -> None:
        if not self._popping:
            self.dones.append((len(verdicts), list(activate)))
        super().done(verdicts, activate, failed, now)


class Harness:
    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.queue = CountingQueue(SchedulingQueue(QueueSettings(unschedulable_flush=0)))
        self.reports = Reports()
        self.start()

    def start(self, gang_hold: float = 0.0, now: Callable[[], float] = lambda: 0.0) -> None:
        """A scheduler (recovered from Redis, as after a restart) with a fresh feed."""
        backend = SimulatedBackend(self.store.redis, self.store.keys)
        binder = LocalBinder(BatchBinder(self.store, backend, FencedLock(self.store.redis, self.store.keys)), backend)
        self.sched = GangScheduler(
            self.store, self.queue, binder, in_tree_framework(), SchedulerSettings(default_wait_seconds=60)
        )
        self.sched.recover(0.0)
        self.feed = ClusterFeed(
            self.sched,
            threading.Lock(),
            self.queue,
            self.reports,
            [],
            scheduler_name=NAME,
            now=now,
            gang_hold=gang_hold,
        )
        self.first = True

    def apply(self, *events: tuple[str, str, dict[str, Any]]) -> None:
        # As the watch threads deliver them: pods parsed before the batch (ClusterFeed.event).
        self.feed._apply([self.feed.event(*e) for e in events], initial=self.first)
        self.first = False

    def conditions(self) -> dict[str, str]:
        """Each pod's PodScheduled=False message, as the scheduler's binder wrote it."""
        return decoded(self.store.redis.hgetall(self.store.keys.sim_conditions))

    def reserved(self) -> dict[str, str]:
        return {k: r.state for k, r in self.store.load_pods().items()}


@pytest.fixture
def h(store: StateStore) -> Harness:
    return Harness(store)


def test_bound_pods_of_every_scheduler_hold_capacity_and_finished_ones_release_it(h: Harness) -> None:
    h.apply(
        node("n1"),
        pod("mine", node_name="n1", annotations=koord("g", "1")),
        pod("theirs", node_name="n1", scheduler="default-scheduler"),
        pod("waiting", scheduler="default-scheduler"),
    )
    assert h.reserved() == {"ns/mine": "bound", "ns/theirs": "bound"}
    assert h.store.load_gangs()["ns/g"].min_available == 1  # learned from the bound pod
    h.apply(
        pod("theirs", node_name="n1", scheduler="default-scheduler", phase="Succeeded", kind="MODIFIED"),
        pod("mine", node_name="n1", kind="DELETED"),
    )
    assert h.reserved() == {}


def test_rebuild_releases_what_redis_holds_but_the_cluster_lost(h: Harness) -> None:
    h.apply(node("n1"), node("n2"), pod("a", node_name="n1"), pod("b", node_name="n2"))
    assert h.reserved() == {"ns/a": "bound", "ns/b": "bound"}
    # The scheduler is down while b is deleted and n2 removed; a new one rebuilds from the lists.
    h.start()
    h.apply(node("n1"), pod("a", node_name="n1"))
    assert h.reserved() == {"ns/a": "bound"}
    assert set(h.sched.snapshot.index) == {"n1"}


def test_pods_wait_for_their_podgroup_then_queue(h: Harness) -> None:
    h.apply(node("n1"), pod("w0", annotations={VOLCANO_GROUP_NAME: "pg"}))
    assert "does not exist yet" in h.conditions()["ns/w0"]
    assert h.queue.queue.pop(10, 0.0) == []
    podgroup = {
        "kind": "PodGroup",
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "metadata": {"name": "pg", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"minMember": 1},
    }
    h.apply(("podgroups.scheduling.volcano.sh", "ADDED", podgroup))
    assert [e.key for e in h.queue.queue.pop(10, 0.0)] == ["ns/w0"]
    assert h.store.load_gangs()["ns/pg"].source == "podgroup/scheduling.volcano.sh"


def test_refused_pods_are_reported_not_queued(h: Harness) -> None:
    h.apply(node("n1"), pod("bad", annotations=koord("g", "abc")), pod("ok", annotations=koord("g2", "1")))
    assert f"metadata.annotations[{KOORD_MIN_AVAILABLE}]" in h.conditions()["ns/bad"]
    assert [e.key for e in h.queue.queue.pop(10, 0.0)] == ["ns/ok"]


def test_a_pod_refused_again_is_told_again_after_the_scheduler_told_it_something_else(h: Harness) -> None:
    # One record of what each pod was last told (the scheduler's reports), whether the feed refused it or the
    # scheduler found no room: a repeated refusal is not skipped as "said already" over the scheduler's word.
    h.apply(node("n1", gpus=0), pod("w0", annotations=koord("g", "abc")))
    refused = h.conditions()["ns/w0"]
    assert KOORD_MIN_AVAILABLE in refused
    h.apply(pod("w0", annotations=koord("g", "1"), kind="MODIFIED"))
    h.sched.step(0.0)
    assert h.conditions()["ns/w0"] != refused  # the scheduler's: no node has room
    h.apply(pod("w0", annotations=koord("g", "abc"), kind="MODIFIED"))
    assert h.conditions()["ns/w0"] == refused


def test_timed_out_and_unchanged_pods_are_not_queued_again(h: Harness) -> None:
    h.apply(node("n1"), pod("w0", annotations=koord("g", "1")))
    assert [e.key for e in h.queue.queue.pop(10, 0.0)] == ["ns/w0"]
    h.apply(pod("w0", annotations=koord("g", "1"), kind="MODIFIED"))  # e.g. our own condition write
    assert h.queue.queue.pop(10, 0.0) == []
    h.apply(pod("w0", annotations={**koord("g", "1"), KOORD_TIMEOUT: "true"}, kind="MODIFIED"))
    h.start()  # even a rebuild (a lost Redis) does not bring a timed-out pod back
    h.apply(node("n1"), pod("w0", annotations={**koord("g", "1"), KOORD_TIMEOUT: "true"}))
    assert h.queue.queue.pop(10, 0.0) == []


def test_a_parsed_pods_event_holds_only_what_its_handling_reads(h: Harness) -> None:
    """A first list holds every event until all its lists are in: a pod parsed on its watch thread is held
    without the rest of its spec (the PodInfo has it), and is handled as the whole object would be."""
    _, _, obj = pod("w0", annotations=koord("g", "1"))
    held = h.feed.event("pods", "ADDED", obj)[2]
    assert held["spec"] == {"schedulerName": NAME, "nodeName": None}
    assert held["metadata"] is obj["metadata"] and held["status"] is obj["status"]
    h.apply(node("n1"), pod("w0", annotations=koord("g", "1")), pod("b0", node_name="n1", scheduler="other"))
    assert [e.key for e in h.queue.queue.pop(10, 0.0)] == ["ns/w0"]
    assert h.feed.mirror.pods["ns/b0"].info is not None  # a bound pod's parse counts what it holds
    # A pod that cannot be parsed is held whole: on_pod reports what is wrong with it.
    _, _, bad = pod("w1", annotations=koord("g", "1"))
    bad["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "lots"
    assert h.feed.event("pods", "ADDED", bad)[2] is bad
    h.apply(("pods", "ADDED", bad))
    assert "nvidia.com/gpu" in h.conditions()["ns/w1"]


def test_a_deleted_node_releases_its_pods(h: Harness) -> None:
    h.apply(node("n1"), node("n2"), pod("a", node_name="n1"), pod("b", node_name="n2"))
    h.apply(("nodes", "DELETED", {"kind": "Node", "apiVersion": "v1", "metadata": {"name": "n1"}}))
    assert h.reserved() == {"ns/b": "bound"}
    assert set(h.sched.snapshot.index) == {"n2"}


# -- a gang's pods evicted, deleted, finished: its PodGroup and its satisfied mark follow them -----------------

VOLCANO_PODGROUPS = "podgroups.scheduling.volcano.sh"


def volcano_podgroup(name: str, minimum: int) -> tuple[str, str, dict[str, Any]]:
    return (
        VOLCANO_PODGROUPS,
        "ADDED",
        {
            "kind": "PodGroup",
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "metadata": {"name": name, "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"minMember": minimum},
        },
    )


def member(name: str, **kw: Any) -> tuple[str, str, dict[str, Any]]:
    return pod(name, annotations={VOLCANO_GROUP_NAME: "pg"}, **kw)


def running_gang(h: Harness) -> None:
    """A PodGroup of min 2 whose two pods the scheduler bound and that run."""
    h.apply(node("n1"), volcano_podgroup("pg", 2), member("w0"), member("w1"))
    h.sched.step(0.0)
    assert h.reserved() == {"ns/w0": "bound", "ns/w1": "bound"}
    assert h.sched.gangs.status("ns/pg") == GangStatus.SATISFIED
    h.apply(*(member(f"w{i}", node_name="n1", phase="Running", kind="MODIFIED") for i in range(2)))
    last = h.reports.gangs[-1]
    assert (last.phase, last.running) == ("Running", 2)


def test_a_podgroup_whose_pods_were_all_deleted_goes_back_to_pending(h: Harness) -> None:
    """The issue's PodGroup said Running with running: 0 after its whole gang was evicted."""
    running_gang(h)
    h.apply(*(member(f"w{i}", node_name="n1", phase="Running", kind="DELETED") for i in range(2)))
    last = h.reports.gangs[-1]
    assert (last.gang_key, last.phase, last.running, last.scheduled, last.has_counts) == (
        "ns/pg",
        "Pending",
        0,
        0,
        True,
    )
    # and the gang is no longer satisfied: its recreated pods are placed all-or-nothing
    assert h.sched.gangs.status("ns/pg") == GangStatus.ACCUMULATING
    h.apply(member("w0", uid="second-w0"))
    assert h.reports.gangs[-1].phase == "Pending"  # unchanged: nothing new sent
    assert len([g for g in h.reports.gangs if g.phase == "Pending"]) == 1


def test_an_evicted_pod_that_exits_zero_is_a_loss_not_a_success(h: Harness) -> None:
    """A worker that exits 0 on SIGTERM ends Succeeded; being deleted, it did not finish its work."""
    running_gang(h)
    for i in range(2):
        w = member(f"w{i}", node_name="n1", phase="Succeeded", kind="MODIFIED")
        w[2]["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
        h.apply(w)
    assert h.sched.gangs.status("ns/pg") == GangStatus.ACCUMULATING
    assert h.sched.gangs.record("ns/pg").succeeded == 0


def test_a_finished_podgroup_stays_finished_when_its_pods_are_cleaned_up(h: Harness) -> None:
    running_gang(h)
    h.apply(*(member(f"w{i}", node_name="n1", phase="Succeeded", kind="MODIFIED") for i in range(2)))
    assert h.reports.gangs[-1].phase == "Finished"
    assert h.sched.gangs.status("ns/pg") == GangStatus.SATISFIED  # a job finishing is not a gang losing pods
    h.apply(*(member(f"w{i}", node_name="n1", phase="Succeeded", kind="DELETED") for i in range(2)))
    last = h.reports.gangs[-1]
    assert (last.phase, last.succeeded) == ("Finished", 0)


def test_nodes_repaired_by_reconciliation_give_unschedulable_pods_another_try(h: Harness) -> None:
    # A Sentinel failover lost the scheduler's write of the node (the replica had not received it): the feed
    # knows the node, the scheduler's view does not, and a pod judged meanwhile found an empty cluster.
    h.apply(node("n1"))
    h.sched.remove_nodes(["n1"], 0.0)
    h.apply(pod("w0", annotations=koord("g", "1")))
    h.sched.step(1.0)
    assert h.reserved() == {}
    assert h.queue.queue.pop(10, 2.0) == []  # unschedulable: waits for an event that may help it
    # Reconciliation finds the node missing and repairs it: that is such an event.
    assert h.feed.maintenance.reconcile()["node"] == 1
    h.sched.step(3.0)
    assert h.reserved() == {"ns/w0": "bound"}


class RecordingHandlers:
    """The feed's public handlers, each call recorded (reconcile_views.FeedHandlers)."""

    def __init__(self, feed: ClusterFeed) -> None:
        self.feed = feed
        self.calls: list[tuple[str, list[str]]] = []

    def add_bound(self, pods: list[PodInfo]) -> None:
        self.calls.append(("add_bound", [p.key for p in pods]))
        self.feed.add_bound(pods)

    def resend_gangs(self) -> None:
        self.calls.append(("resend_gangs", []))
        self.feed.resend_gangs()

    def requeue_missing(self) -> int:
        self.calls.append(("requeue_missing", []))
        return self.feed.requeue_missing()

    def retry_unschedulable(self) -> None:
        self.calls.append(("retry_unschedulable", []))
        self.feed.retry_unschedulable()


def test_reconciliation_compares_the_mirror_with_the_scheduler_and_repairs_through_public_handlers(h: Harness) -> None:
    h.apply(node("n1"), pod("theirs", node_name="n1", scheduler="default-scheduler"))
    h.sched.release_pods(["ns/theirs"])  # Redis lost it: the mirror still shows it bound
    handlers = RecordingHandlers(h.feed)
    maintenance = Maintenance(h.feed.mirror, h.sched, handlers, threading.Lock(), lambda: 0.0)
    assert maintenance.reconcile()["uncounted-pod"] == 1
    assert handlers.calls == [("add_bound", ["ns/theirs"]), ("requeue_missing", []), ("retry_unschedulable", [])]
    assert h.reserved() == {"ns/theirs": "bound"}


class WatchedLock:
    """The scheduler's lock, telling whether it is held (a pass's reads are checked against it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.taken = 0

    def __enter__(self) -> None:
        self.lock.acquire()
        self.taken += 1

    def __exit__(self, *exc: object) -> None:
        self.lock.release()

    def held(self) -> bool:
        return self.lock.locked()


def test_a_pass_that_finds_nothing_reads_the_records_without_the_schedulers_lock(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading and comparing every record held the lock the scheduling loop needs, for the whole pass; a
    pass that finds nothing now takes it once, for the memory check and the queue's refill, and never
    while it reads the records. One that finds drift still compares again and repairs under it."""
    h.apply(node("n1"), pod("theirs", node_name="n1", scheduler="default-scheduler"))
    lock = WatchedLock()
    handlers = RecordingHandlers(h.feed)
    maintenance = Maintenance(h.feed.mirror, h.sched, handlers, lock, lambda: 0.0)
    reads: list[bool] = []
    marks, with_usage = h.sched.store.load_pod_marks, h.sched.store.marks_and_usage_drift
    monkeypatch.setattr(h.sched.store, "load_pod_marks", lambda: (reads.append(lock.held()), marks())[1])
    monkeypatch.setattr(h.sched.store, "marks_and_usage_drift", lambda: (reads.append(lock.held()), with_usage())[1])

    assert maintenance.reconcile() == Counter()
    assert (reads, lock.taken) == ([False], 1)
    assert handlers.calls == [("requeue_missing", [])]

    h.sched.release_pods(["ns/theirs"])  # drift: Redis lost a pod the API server shows bound
    reads.clear()
    assert maintenance.reconcile()["uncounted-pod"] == 1
    assert reads[0] is False and reads[1:] and all(reads[1:])  # found without the lock, compared again under it
    assert h.reserved() == {"ns/theirs": "bound"}


def test_a_quiet_pass_runs_the_usage_script_only_when_usage_drifted(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recomputing usage inside Redis stops Redis for every other client while it decodes every record (15-37
    ms at 1,800 records, every 10 s): a pass finds drift from the records it reads anyway and runs the script
    only then, and the drift is repaired and counted as before."""
    h.apply(node("n1"), pod("theirs", node_name="n1", scheduler="default-scheduler"))
    maintenance = Maintenance(h.feed.mirror, h.sched, RecordingHandlers(h.feed), threading.Lock(), lambda: 0.0)
    scripts: list[int] = []
    repair = h.sched.store.repair_usage
    monkeypatch.setattr(h.sched.store, "repair_usage", lambda: (scripts.append(1), repair())[1])
    assert maintenance.reconcile() == Counter() and scripts == []
    counted = h.sched.store.load_used()
    h.sched.store.redis.hincrby(h.sched.store.keys.used, "n1\x1fcpu", 777)
    assert maintenance.reconcile()["usage"] == 1 and scripts
    assert h.sched.store.load_used() == counted
    scripts.clear()
    assert maintenance.reconcile() == Counter() and scripts == []


def test_a_stale_record_found_without_the_lock_is_released_when_the_next_pass_sees_it_too(h: Harness) -> None:
    """A finding seen once is remembered, not repaired, and costs no lock (most are a watch event on its
    way); seen again on the next pass, that pass compares under the lock and releases the record."""
    h.apply(node("n1"), pod("theirs", node_name="n1", scheduler="default-scheduler"))
    h.feed.mirror.drop_pod("ns/theirs")  # the API server no longer has it; Redis still counts it
    lock = WatchedLock()
    maintenance = Maintenance(h.feed.mirror, h.sched, RecordingHandlers(h.feed), lock, lambda: 0.0)
    assert maintenance.reconcile() == Counter()
    assert (lock.taken, maintenance.last_pass_quiet, h.reserved()) == (1, True, {"ns/theirs": "bound"})
    assert maintenance.reconcile()["stale-record"] == 1
    assert (maintenance.last_pass_quiet, h.reserved()) == (False, {})


def test_one_pass_restores_a_lost_node_and_counts_the_pods_bound_on_it(h: Harness) -> None:
    """Redis lost a node and the pods bound on it (emptied): the pass that puts the node back must count its
    pods too. A pass that compared pods before restoring the node left their capacity free until the next,
    and the scheduler placed other pods there meanwhile (an over-committed GPU in the redis-empty chaos trial)."""
    h.apply(node("n1"), pod("theirs", node_name="n1", scheduler="default-scheduler"))
    h.sched.release_pods(["ns/theirs"])
    h.sched.remove_nodes(["n1"], 0.0)
    maintenance = Maintenance(h.feed.mirror, h.sched, RecordingHandlers(h.feed), threading.Lock(), lambda: 0.0)
    repairs = maintenance.reconcile()
    assert (repairs["node"], repairs["uncounted-pod"]) == (1, 1)
    assert h.reserved() == {"ns/theirs": "bound"}


def test_memory_apart_from_redis_in_a_quiet_pass_is_reloaded_if_the_next_pass_sees_it_too(h: Harness) -> None:
    """The memory check of a pass that found nothing in Redis still counts: a difference seen there and on
    the next pass makes that pass reload the scheduler's memory."""
    h.apply(node("n1"), pod("theirs", node_name="n1", scheduler="default-scheduler"))
    maintenance = Maintenance(h.feed.mirror, h.sched, RecordingHandlers(h.feed), threading.Lock(), lambda: 0.0)
    h.sched.store.redis.hset(h.sched.store.keys.podstate, "ns/theirs", "assumed")  # Redis now says otherwise
    assert maintenance.reconcile() == Counter()  # seen once: a suspicion, no reload yet
    assert maintenance.reconcile()["scheduler-memory"] == 1


def _ticks_until_the_pass_ends(maintenance: Maintenance) -> None:
    """Ticks (as the feed does between batches) until the pass whose reads are under way has ended."""
    for _ in range(200):
        if maintenance._reads is None:
            return
        maintenance.tick()
        time.sleep(0.01)
    raise AssertionError("the pass's reads never ended")


def test_a_slow_pass_spaces_the_next_so_reconciliation_stays_a_twentieth_of_the_time(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    from phalanx.cluster import reconcile

    clock = [100.0]
    maintenance = Maintenance(h.feed.mirror, h.sched, RecordingHandlers(h.feed), threading.Lock(), lambda: 0.0)
    maintenance._clock = lambda: clock[0]
    maintenance._identity = h.sched.store.identity()
    passes: list[float] = []
    marks = h.sched.store.marks_and_usage_drift

    def slow_marks() -> Any:
        passes.append(clock[0])
        clock[0] += 2.0  # reads of 2 s (a large cluster): the next pass no sooner than 40 s after this one ends
        return marks()

    monkeypatch.setattr(h.sched.store, "marks_and_usage_drift", slow_marks)
    maintenance.request_reconcile()
    maintenance.tick()
    _ticks_until_the_pass_ends(maintenance)
    assert passes == [100.0] and maintenance.last_pass_quiet
    for t in (112.0, 141.0):  # after the 10 s interval, not yet after 20 x 2 s
        clock[0] = t
        maintenance.tick()
    assert passes == [100.0] and maintenance._reads is None
    clock[0] = 142.0
    maintenance.tick()
    _ticks_until_the_pass_ends(maintenance)
    assert passes == [100.0, 142.0]
    assert reconcile.PASS_COST_FACTOR * 2.0 > maintenance.interval


def test_a_periodic_pass_reads_redis_while_the_feed_goes_on(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass reads every record from Redis and recomputes usage there (35-75 ms at 1,800 pods); run on the
    feed's thread it held back every pod created meanwhile. Its reads now run on a thread of their own: the
    feed's tick returns while they are under way, and the tick after they are in compares and ends the pass."""
    h.apply(node("n1"), pod("theirs", node_name="n1", scheduler="default-scheduler"))
    maintenance = Maintenance(h.feed.mirror, h.sched, RecordingHandlers(h.feed), threading.Lock(), lambda: 0.0)
    maintenance._identity = h.sched.store.identity()
    reading, release = threading.Event(), threading.Event()
    marks = h.sched.store.marks_and_usage_drift

    def held_marks() -> Any:
        reading.set()
        release.wait(10)
        return marks()

    monkeypatch.setattr(h.sched.store, "marks_and_usage_drift", held_marks)
    maintenance.request_reconcile()
    began = time.monotonic()
    maintenance.tick()
    assert reading.wait(5)
    maintenance.tick()  # the reads are still held: nothing to wait for here
    assert time.monotonic() - began < 2.0
    assert maintenance._reads is not None and not maintenance.last_pass_quiet
    release.set()
    _ticks_until_the_pass_ends(maintenance)
    assert maintenance.last_pass_quiet and maintenance.totals == Counter()


def test_a_pass_requested_while_the_reads_run_is_not_lost(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch that fails to apply while a pass reads Redis asks for a repair pass: the pass under way ends as
    that repair (the gang specs re-sent), not as a quiet pass that would leave it for an interval later."""
    h.apply(node("n1"))
    handlers = RecordingHandlers(h.feed)
    maintenance = Maintenance(h.feed.mirror, h.sched, handlers, threading.Lock(), lambda: 0.0)
    maintenance._identity = h.sched.store.identity()
    reading, release = threading.Event(), threading.Event()
    marks = h.sched.store.marks_and_usage_drift
    monkeypatch.setattr(h.sched.store, "marks_and_usage_drift", lambda: (reading.set(), release.wait(10), marks())[2])
    maintenance.request_reconcile()
    maintenance.tick()
    assert reading.wait(5)
    maintenance.request_reconcile(specs_unsure=True)  # the feed's batch failed meanwhile
    release.set()
    _ticks_until_the_pass_ends(maintenance)
    assert ("resend_gangs", []) in handlers.calls and not maintenance.specs_unsure
    assert not maintenance.last_pass_quiet


def test_reads_that_fail_are_the_passs_failure_and_the_next_pass_retries(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis lost in the middle of a pass's reads: the tick that collects them raises what they raised (the feed
    logs it as a maintenance failure and goes on), nothing is left half-done, and a pass is due again
    FAST_PASS_SECONDS after the failed one began."""
    from phalanx.cluster import reconcile

    h.apply(node("n1"))
    clock = [100.0]
    maintenance = Maintenance(h.feed.mirror, h.sched, RecordingHandlers(h.feed), threading.Lock(), lambda: 0.0)
    maintenance._clock = lambda: clock[0]
    maintenance._identity = h.sched.store.identity()
    marks = h.sched.store.marks_and_usage_drift
    failures = [redis.ConnectionError("Connection closed by server.")]

    def flaky_marks() -> Any:
        if failures:
            raise failures.pop()
        return marks()

    monkeypatch.setattr(h.sched.store, "marks_and_usage_drift", flaky_marks)
    maintenance.request_reconcile()
    maintenance.tick()
    with pytest.raises(redis.ConnectionError):
        _ticks_until_the_pass_ends(maintenance)
    assert maintenance._reads is None and maintenance._next_pass == 100.0 + reconcile.FAST_PASS_SECONDS
    clock[0] = 100.0 + reconcile.FAST_PASS_SECONDS
    maintenance.tick()
    _ticks_until_the_pass_ends(maintenance)
    assert maintenance.last_pass_quiet and maintenance._next_pass > clock[0]


def test_a_pod_recorded_and_bound_while_the_reads_ran_is_not_repaired(h: Harness) -> None:
    """The mirror moves on while a pass reads Redis: a pod the reads did not find (recorded after them) but the
    mirror now shows bound is looked up again, not counted a second time by a locked repair pass."""
    h.apply(node("n1"))
    maintenance = Maintenance(h.feed.mirror, h.sched, RecordingHandlers(h.feed), threading.Lock(), lambda: 0.0)
    reads = maintenance._read()  # before the pod exists
    h.apply(pod("theirs", node_name="n1", scheduler="default-scheduler"))  # recorded and bound since
    assert maintenance._after_reads(reads) == Counter()
    assert maintenance.last_pass_quiet
    assert h.reserved() == {"ns/theirs": "bound"}


class SpyBinder:
    """The scheduler's binder, recording the gang reports the scheduler's reports send it."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.gangs: list[GangReport] = []

    def report(self, pods: list[PodReport], gangs: list[GangReport], now: float) -> None:
        self.gangs.extend(gangs)
        self.real.report(pods, gangs, now)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_podgroup_status_has_one_author_the_scheduler_gives_it_facts(h: Harness) -> None:
    """The scheduler's gang reports of a PodGroup gang go out as the feed's (gang_counts.py): counters and
    phase computed there, message and Event from the scheduler. Bound before the watch shows it, the gang is
    Scheduled with both pods counted (the scheduler's record), not Pending from the mirror's lag."""
    spy = SpyBinder(h.sched.binder)
    h.sched.binder = spy
    h.apply(node("n1"), volcano_podgroup("pg", 2), member("w0"), member("w1"))
    h.sched.step(0.0)
    sent = [g for g in spy.gangs if g.gang_key == "ns/pg"]
    assert sent and all(g.has_counts for g in sent)
    last = sent[-1]
    assert (last.phase, last.scheduled, last.event_reason) == ("Scheduled", 2, "GangScheduled")
    # The pods' own changes report again with the scheduler's last message kept.
    h.apply(*(member(f"w{i}", node_name="n1", phase="Running", kind="MODIFIED") for i in range(2)))
    assert (h.reports.gangs[-1].phase, h.reports.gangs[-1].message) == ("Running", last.message)


def test_a_gang_that_cannot_fit_is_pending_and_unschedulable_in_its_one_report(h: Harness) -> None:
    spy = SpyBinder(h.sched.binder)
    h.sched.binder = spy
    h.apply(node("n1", gpus=1), volcano_podgroup("pg", 2), member("w0"), member("w1"))
    h.sched.step(0.0)
    last = [g for g in spy.gangs if g.gang_key == "ns/pg"][-1]
    assert (last.phase, last.scheduled, last.unschedulable, last.has_counts) == ("Pending", 0, True, True)
    assert "Insufficient nvidia.com/gpu" in last.message


# -- queue calls the queue would find nothing to do with ---------------------------------------------------------


def test_a_pod_the_scheduler_took_from_the_queue_is_not_removed_from_it_when_bound(h: Harness) -> None:
    """The queue forgot a pod once its verdict (assumed, bound) was delivered with a pop: a remove when the
    binding is seen would find nothing. A pod the queue still holds when someone else binds it is removed."""
    h.sched.popped_check = PoppedPodCheck()
    h.sched.popped_check.attach(h.feed.mirror, lambda: True)
    h.apply(node("n1"), pod("ours", annotations=koord("g", "1")))
    h.sched.step(0.0)
    assert h.reserved() == {"ns/ours": "bound"}
    h.apply(pod("other", annotations=koord("g2", "1"), kind="ADDED"))  # queued, never popped
    h.apply(
        pod("ours", node_name="n1", annotations=koord("g", "1"), kind="MODIFIED"),
        pod("other", node_name="n1", annotations=koord("g2", "1"), kind="MODIFIED"),  # bound by someone else
    )
    assert h.queue.removes == [["ns/other"]]
    assert [e.key for e in h.queue.queue.pop(10, 0.0)] == []


def test_a_pod_handed_to_the_queue_again_is_removed_again(h: Harness) -> None:
    """After the queue forgot a pod, the feed handing it over again (its spec changed) means the queue
    holds it: its deletion removes it."""
    h.sched.popped_check = PoppedPodCheck()
    h.sched.popped_check.attach(h.feed.mirror, lambda: True)
    h.apply(node("n1", gpus=0), pod("p", annotations=koord("g", "1")))
    h.feed.mirror.verdicts_delivered(
        [Verdict(h.sched.popped_check.admit(h.queue.pop(10, 0.0).items, [])[0], Outcome.ASSUMED)]
    )
    assert h.feed.mirror.pod("ns/p").queue_forgot
    h.apply(pod("p", annotations={**koord("g", "1"), "changed": "yes"}, kind="MODIFIED"))
    assert not h.feed.mirror.pod("ns/p").queue_forgot
    h.apply(pod("p", kind="DELETED"))
    assert h.queue.removes == [["ns/p"]]


def test_a_new_gang_costs_no_activation_a_changed_one_does(h: Harness) -> None:
    """The scheduler learns a gang with its first pod, which joins the queue active: nothing to activate.
    A change to a gang whose pods wait may let them run: those are activated."""
    h.apply(node("n1"))
    h.apply(volcano_podgroup("pg", 2))
    h.apply(member("w0"))
    assert h.queue.dones == []
    assert [e.key for e in h.queue.queue.pop(10, 0.0)] == ["ns/w0"]
    h.apply(("podgroups.scheduling.volcano.sh", "MODIFIED", volcano_podgroup("pg", 1)[2]))
    assert h.queue.dones == [(0, ["ns/pg"])]


def test_after_rebuild_runs_once_the_first_batch_is_applied(h: Harness) -> None:
    """The scheduler service freezes its heap here (gc_tuning.freeze_heap): the hook must see the cluster as
    first listed already applied, and run once, not again for later batches."""
    seen: list[tuple[int, bool]] = []
    done = threading.Event()
    feed = ClusterFeed(
        h.sched,
        threading.Lock(),
        h.queue,
        h.reports,
        [],
        scheduler_name=NAME,
        now=lambda: 0.0,
        after_rebuild=lambda: (seen.append((len(feed.mirror.pods), feed.synced.is_set())), done.set()),
    )
    for event in (node("n1"), pod("a", node_name="n1"), pod("b")):
        feed._sink(*event)
    feed.start()
    try:
        assert done.wait(10)
        feed._sink(*pod("c"))
        wait_for(lambda: "ns/c" in feed.mirror.pods, 10, "the later batch applied")
    finally:
        feed.stop()
    assert seen == [(2, True)]


# -- a restart's rebuild does not write again what the PodGroups show ---------------------------------------

X_K8S_PODGROUPS = "podgroups.scheduling.x-k8s.io"


def x_k8s_podgroup(status: dict[str, Any] | None) -> tuple[str, str, dict[str, Any]]:
    obj: dict[str, Any] = {
        "kind": "PodGroup",
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "metadata": {"name": "pg", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"minMember": 2},
    }
    if status is not None:
        obj["status"] = status
    return (X_K8S_PODGROUPS, "ADDED", obj)


def x_k8s_member(name: str, phase: str = "Running", kind: str = "ADDED") -> tuple[str, str, dict[str, Any]]:
    labeled = pod(name, node_name="n1", phase=phase, kind=kind)
    labeled[2]["metadata"]["labels"] = {LABEL_X_K8S_PODGROUP: "pg"}
    return labeled


RUNNING_2 = {"phase": "Running", "scheduled": 2, "running": 2, "succeeded": 0, "failed": 0}


@pytest.mark.parametrize(
    ("status", "reported"),
    [
        (RUNNING_2, False),  # what an earlier scheduler wrote: nothing to write
        ({k: v for k, v in RUNNING_2.items() if k != "scheduled"}, False),  # upstream's CRD: no `scheduled`
        (None, True),  # never written: the rebuild writes it
        ({**RUNNING_2, "phase": "Scheduling"}, True),  # stale: written
        ({**RUNNING_2, "running": 1}, True),
    ],
)
def test_a_rebuild_writes_only_the_podgroup_statuses_that_differ(
    h: Harness, status: dict[str, Any] | None, reported: bool
) -> None:
    h.apply(node("n1"), x_k8s_podgroup(status), x_k8s_member("w0"), x_k8s_member("w1"))
    gangs = [(g.gang_key, g.phase, g.running) for g in h.reports.gangs]
    assert gangs == ([("ns/pg", "Running", 2)] if reported else [])
    # A change of its pods is reported as before, from the status the PodGroup showed.
    h.apply(x_k8s_member("w1", phase="Failed", kind="MODIFIED"))
    assert h.reports.gangs[-1].failed == 1


def test_a_volcano_podgroup_is_written_by_the_rebuild_as_before(h: Harness) -> None:
    group = volcano_podgroup("pg", 2)
    group[2]["status"] = {"phase": "Running", "running": 2, "succeeded": 0, "failed": 0}
    h.apply(node("n1"), group, *(member(f"w{i}", node_name="n1", phase="Running") for i in range(2)))
    assert [(g.gang_key, g.phase) for g in h.reports.gangs] == [("ns/pg", "Running")]


# -- pods are parsed before the batch, not under the scheduler's lock ---------------------------------------


def test_parse_early_parses_what_the_batch_would_and_nothing_more() -> None:
    from phalanx.cluster.intake_flow import parse_early
    from phalanx.intake.errors import IntakeError

    def early(event: tuple[str, str, dict[str, Any]], node_before: str | None = None) -> object:
        return parse_early(event[1], event[2], NAME, node_before)

    assert isinstance(early(pod("pending")), PodInfo), "a pending pod of ours"
    assert isinstance(early(pod("listed", node_name="n1")), PodInfo), "a pod first seen bound"
    assert isinstance(early(pod("theirs", node_name="n1", scheduler="other")), PodInfo), "any scheduler's"
    assert early(pod("b", node_name="n1", kind="MODIFIED"), "n1") is None, "a bound pod's status change"
    assert isinstance(early(pod("b", node_name="n1", kind="MODIFIED"), ""), PodInfo), "its binding"
    assert early(pod("theirs", scheduler="other")) is None, "another scheduler's pending pod"
    assert early(pod("done", node_name="n1", phase="Succeeded")) is None
    assert early(pod("gone", kind="DELETED")) is None
    bad = pod("bad")
    bad[2]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    refused = early(bad)
    assert isinstance(refused, IntakeError) and "cpu" in str(refused)


def test_a_watched_pod_is_parsed_outside_the_schedulers_lock(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A watch thread parses the pod as it hands it over, so the batch (which holds the lock the scheduling
    step takes) does not: under steady arrival the step waited for the feed's batches; on a restart 30,000
    bound pods were parsed inside the rebuild's batch."""
    from phalanx.cluster import intake_flow

    lock = threading.Lock()
    feed = ClusterFeed(h.sched, lock, h.queue, h.reports, [], scheduler_name=NAME, now=lambda: 0.0)
    held: list[bool] = []
    real = intake_flow.parse_pod

    def parse(obj: Any, **kw: Any) -> PodInfo:
        held.append(lock.locked())
        return real(obj, **kw)

    monkeypatch.setattr(intake_flow, "parse_pod", parse)
    for event in (node("n1"), pod("a", node_name="n1"), pod("b"), pod("c", annotations=koord("g", "1"))):
        feed._sink(*event)
    feed._apply(feed._drain(block=False), initial=True)
    assert held == [False, False, False], "each pod parsed once, none under the lock"
    assert "ns/a" in feed.mirror.pods and feed.mirror.pods["ns/a"].node == "n1"
    assert sorted(e.key for e in h.queue.queue.pop(10, 0.0)) == ["ns/b", "ns/c"]
    feed._sink(*pod("b", node_name="n1", kind="MODIFIED"))  # bound
    feed._sink(*pod("a", node_name="n1", kind="MODIFIED", phase="Running"))  # a status change: no parse
    feed._apply(feed._drain(block=False), initial=False)
    assert held == [False] * 4, "the binding parsed once more, outside the lock; the status change not at all"
    assert feed.mirror.pods["ns/b"].node == "n1"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def one_pod_of_three_held(h: Harness) -> Clock:
    """A feed holding gangs 50 ms, on a clock the test moves, and the first pod of a gang of three."""
    clock = Clock()
    h.start(gang_hold=0.05, now=clock)
    h.apply(node("n1"))
    h.apply(volcano_podgroup("pg", 3))
    h.apply(member("w0"))
    return clock


def test_a_new_gangs_first_pods_wait_for_its_minimum_and_go_to_the_queue_together(h: Harness) -> None:
    """A job controller creates a gang's pods one after the other: with a hold, the pods of a gang with
    fewer pods known than its minimum stay in the feed, and the queue gets the gang in one Add."""
    clock = one_pod_of_three_held(h)
    clock.t += 0.01
    h.apply(member("w1"))
    assert h.queue.adds == [] and len(h.queue.queue) == 0
    assert h.feed.outbox.next_release() == pytest.approx(1000.05)  # from the first pod held
    clock.t += 0.01
    h.apply(member("w2"))
    assert h.queue.adds == [["ns/w0", "ns/w1", "ns/w2"]]
    assert h.feed.outbox.next_release() is None
    h.apply(member("w3"))  # more than the minimum, once it is known: at once
    assert h.queue.adds[-1] == ["ns/w3"]


def test_pods_held_for_their_gang_go_alone_once_the_hold_ends(h: Harness) -> None:
    clock = Clock()
    h.start(gang_hold=0.05, now=clock)
    h.apply(node("n1"))
    h.apply(volcano_podgroup("pg", 3))
    h.apply(member("w0"), pod("plain"))  # a pod of no gang is never held
    assert h.queue.adds == [["ns/plain"]]
    clock.t += 0.049
    h.feed.outbox.flush(clock())
    assert h.queue.adds == [["ns/plain"]]
    clock.t += 0.002
    h.feed.outbox.flush(clock())
    assert h.queue.adds == [["ns/plain"], ["ns/w0"]]  # as without a hold: placed alone, waiting for the rest
    h.apply(("pods", "DELETED", member("w0")[2]))
    h.apply(member("w1"))  # the gang is held afresh for its new pods
    assert h.queue.adds[-1] == ["ns/w0"] and h.feed.outbox.next_release() == pytest.approx(clock() + 0.05)


def test_a_wall_clock_set_back_sends_held_pods_rather_than_holding_them_longer(h: Harness) -> None:
    clock = one_pod_of_three_held(h)
    clock.t -= 60.0
    h.feed.outbox.flush(clock())
    assert h.queue.adds == [["ns/w0"]]


def test_a_pod_deleted_while_held_never_reaches_the_queue(h: Harness) -> None:
    clock = one_pod_of_three_held(h)
    h.apply(("pods", "DELETED", member("w0")[2]))
    clock.t += 1.0
    h.feed.outbox.flush(clock())
    assert all("ns/w0" not in add for add in h.queue.adds) and h.feed.outbox.next_release() is None


def test_the_feeds_own_loop_sends_held_pods_when_their_hold_ends_without_another_event(store: StateStore) -> None:
    """No watch event comes after a lone pod: the feed's thread still wakes at the end of its hold."""
    h = Harness.__new__(Harness)
    h.store, h.queue, h.reports = store, CountingQueue(SchedulingQueue(QueueSettings(unschedulable_flush=0))), Reports()
    h.start(gang_hold=0.3, now=time.time)
    h.feed.start()
    try:
        assert h.feed.wait_synced(5)
        for e in (node("n1"), volcano_podgroup("pg", 3), member("w0")):
            h.feed._sink(*e)
        started = time.monotonic()
        wait_for(lambda: h.queue.adds == [["ns/w0"]], 5, "the held pod sent", interval=0.01)
        # not a second later, as when the queue is down and the outbox waits to try again
        assert 0.25 <= time.monotonic() - started < 0.9
    finally:
        h.feed.stop()


def test_a_feed_holding_pods_waits_for_events_only_until_their_hold_ends(h: Harness) -> None:
    h.start(gang_hold=0.05, now=time.time)
    h.apply(node("n1"))
    h.apply(volcano_podgroup("pg", 3))
    h.apply(member("w0"))
    started = time.monotonic()
    assert h.feed._drain(block=True) == []
    assert time.monotonic() - started < 0.15  # 0.2 s, the wait without pods held


class SyncRecordingQueue(CountingQueue):
    """Records, for each Add, whether the feed had already said it was synced (the loop may start then)."""

    def __init__(self, queue: SchedulingQueue) -> None:
        super().__init__(queue)
        self.feed: ClusterFeed | None = None
        self.synced_at_add: list[bool] = []

    def add(self, pods: list[PodInfo], now: float, only_missing: bool = False) -> None:
        assert self.feed is not None
        self.synced_at_add.append(self.feed.synced.is_set())
        super().add(pods, now, only_missing)


def test_a_rebuilds_pending_pods_past_the_first_reach_the_queue_after_the_loop_may_start(store: StateStore) -> None:
    """Handing 3,000 listed pods to the queue held the loop's start ~0.3 s: the rebuild sends the first
    FIRST_ADDS in the queue's order, says it is synced, then sends the rest, every one of them."""
    from phalanx.cluster.feed import FIRST_ADDS

    h = Harness.__new__(Harness)
    queue = SyncRecordingQueue(SchedulingQueue(QueueSettings(unschedulable_flush=0)))
    h.store, h.queue, h.reports = store, queue, Reports()
    h.start(now=time.time)
    queue.feed = h.feed
    n = FIRST_ADDS + 100
    names = [f"p{i:04d}" for i in range(n)]
    for e in (node("n1"), *(pod(name) for name in reversed(names))):  # listed in no particular order
        h.feed._sink(*e)
    h.feed.start()
    try:
        wait_for(lambda: sum(len(a) for a in queue.adds) == n, 10, "every pod in the queue", interval=0.01)
    finally:
        h.feed.stop()
    assert queue.adds[0] == [f"ns/{name}" for name in names[:FIRST_ADDS]]  # the first in the queue's order
    assert queue.synced_at_add[0] is False and all(queue.synced_at_add[1:])
    assert sorted(k for a in queue.adds for k in a) == [f"ns/{name}" for name in names]


def test_evictions_under_way_keep_the_loops_poll_short(h: Harness) -> None:
    """SchedulingLoop.poll_seconds: an idle scheduler may wait up to a second for the queue; one with a
    preemption under way must come round sooner, since an eviction refused or failed is asked again on the
    preemption's own backoff, which StepResult.next_wakeup does not carry."""
    h.apply(node("n1"), pod("p0"))
    h.sched.step(0.0)
    assert h.reserved() == {"ns/p0": "bound"} and not h.sched.unprompted_work()
    victim = Victim(pod_key="ns/p0", uid="uid-p0", node="n1", preemptor="ns/hi")
    h.sched.preemption.nominations["ns/hi"] = Nomination("ns/hi", 100, 1.0, {}, [victim])
    assert h.sched.unprompted_work()


class BrokenFollower:
    """A follower that fails on every event (a bug in it, or an object it cannot read)."""

    def follow(self, synced: list[threading.Event]) -> None:
        pass

    def pod_event(self, kind: str, obj: dict[str, Any]) -> None:
        raise ValueError("cannot read it")

    def node_event(self, kind: str, obj: dict[str, Any]) -> None:
        raise ValueError("cannot read it")


def test_the_binders_view_follows_the_feeds_pods_and_nodes_and_its_failure_costs_the_scheduler_nothing(
    h: Harness,
) -> None:
    from phalanx.backends.cluster_view import ClusterView

    view = ClusterView(None, NAME, own_watches=False)
    feed = ClusterFeed(h.sched, threading.Lock(), h.queue, h.reports, [], scheduler_name=NAME, follower=view)
    for event in (node("n1"), pod("mine", annotations=koord("g", "1")), pod("theirs", scheduler="default-scheduler")):
        feed._sink(*event)
    assert view.cached("ns/mine") and not view.cached("ns/theirs")  # ours only, as its own watch selected
    assert view.pod("ns/mine") is not None and view.pod("ns/mine").uid == "uid-mine"  # type: ignore[union-attr]
    feed._sink(*pod("mine", node_name="n1", kind="MODIFIED"))
    assert view.pod("ns/mine").node == "n1"  # type: ignore[union-attr]  # the binding followed
    feed._sink(*pod("mine", kind="DELETED"))
    assert not view.cached("ns/mine")
    assert [e[:2] for e in feed._drain(False)] == [("nodes", "ADDED")] + [("pods", k) for k in
        ("ADDED", "ADDED", "MODIFIED", "DELETED")]  # fmt: skip

    broken = ClusterFeed(
        h.sched, threading.Lock(), h.queue, h.reports, [], scheduler_name=NAME, follower=BrokenFollower()
    )
    broken._sink(*node("n2"))
    broken._sink(*pod("p"))
    assert [(c, o["metadata"]["name"]) for c, _, o, _ in broken._drain(False)] == [("nodes", "n2"), ("pods", "p")]
