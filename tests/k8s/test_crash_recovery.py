"""Crash safety against a real kube-apiserver: a gang whose binding a crashed binder started is finished,
Redis emptied while the scheduler runs is rebuilt, a batch of events that failed to apply is not lost,
and reconciliation repairs drift between Redis and the API server.

The processes run in this test process (tests/k8s/conftest.py); the separate-process kills are in
test_chaos.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from waiting import recording_calls, wait_for

from phalanx.model.objects import PodInfo
from phalanx.state.pod_state import PodState
from phalanx.state.txn import Txn
from phalanx.testing.apiserver import APISERVER_MISSING_REASON, apiserver_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not apiserver_available(), reason=APISERVER_MISSING_REASON),
]

GPU = "nvidia.com/gpu"
BIND = 20.0


def _states(phalanx, ns: str) -> dict[str, tuple[str, str]]:
    return {k: v for k, v in phalanx.reserved().items() if k.startswith(f"{ns}/")}


def _bound_gang(cluster, phalanx, ns: str, gang: str, size: int) -> list[str]:  # type: ignore[no-untyped-def]
    """A gang created, bound in the API server and recorded as bound in Redis."""
    names = cluster.koord_pods(ns, gang, size, min_available=size)
    wait_for(lambda: cluster.all_bound(ns, names), BIND, f"gang {gang} bound")
    wait_for(
        lambda: {s for k, (_, s) in _states(phalanx, ns).items() if k.split("/", 1)[1] in names} == {"bound"},
        BIND,
        f"gang {gang} recorded as bound",
    )
    return names


def test_a_gang_half_bound_by_a_crashed_binder_is_finished_not_released(cluster, phalanx) -> None:
    """The binder dies after recording its intent and writing one of three bindings: the next binder rolls
    the batch forward from Redis; nothing is released, nothing is bound twice, the gang ends whole."""
    ns = cluster.namespace()
    cluster.node("n1", gpus=4)
    address = phalanx.stop_binder()  # binds now fail: the scheduler keeps the decided gang pending
    names = cluster.koord_pods(ns, "train", 3, min_available=3)
    wait_for(lambda: len(_states(phalanx, ns)) == 3, BIND, "the gang reserved")
    reserved = _states(phalanx, ns)
    # What a binder that crashed mid-batch leaves: the intent recorded, one binding written.
    keys = sorted(reserved)
    phalanx.store.must_apply(
        Txn(expect=[[k, "assumed", reserved[k][0]] for k in keys], set_state=[[k, PodState.BINDING] for k in keys])
    )
    first = keys[0].split("/", 1)[1]
    with recording_calls(phalanx.scheduler[1].scheduler.binder, "bind") as attempts:
        cluster.bind(ns, first, reserved[keys[0]][0])
        wait_for(
            lambda: _states(phalanx, ns)[keys[0]] == (reserved[keys[0]][0], "bound"),
            BIND,
            "the feed to record the binding it saw",
        )
        # The scheduler sent the gang to the dead binder twice more: with no binder, nothing may be released.
        wait_for(lambda: len(attempts) >= 2, BIND, "the scheduler's bind retries")
    after = _states(phalanx, ns)
    assert {s for k, (_, s) in after.items() if k != keys[0]} == {PodState.BINDING}
    phalanx.start_binder(address)
    bound = wait_for(lambda: cluster.all_bound(ns, names), BIND, "the whole gang bound")
    assert bound == {k.split("/", 1)[1]: node for k, (node, _) in reserved.items()}  # where it was reserved
    wait_for(lambda: {s for _, s in _states(phalanx, ns).values()} == {"bound"}, BIND, "recorded as bound")
    assert phalanx.store.load_used()[(reserved[keys[0]][0], GPU)] == 3000


def test_a_status_report_the_binder_was_down_for_is_written_once_it_is_back(cluster, phalanx) -> None:
    """The scheduler's verdict on a pod travels to the binder on its report stream, which writes it to the
    API server. With the binder gone the report stays with the scheduler (its stream broken); a new binder
    process on the same address gets it on a new stream."""
    ns = cluster.namespace()
    cluster.node("n1", gpus=1)
    address = phalanx.stop_binder()
    with recording_calls(phalanx.scheduler[1].scheduler.binder, "report") as reports:
        cluster.pod(ns, "big", gpus=4)  # fits nowhere: the scheduler reports it unschedulable
        wait_for(
            lambda: any(f"{ns}/big" in {p.pod_key for p in pods} for pods, _, _ in reports),
            BIND,
            "the scheduler's report on the pod",
        )
        time.sleep(1.0)
        assert cluster.condition(ns, "big") == {}  # nobody wrote it: the binder is down
        phalanx.start_binder(address)
        # Sent again with the scheduler's next round (the pod's next try, within the queue's 5 s flush of
        # unschedulable pods here), once the channel has reconnected (gRPC's backoff, up to 5 s).
        wait_for(lambda: cluster.condition(ns, "big").get("reason") == "Unschedulable", 3 * BIND, "the report written")
    # Its Event goes on connections of its own, not waited for: it may follow the condition by a moment.
    wait_for(lambda: "FailedScheduling" in cluster.reasons(ns, "big"), BIND, "the report's Event written")


def test_redis_emptied_while_the_scheduler_runs_is_rebuilt(cluster, phalanx) -> None:
    ns = cluster.namespace()
    node = cluster.node("n1", gpus=4)
    held = _bound_gang(cluster, phalanx, ns, "held", 3)
    phalanx.store.wipe()  # Redis lost everything; the scheduler keeps running
    wait_for(lambda: phalanx.store.load_used().get((node, GPU)) == 3000, BIND, "bound pods counted again")
    assert phalanx.store.load_nodes()
    # Only 1 GPU is free: a 2-pod gang must wait (over-commit if the rebuild missed the bound pods) ...
    late = cluster.koord_pods(ns, "late", 2, min_available=2)
    wait_for(lambda: cluster.judged(ns, late), BIND, "the scheduler's verdict on the late gang")
    assert not any(cluster.node_of(ns, n) for n in late)
    # ... and bind once the first gang is gone.
    for name in held:
        cluster.delete_pod(ns, name)
    wait_for(lambda: cluster.all_bound(ns, late), BIND, "the waiting gang bound after the rebuild")


@contextmanager
def failing_once(obj: Any, method: str) -> Iterator[list[Any]]:
    """`obj.method` raises once, as if Redis were unreachable, then works; yields the failed calls' args."""
    original = getattr(obj, method)
    failures: list[Any] = []

    def fail_once(arg: Any) -> Any:
        if not failures:
            failures.append(arg)
            raise ConnectionError("redis unreachable")
        return original(arg)

    setattr(obj, method, fail_once)
    try:
        yield failures
    finally:
        setattr(obj, method, original)


