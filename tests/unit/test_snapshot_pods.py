"""The snapshot's index of which pods hold capacity where: what affinity, spread and job plugins read."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np
from builders import gang_spec, model_node, model_pod
from local_scheduler import LocalScheduler

from phalanx.framework.snapshot import Snapshot
from phalanx.plugins.registry import in_tree_framework
from phalanx.scheduling.scheduler import GangScheduler, SchedulerSettings
from phalanx.state.store import StateStore


def test_reserve_with_a_pod_tracks_it_and_taking_it_back_forgets_it() -> None:
    snap = Snapshot()
    snap.set_nodes([model_node("a", gpus=2), model_node("b", gpus=2)], {})
    w0, w1 = model_pod("w0", "train", gpus=1), model_pod("w1", "train", gpus=1)
    snap.reserve(0, w0.requests, pod=w0)
    snap.reserve(1, w1.requests, pod=w1)
    assert list(snap.pods_on(0)) == ["default/w0"]
    assert snap.gang_pod_counts("default/train").tolist() == [1, 1]
    snap.reserve(0, w0.requests, sign=-1, pod=w0)
    assert snap.pods_on(0) == {}
    assert snap.gang_pod_counts("default/train").tolist() == [0, 1]
    # Rows are rebuilt (a node added sorts before the others): the index follows the names.
    snap.upsert_nodes([model_node("0-first", gpus=1)])
    assert snap.gang_pod_counts("default/train").tolist() == [0, 0, 1]
    snap.remove_nodes(["b"])
    assert snap.gang_pod_counts("default/train").tolist() == [0, 0]
    assert not np.any(snap.used)


def test_a_restarted_scheduler_knows_where_the_pods_are(store: StateStore) -> None:
    h = LocalScheduler(store)
    h.sched.upsert_nodes([model_node("n1", gpus=4), model_node("n2", gpus=4)])
    h.sched.upsert_gangs([gang_spec("g", 3, wait=100)])
    h.queue.add([model_pod(f"w{i}", "g", gpus=1) for i in range(2)], 0)
    h.sched.step(0)
    before = {k: sorted(v) for k, v in h.sched.snapshot.pods_by_node.items()}
    assert sum(len(v) for v in before.values()) == 2
    fresh = GangScheduler(store, h.queue, h.binder, in_tree_framework(), SchedulerSettings(default_wait_seconds=60))
    fresh.recover(1)
    assert {k: sorted(v) for k, v in fresh.snapshot.pods_by_node.items()} == before
    assert int(fresh.snapshot.gang_pod_counts("default/g").sum()) == 2


def test_a_gpu_pod_found_bound_occupies_devices_so_none_are_handed_out_twice(store: StateStore) -> None:
    """A pod already bound with 6 of a node's 8 GPUs (found on a restart, or bound by another scheduler)
    takes 6 devices: a 4-GPU gang then finds no room there, and a 2-GPU one gets the other two devices."""
    h = LocalScheduler(store)
    h.sched.upsert_nodes([model_node("n0", gpus=8)])
    found = replace(model_pod("found", gpus=6), node_name="n0")
    h.sched.add_bound_pods([found])
    h.sched.upsert_gangs([gang_spec("big", 1, wait=100), gang_spec("small", 1, wait=100)])
    h.queue.add([model_pod("big-0", "big", gpus=4), model_pod("small-0", "small", gpus=2)], 0)
    h.sched.step(0)
    assert h.bound() == {"default/small-0": "n0"}
    devices = {r: v for r, v in store.load_used().items() if "gpu-device" in r[1]}
    assert sum(devices.values()) == 8000 and all(v == 1000 for v in devices.values())


def test_a_restarted_scheduler_counts_the_same_tenant_shares(store: StateStore) -> None:
    """DRF shares are not stored: a scheduler that dies and restarts recounts them from Redis's records of
    the pods it reserved, so the queue's next pop is ordered as before the crash."""
    h = LocalScheduler(store)
    h.sched.upsert_nodes([model_node("n1", gpus=8), model_node("n2", gpus=8)])
    h.sched.upsert_gangs([gang_spec("a", 2, wait=100, ns="team-a"), gang_spec("b", 1, wait=100, ns="team-b")])
    h.queue.add([model_pod(f"a{i}", "a", gpus=4, ns="team-a") for i in range(2)], 0)
    h.queue.add([model_pod("b0", "b", gpus=2, ns="team-b")], 0)
    h.sched.step(0)
    before = h.sched.snapshot.tenant_shares()
    assert before == {"team-a": 0.5, "team-b": 0.125}
    fresh = GangScheduler(store, h.queue, h.binder, in_tree_framework(), SchedulerSettings(default_wait_seconds=60))
    fresh.recover(1)
    assert fresh.snapshot.tenant_shares() == before


