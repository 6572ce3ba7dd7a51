"""The snapshot's index of which pods hold capacity where: what affinity, spread and job plugins read."""

from __future__ import annotations

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