def test_a_batch_of_events_that_failed_to_apply_is_not_lost(cluster, phalanx) -> None:
    """Applying a new node fails once (Redis unreachable, say): reconciliation applies it from the feed's
    view, so the pods waiting for it still bind."""
    ns = cluster.namespace()
    with failing_once(phalanx.scheduler[1].scheduler, "upsert_nodes") as failures:
        cluster.node("n1", gpus=2)
        wait_for(lambda: failures, BIND, "the node's batch failed")
        names = cluster.koord_pods(ns, "train", 2, min_available=2)
        wait_for(lambda: cluster.all_bound(ns, names), BIND, "the gang bound on the node whose batch failed")


def test_gang_specs_of_a_batch_that_failed_to_apply_are_sent_again(cluster, phalanx) -> None:
    """The batch declaring a gang fails (Redis killed as the feed applies it): the feed counted the spec
    as sent, so without a resend the gang would wait forever as "not declared yet"."""
    ns = cluster.namespace()
    cluster.node("n1", gpus=4)
    with failing_once(phalanx.scheduler[1].scheduler, "upsert_gangs") as failures:
        names = cluster.koord_pods(ns, "train", 3, min_available=3)
        wait_for(lambda: failures, BIND, "the gang's batch failed")
        wait_for(lambda: cluster.all_bound(ns, names), BIND, "the gang declared again and bound")
        totals = phalanx.scheduler[2].maintenance.totals
        wait_for(lambda: totals["gang specs re-sent"] >= 1, BIND, "the re-send counted")


