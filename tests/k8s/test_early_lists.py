"""The cluster feed's lists started at launch (cluster/early_lists.py), on a real kube-apiserver: what they held
is handed to the adopting feed in order and later events go straight to it, without a second list; lists
dropped (a standby, or none adopted them in time) stop and are not adopted. The scheduler as the k8s suite runs
it (conftest's Phalanx.start_scheduler) and the leader-election replicas start them as main() does."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import Cluster
from waiting import wait_for

from phalanx.cluster.early_lists import EarlyLists
from phalanx.cluster.watched import Event, collections
from phalanx.kube.connection import connect
from phalanx.model.objects import PodInfo
from phalanx.testing.apiserver import APISERVER_MISSING_REASON, LocalApiServer, apiserver_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not apiserver_available(), reason=APISERVER_MISSING_REASON),
]


@pytest.fixture
def early(apiserver: LocalApiServer, cluster: Cluster) -> Iterator[EarlyLists]:
    lists = EarlyLists(collections(connect(str(apiserver.kubeconfig_path))), cluster.scheduler_name)
    yield lists
    lists.drop("the test ended")
    lists.stop.set()
    for w in lists.watchers:
        w.interrupt()


def pods_of(events: list[Event], namespace: str) -> list[tuple[str, str]]:
    return [
        (kind, obj["metadata"]["name"])
        for collection, kind, obj, _ in events
        if collection == "pods" and obj["metadata"].get("namespace") == namespace
    ]


def test_held_events_go_to_the_adopting_feed_in_order_and_later_ones_to_its_sink(
    cluster: Cluster, early: EarlyLists
) -> None:
    ns = cluster.namespace()
    for name in ("a", "b", "c"):
        cluster.pod(ns, name)
    early.start()
    wait_for(lambda: all(w.synced.is_set() for w in early.watchers), 20, "the early lists in")
    cluster.pod(ns, "d")  # after the list: its watch delivers it, still before any feed exists
    held: list[Event] = []
    wait_for(lambda: early.held() and ("ADDED", "d") in pods_of(list(early._held), ns), 20, "pod d held")

    later: list[tuple[str, str, str]] = []
    adopted = early.adopt(held.append, lambda c, k, o: later.append((c, k, o["metadata"]["name"])))

    assert adopted is not None and adopted.watchers is early.watchers and adopted.stop is early.stop
    assert early.adopted and not early.dropped and early.held() == 0
    # The list's pods (in the API server's order: by name), then the watch's; each parsed as the feed parses
    # a pending pod of its scheduler's on the watch thread.
    assert pods_of(held, ns) == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c"), ("ADDED", "d")]
    assert all(isinstance(e[3], PodInfo) for e in held if e[0] == "pods" and e[2]["metadata"]["namespace"] == ns)
    assert "containers" not in next(e[2] for e in held if e[0] == "pods" and e[2]["metadata"]["name"] == "a")["spec"]

    cluster.pod(ns, "e")
    wait_for(lambda: ("pods", "ADDED", "e") in later, 20, "pod e handed to the feed's sink")
    assert all(w.relists == 0 for w in early.watchers), "adopted watches listed again"
    assert early.adopt(held.append, lambda c, k, o: None) is None  # adopted once


def test_dropped_lists_stop_forget_what_they_held_and_are_not_adopted(cluster: Cluster, early: EarlyLists) -> None:
    ns = cluster.namespace()
    cluster.pod(ns, "a")
    early.start()
    wait_for(lambda: early.held() > 0 and all(w.synced.is_set() for w in early.watchers), 20, "the early lists in")

    early.drop("the Lease is held by another")

    assert early.dropped == "the Lease is held by another" and early.held() == 0
    for w in early.watchers:
        w.join(10)
        assert w._thread is not None and not w._thread.is_alive(), f"{w.collection.name} still watching"
    cluster.pod(ns, "b")
    assert early.held() == 0
    assert early.adopt(lambda e: None, lambda c, k, o: None) is None


def test_lists_no_feed_adopts_in_time_are_dropped(apiserver: LocalApiServer, cluster: Cluster) -> None:
    lists = EarlyLists(collections(connect(str(apiserver.kubeconfig_path))), cluster.scheduler_name, keep_s=0.5)
    lists.start()
    wait_for(lambda: bool(lists.dropped), 10, "the early lists dropped")
    assert lists.dropped == "no feed adopted them within 0.5s"
    assert lists.adopt(lambda e: None, lambda c, k, o: None) is None