def test_share_capacity_follows_the_nodes() -> None:
    """Summed once per node change (it is asked before every pop), and summed again after one."""
    snap = Snapshot()
    snap.set_nodes(in_tree_framework().prepare_nodes([model_node("a", gpus=8, cpu=64)]), {})
    assert snap.share_capacity()["gpu"] == 8000
    snap.upsert_nodes(in_tree_framework().prepare_nodes([model_node("b", gpus=4, cpu=32)]))
    assert snap.share_capacity() == {"cpu": 96_000, "memory": snap.share_capacity()["memory"], "gpu": 12_000}
    snap.remove_nodes(["a"])
    assert snap.share_capacity()["gpu"] == 4000


def test_bound_pods_found_in_bulk_go_to_redis_in_bounded_transactions(store: StateStore, monkeypatch: Any) -> None:
    """A rebuild finding 30,000 bound pods built one transaction's arguments for all of them (140 MB at that
    scale): they go in transactions of BOUND_PODS_PER_TXN, each to Redis then to memory, GPU devices taken
    across them as in one."""
    from phalanx.scheduling import cluster_state

    monkeypatch.setattr(cluster_state, "BOUND_PODS_PER_TXN", 2)
    h = LocalScheduler(store)
    applied: list[int] = []
    must_apply = store.must_apply
    monkeypatch.setattr(store, "must_apply", lambda txn: applied.append(len(txn.facts)) or must_apply(txn))
    h.sched.upsert_nodes([model_node("n0", gpus=8)])
    found = [replace(model_pod(f"f{i}", "g", gpus=1), node_name="n0") for i in range(5)]
    h.sched.add_bound_pods(found)
    assert applied == [2, 2, 1]
    assert sorted(store.load_pods()) == [f"default/f{i}" for i in range(5)]
    devices = {r: v for r, v in store.load_used().items() if "gpu-device" in r[1]}
    assert len(devices) == 5 and all(v == 1000 for v in devices.values())  # five distinct devices


def test_the_next_of_those_transactions_is_built_while_one_is_written(store: StateStore, monkeypatch: Any) -> None:
    """Redis writes one transaction while the scheduler builds the next (each has a core of its own); memory
    takes each transaction's pods once Redis has them, and the result is that of one transaction after the
    other."""
    from phalanx.scheduling import cluster_state

    monkeypatch.setattr(cluster_state, "BOUND_PODS_PER_TXN", 2)
    h = LocalScheduler(store)
    h.sched.upsert_nodes([model_node("n0", gpus=8)])
    reads: list[list[str]] = []
    get_pods, must_apply = store.get_pods, store.must_apply
    monkeypatch.setattr(store, "get_pods", lambda keys: reads.append(list(keys)) or get_pods(keys))
    built_meanwhile: list[int] = []

    def slow_write(txn: Any) -> Any:
        deadline = time.monotonic() + 2.0
        while len(reads) <= len(built_meanwhile) + 1 and time.monotonic() < deadline:
            time.sleep(0.005)
        built_meanwhile.append(len(reads))
        return must_apply(txn)

    monkeypatch.setattr(store, "must_apply", slow_write)
    found = [replace(model_pod(f"f{i}", "g", gpus=1), node_name="n0") for i in range(5)]
    h.sched.add_bound_pods(found)
    assert built_meanwhile[:2] == [2, 3]  # the 2nd and 3rd were read and built while the 1st and 2nd were written
    assert sorted(store.load_pods()) == [f"default/f{i}" for i in range(5)]
    assert set(h.sched.bound) == {p.key for p in found}
    devices = {r: v for r, v in store.load_used().items() if "gpu-device" in r[1]}
    assert len(devices) == 5 and all(v == 1000 for v in devices.values())


def test_a_scheduler_dying_between_two_of_those_transactions_leaves_a_redis_the_next_one_completes(
    store: StateStore, monkeypatch: Any
) -> None:
    """The rebuild's first transactions are in Redis, the rest are not; the next scheduler recovers from
    Redis, is handed the same bound pods by its own rebuild, and records only those missing: every pod
    once, every GPU device held once."""
    from phalanx.scheduling import cluster_state

    monkeypatch.setattr(cluster_state, "BOUND_PODS_PER_TXN", 2)
    found = [replace(model_pod(f"f{i}", "g", gpus=1), node_name="n0") for i in range(5)]
    first = LocalScheduler(store)
    first.sched.upsert_nodes([model_node("n0", gpus=8)])
    must_apply, calls = store.must_apply, []

    def dies_at_the_second(txn: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise ConnectionError("the process died here")
        return must_apply(txn)

    monkeypatch.setattr(store, "must_apply", dies_at_the_second)
    try:
        first.sched.add_bound_pods(found)
    except ConnectionError:
        pass
    assert sorted(store.load_pods()) == ["default/f0", "default/f1"]
    monkeypatch.setattr(store, "must_apply", must_apply)
    second = LocalScheduler(store)
    second.sched.recover(0.0)
    second.sched.add_bound_pods(found)
    assert sorted(store.load_pods()) == [f"default/f{i}" for i in range(5)]
    devices = {r: v for r, v in store.load_used().items() if "gpu-device" in r[1]}
    assert len(devices) == 5 and all(v == 1000 for v in devices.values())
    gpus = {r: v for r, v in store.load_used().items() if r[1] == "nvidia.com/gpu"}
    assert gpus == {("n0", "nvidia.com/gpu"): 5000}