def test_reconciliation_repairs_stale_records_and_usage(cluster, phalanx) -> None:
    ns = cluster.namespace()
    node = cluster.node("n1", gpus=2)
    names = _bound_gang(cluster, phalanx, ns, "train", 2)
    # Drift: the record of a pod that does not exist (capacity nobody will ever give back), and usage
    # that does not match the records.
    ghost = PodInfo(ns, "ghost", uid="ghost-uid", requests={"cpu": 4000})
    phalanx.store.must_apply(Txn(reserve=[phalanx.store.reserve_entry(ghost, node)]))
    phalanx.store.redis.hincrby(phalanx.store.keys.used, f"{node}\x1fcpu", 777)
    feed = phalanx.scheduler[2]
    wait_for(lambda: f"{ns}/ghost" not in phalanx.reserved(), BIND, "the stale record released")
    # Each pod of the gang asks 100m cpu: the ghost's 4 CPUs and the 777 stray milli-CPUs are gone.
    wait_for(lambda: phalanx.store.load_used().get((node, "cpu")) == 200, BIND, "usage repaired")
    assert phalanx.store.load_used()[(node, GPU)] == 2000
    # The pass counts its repairs after writing them, so the counts may trail the repaired state a moment.
    totals = feed.maintenance.totals
    wait_for(lambda: totals["stale-record"] >= 1 and totals["usage"] >= 1, BIND, "the repairs counted")
    # The bound gang's records were never touched.
    assert {k: s for k, (_, s) in _states(phalanx, ns).items()} == {f"{ns}/{n}": "bound" for n in names}


def test_redis_restarted_with_its_data_scheduling_goes_on(apiserver, cluster, tid) -> None:
    """redis-server killed and restarted (append-only file, as the chart runs it) while a gang waits and
    while new pods are created: events that failed during the outage are applied afterwards, the
    waiting gang keeps its reservations and binds, and Redis agrees with the API server at the end."""
    from conftest import Phalanx

    from phalanx.testing.redis_server import RedisServer

    redis = RedisServer(appendonly=True).start()
    stack = Phalanx(apiserver, redis.url, f"aof-{tid}", cluster.scheduler_name).start()
    try:
        ns = cluster.namespace()
        cluster.node("n1", gpus=4)
        first = cluster.koord_pods(ns, "train", 2, min_available=3)
        wait_for(lambda: len(_states(stack, ns)) == 2, BIND, "two pods reserved")
        time.sleep(1.2)  # appendfsync everysec: the reservations reach the file
        redis.kill()
        during = cluster.koord_pods(ns, "train", 1, min_available=3, start=2)  # created while Redis is down
        solo = cluster.pod(ns, "solo", gpus=1)["metadata"]["name"]
        time.sleep(2)
        redis.start()
        names = first + during
        wait_for(lambda: cluster.all_bound(ns, names), 30, "the gang bound after the restart")
        wait_for(lambda: cluster.node_of(ns, solo), 30, "the pod created during the outage bound")
        wait_for(
            lambda: {s for _, s in _states(stack, ns).values()} == {"bound"} and len(_states(stack, ns)) == 4,
            30,
            "Redis records every binding",
        )
        assert stack.store.load_used()[(cluster.nodes[0], GPU)] == 4000
    finally:
        stack.stop()
        redis.stop()


def test_pods_that_finished_or_vanished_while_the_scheduler_was_down_free_their_capacity(cluster, phalanx) -> None:
    ns = cluster.namespace()
    node = cluster.node("n1", gpus=2)
    names = _bound_gang(cluster, phalanx, ns, "train", 2)
    phalanx.stop_scheduler()
    cluster.set_phase(ns, names[0], "Succeeded")
    cluster.delete_pod(ns, names[1])
    phalanx.start_scheduler()
    assert _states(phalanx, ns) == {}  # released by the rebuild, before scheduling starts
    assert not phalanx.store.load_used().get((node, GPU))
    late = cluster.koord_pods(ns, "late", 2, min_available=2)
    wait_for(lambda: cluster.all_bound(ns, late), BIND, "the freed GPUs used again")


def test_a_gangs_first_pods_held_by_a_scheduler_that_stops_are_scheduled_by_the_next(cluster, phalanx) -> None:
    """The feed holds a new gang's first pods until its minimum is created (--gang-hold). Held, they are
    only in the scheduler's memory: not in the queue, not in Redis. The scheduler stopping then loses
    nothing: the next one lists them from the API server, and the gang binds whole once complete."""
    ns = cluster.namespace()
    cluster.node("n1", gpus=4)
    phalanx.stop_scheduler()
    phalanx.start_scheduler("--gang-hold", "5")
    names = cluster.koord_pods(ns, "train", 2, min_available=3)
    feed = phalanx.scheduler[2]
    wait_for(lambda: feed.outbox.next_release() is not None, BIND, "the first two pods held")
    assert _states(phalanx, ns) == {} and feed.outbox.pending()  # staged for the queue, not sent
    phalanx.stop_scheduler()
    phalanx.start_scheduler()
    rest = cluster.koord_pods(ns, "train", 1, min_available=3, start=2)
    wait_for(lambda: cluster.all_bound(ns, names + rest), BIND, "the gang bound whole")


def test_a_reservation_redis_lost_is_placed_again_as_a_member_of_its_gang(cluster, phalanx) -> None:
    """Redis loses one reservation of a waiting gang (its last second before a crash, say): reconciliation
    reloads the scheduler and hands the pod to the queue again, resolved to its gang, so it waits with the
    gang instead of binding alone (it was once handed over without its gang, and bound pod by pod)."""
    ns = cluster.namespace()
    cluster.node("n1", gpus=4)
    names = cluster.koord_pods(ns, "train", 2, min_available=3)
    wait_for(lambda: len(_states(phalanx, ns)) == 2, BIND, "two pods reserved")
    lost = f"{ns}/{names[1]}"
    phalanx.store.must_apply(Txn(release=[lost]))
    phalanx.store.redis.srem(phalanx.store.keys.gang_assumed(f"{ns}/train"), lost)
    assumed = phalanx.store.keys.gang_assumed(f"{ns}/train")
    wait_for(
        lambda: lost in _states(phalanx, ns) and lost in phalanx.store.redis.smembers(assumed),
        BIND,
        "the lost pod reserved again, as a member of its gang",
    )
    assert not any(cluster.node_of(ns, n) for n in names)  # still waiting for its gang
    assert {s for _, s in _states(phalanx, ns).values()} == {"assumed"}
    rest = cluster.koord_pods(ns, "train", 1, min_available=3, start=2)
    wait_for(lambda: cluster.all_bound(ns, names + rest), BIND, "the gang bound whole")


def test_a_restarted_scheduler_does_not_write_again_the_podgroup_status_it_wrote(cluster, phalanx) -> None:
    """A restart (or a new leader) rebuilds every gang; a PodGroup whose status already shows what its pods
    imply is not patched again (10,000 writes at 10,000 gangs, while the API server serves the lists)."""
    from phalanx.cluster.feed import ClusterFeed
    from phalanx.model.keys import GROUP_X_K8S, LABEL_X_K8S_PODGROUP

    ns = cluster.namespace()
    cluster.node("n1", gpus=2)
    cluster.podgroup(GROUP_X_K8S, ns, "pg", 2)
    cluster.podgroup(GROUP_X_K8S, ns, "stale", 1)
    names = [f"pg-{i}" for i in range(2)]
    for name in names:
        cluster.pod(ns, name, gpus=0, labels={LABEL_X_K8S_PODGROUP: "pg"})
    cluster.pod(ns, "stale-0", gpus=0, labels={LABEL_X_K8S_PODGROUP: "stale"})
    wait_for(lambda: cluster.all_bound(ns, [*names, "stale-0"]), BIND, "the gangs bound")
    for pg in ("pg", "stale"):
        wait_for(lambda: cluster.podgroup_status(GROUP_X_K8S, ns, pg).get("phase"), BIND, f"{pg}'s status")
    phalanx.stop_scheduler()
    cluster.set_phase(ns, "stale-0", "Running")  # while no scheduler watches: its PodGroup's status is stale now
    with recording_calls(ClusterFeed, "_report_status") as calls:
        phalanx.start_scheduler()  # returns once the rebuild is applied
    reported = sorted(r.gang_key for _, gangs in calls for r in gangs)
    assert reported == [f"{ns}/stale"]  # the status that changed, and only that one
