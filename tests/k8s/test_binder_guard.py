"""The binder does not trust what it is sent: hostile assignments and reports, driven straight into the
batch binder and the Kubernetes backend, checked against a real kube-apiserver.

Each hostile case is one the API server itself lets through (it binds any pod to any node name, and lets
the binder patch any pod or PodGroup), so each assertion fails without the binder's own checks. The
reservations in Redis are made by the test: what a wrong or compromised scheduler could have written.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from waiting import wait_for

from phalanx.backends.cluster_view import ClusterView
from phalanx.backends.kubernetes import KubernetesBackend
from phalanx.binding.batch_binder import BOUND, FAILED, GONE, ROLLED_BACK, BatchBinder
from phalanx.binding.lock import FencedLock
from phalanx.model.binding import Assignment, GangReport, PodReport
from phalanx.model.keys import GROUP_X_K8S, KOORD_TIMEOUT, LABEL_X_K8S_PODGROUP
from phalanx.model.objects import NodeInfo, PodInfo
from phalanx.state.store import StateStore, Txn
from phalanx.testing.apiserver import APISERVER_MISSING_REASON, apiserver_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not apiserver_available(), reason=APISERVER_MISSING_REASON),
]

GPU = "nvidia.com/gpu"
SOURCE_X_K8S = f"podgroup/{GROUP_X_K8S}"


class Binder:
    """A KubernetesBackend for the test's scheduler name, and a BatchBinder over it and the test's Redis."""

    def __init__(self, apiserver: Any, cluster: Any, store: StateStore) -> None:
        self.cluster = cluster
        self.store = store
        self.backend = KubernetesBackend(apiserver.api_client(), component=cluster.scheduler_name)
        self.batch = BatchBinder(store, self.backend, FencedLock(store.redis, store.keys))

    def reserve(self, pods: dict[str, str], nodes: dict[str, str], gang: str = "") -> list[Assignment]:
        """Reserves pods (key -> uid) on nodes (key -> node) in Redis; their assignments."""
        infos = [
            PodInfo(*key.split("/", 1), uid=uid, requests={"cpu": 100, "pods": 1000}, gang=gang)
            for key, uid in pods.items()
        ]
        self.store.put_nodes([NodeInfo(n, {"cpu": 64_000, "pods": 110_000}) for n in set(nodes.values())])
        self.store.must_apply(Txn(reserve=[self.store.reserve_entry(p, nodes[p.key]) for p in infos]))
        return [Assignment(pod_key=p.key, uid=p.uid, node=nodes[p.key], gang=gang) for p in infos]

    def bind(self, assignments: list[Assignment], all_or_nothing: bool) -> dict[str, tuple[int, str]]:
        results, _ = self.batch.bind(assignments, all_or_nothing, time.time())
        return {r.pod_key: (r.status, r.message) for r in results}

    def report(self, pods: list[PodReport], gangs: list[GangReport] | None = None) -> None:
        self.backend.report(pods, gangs or [], time.time())
        assert self.backend.flush()


@pytest.fixture
def binder(apiserver: Any, cluster: Any, store: StateStore) -> Iterator[Binder]:
    b = Binder(apiserver, cluster, store)
    yield b
    b.backend.close()
    store.wipe()


def uid(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["uid"])


def test_a_pod_of_another_scheduler_is_not_bound(cluster, binder) -> None:
    mine, theirs = cluster.namespace("mine"), cluster.namespace("theirs")
    node = cluster.node("n1")
    pods = {
        f"{mine}/ok": uid(cluster.pod(mine, "ok", gpus=0)),
        f"{theirs}/victim": uid(cluster.pod(theirs, "victim", gpus=0, scheduler="default-scheduler")),
    }
    results = binder.bind(binder.reserve(pods, dict.fromkeys(pods, node)), False)

    assert results[f"{mine}/ok"][0] == BOUND and cluster.node_of(mine, "ok") == node
    status, message = results[f"{theirs}/victim"]
    assert status == FAILED
    assert message == (
        f'pod {theirs}/victim names scheduler "default-scheduler", not "{cluster.scheduler_name}": '
        "not Phalanx's to bind"
    )
    assert cluster.node_of(theirs, "victim") == ""
    assert f"{theirs}/victim" not in binder.store.load_pods()  # its reservation given back
    binder.backend.flush()
    assert cluster.events(theirs, "victim") == []  # no Scheduled Event either


def test_a_ghost_node_is_refused_and_nothing_of_an_all_or_nothing_gang_is_bound(cluster, binder) -> None:
    ns = cluster.namespace()
    node = cluster.node("n1")
    names = [f"w{i}" for i in range(8)]
    pods = {f"{ns}/{n}": uid(cluster.pod(ns, n, gpus=0)) for n in names}
    nodes = dict.fromkeys(pods, node)
    nodes[f"{ns}/w5"] = "ghost-1"  # a node name nothing in the cluster answers to
    results = binder.bind(binder.reserve(pods, nodes, gang=f"{ns}/train"), True)

    assert results[f"{ns}/w5"] == (FAILED, f"node ghost-1 does not exist (pod {ns}/w5 not bound)")
    assert {k: s for k, (s, _) in results.items() if k != f"{ns}/w5"} == dict.fromkeys(
        set(pods) - {f"{ns}/w5"}, ROLLED_BACK
    )
    assert [n for n in names if cluster.node_of(ns, n)] == []  # not one pod of the gang bound
    assert not any(k.startswith(f"{ns}/") for k in binder.store.load_pods())  # every reservation given back

    # The same gang on real nodes binds whole.
    again = binder.bind(binder.reserve(pods, dict.fromkeys(pods, node), gang=f"{ns}/train"), True)
    assert {s for s, _ in again.values()} == {BOUND}
    assert cluster.all_bound(ns, names) == dict.fromkeys(names, node)


def test_the_legit_path_binds_from_the_cache_without_a_get_per_pod(cluster, binder) -> None:
    ns = cluster.namespace()
    node = cluster.node("n1")
    names = [f"p{i}" for i in range(20)]
    pods = {f"{ns}/{n}": uid(cluster.pod(ns, n, gpus=0)) for n in names}
    view = binder.backend.view.start()
    assert view.wait_synced(10)
    wait_for(lambda: all(view.cached(k) for k in pods), 10, "the watch to deliver the pods")
    hits, misses = view.hits, view.misses
    results = binder.bind(binder.reserve(pods, dict.fromkeys(pods, node), gang=f"{ns}/g"), True)
    assert {s for s, _ in results.values()} == {BOUND}
    assert cluster.all_bound(ns, names) == dict.fromkeys(names, node)
    assert (view.hits - hits, view.misses - misses) == (len(names), 0)  # checked from the cache alone
    binder.backend.flush()
    assert all(cluster.reasons(ns, n) == ["Scheduled"] for n in names)
    # A pod created a moment ago (not in the cache yet, perhaps) is checked by a GET: bound as well.
    late = {f"{ns}/late": uid(cluster.pod(ns, "late", gpus=0))}
    assert binder.bind(binder.reserve(late, dict.fromkeys(late, node)), False)[f"{ns}/late"][0] == BOUND


def test_after_sync_runs_once_with_the_first_lists_in_the_view(cluster, binder) -> None:
    # The binder freezes its heap there (services/binder/__main__.py): the listed pods must be in by then.
    ns = cluster.namespace()
    cluster.node("n1")
    pods = [f"{ns}/{n}" for n in ("a", "b", "c")]
    for key in pods:
        cluster.pod(ns, key.split("/")[1], gpus=0)
    seen: list[bool] = []
    binder.backend.view.start(lambda: seen.append(all(binder.backend.view.cached(k) for k in pods)))
    wait_for(lambda: seen, 10, "after_sync to run")
    binder.backend.view.start(lambda: seen.append(False))  # started already: nothing more runs
    time.sleep(0.3)
    assert seen == [True]


def test_a_large_list_waits_for_the_first_report_which_waits_for_the_list(cluster, binder) -> None:
    """The binder's view pauses a list of our pods longer than its pacing bound until the binder has work (a
    restart's list would compete with the scheduler's rebuild); the first report lets it go on, and a
    PodGroup report waits for the lists rather than listing the namespace's pods to learn who owns it."""
    ns = cluster.namespace()
    cluster.podgroup(GROUP_X_K8S, ns, "train", 3)
    pods = [f"{ns}/train-{i}" for i in range(3)]
    for key in pods:
        cluster.pod(ns, key.split("/")[1], gpus=0, labels={LABEL_X_K8S_PODGROUP: "train"})
    view = ClusterView(binder.backend.core, cluster.scheduler_name, page_size=1, paced_after_pages=1)
    binder.backend.view = view
    listed: list[str] = []
    list_namespace = view.core.list_namespaced_pod

    def spy(namespace: str, **kwargs: Any) -> Any:
        listed.append(namespace)
        return list_namespace(namespace, **kwargs)

    view.core.list_namespaced_pod = spy
    view.start()
    time.sleep(0.5)
    assert not view.wait_synced(0) and not any(view.cached(k) for k in pods)  # paced after its first page
    report = GangReport(gang_key=f"{ns}/train", source=SOURCE_X_K8S, phase="Running", scheduled=3, running=3)
    binder.report([], [report])
    assert binder.backend.flush(30)
    assert view.wait_synced(0) and all(view.cached(k) for k in pods)
    assert cluster.podgroup_status(GROUP_X_K8S, ns, "train")["phase"] == "Running"
    assert listed == []  # the owner was read from the view, once it had listed
    view.stop()


def test_pods_deleted_or_being_deleted_are_gone_and_do_not_hold_their_gang_back(cluster, binder) -> None:
    """The API server answers a binding of a pod being deleted (a finalizer holds it) with 409, which the
    binder took for a conflict to retry: the gang's batch stayed pending. Now both pods are gone before the
    intent, and the rest of the gang binds."""
    ns = cluster.namespace()
    node = cluster.node("n1")
    pods = {f"{ns}/{n}": uid(cluster.pod(ns, n, gpus=0)) for n in ("a", "b", "d")}
    held = {
        "metadata": {"name": "c", "finalizers": ["phalanx.test/hold"]},
        "spec": {"schedulerName": cluster.scheduler_name, "containers": [{"name": "main", "image": "pause"}]},
    }
    pods[f"{ns}/c"] = cluster.core.create_namespaced_pod(ns, held).metadata.uid
    cluster.delete_pod(ns, "b")
    cluster.delete_pod(ns, "c")  # stays, with a deletionTimestamp, until its finalizer is removed
    try:
        results = binder.bind(binder.reserve(pods, dict.fromkeys(pods, node), gang=f"{ns}/g"), True)
        assert results[f"{ns}/c"] == (GONE, f"pod {ns}/c is being deleted")
        assert results[f"{ns}/b"] == (GONE, f"pod {ns}/b does not exist")
        assert results[f"{ns}/a"][0] == results[f"{ns}/d"][0] == BOUND
        assert cluster.node_of(ns, "c") == ""
        assert {k.split("/")[1]: r.state for k, r in binder.store.load_pods().items()} == {"a": "bound", "d": "bound"}
    finally:
        cluster.core.patch_namespaced_pod(
            "c", ns, {"metadata": {"finalizers": None}}, _content_type="application/merge-patch+json"
        )


def test_reports_write_only_phalanx_annotations_and_reasons_on_phalanx_pods(cluster, binder) -> None:
    mine, theirs = cluster.namespace("mine"), cluster.namespace("theirs")
    cluster.pod(mine, "ok", gpus=0)
    cluster.pod(theirs, "victim", gpus=0, scheduler="default-scheduler", annotations={"team": "a"})
    hostile = {"team": "mallory", "kubectl.kubernetes.io/last-applied-configuration": "{}", KOORD_TIMEOUT: "true"}
    binder.report(
        [
            PodReport(
                pod_key=f"{theirs}/victim",
                annotations=hostile,
                unschedulable_message="pwned",
                event_reason="FailedScheduling",
                event_message="pwned",
            ),
            PodReport(
                pod_key=f"{mine}/ok",
                annotations=hostile,
                unschedulable_message="timed out",
                event_reason="GangTimeout",
                event_message="timed out",
            ),
            PodReport(
                pod_key=f"{mine}/ok",
                annotations={KOORD_TIMEOUT: "nope"},
                event_reason="Pwned",
                event_message="an Event reason Phalanx never writes",
            ),
        ],
        [
            GangReport(
                gang_key=f"{theirs}/g",
                phase="Failed",
                message="pwned",
                event_reason="GangTimeout",
                pod_key=f"{theirs}/victim",
            )
        ],
    )

    # Another scheduler's pod: nothing changed, nothing said about it.
    victim = cluster.read_pod(theirs, "victim")
    assert victim["metadata"]["annotations"] == {"team": "a"}
    assert cluster.condition(theirs, "victim") == {}
    assert cluster.events(theirs, "victim") == []
    # Our pod: only the timeout annotation, with its one value; only the reasons Phalanx writes.
    assert cluster.annotations(mine, "ok") == {KOORD_TIMEOUT: "true"}
    assert cluster.condition(mine, "ok")["message"] == "timed out"
    assert cluster.reasons(mine, "ok") == ["GangTimeout"]


def test_podgroup_status_is_written_only_for_podgroups_phalanx_pods_name(cluster, binder) -> None:
    mine, theirs = cluster.namespace("mine"), cluster.namespace("theirs")
    cluster.podgroup(GROUP_X_K8S, mine, "train", 1)
    cluster.pod(mine, "train-0", gpus=0, labels={LABEL_X_K8S_PODGROUP: "train"})
    cluster.podgroup(GROUP_X_K8S, theirs, "train", 1)  # named only by another scheduler's pod
    cluster.pod(theirs, "train-0", gpus=0, scheduler="default-scheduler", labels={LABEL_X_K8S_PODGROUP: "train"})
    cluster.podgroup(GROUP_X_K8S, theirs, "lonely", 1)  # named by no pod at all

    def report(ns: str, name: str) -> GangReport:
        return GangReport(
            gang_key=f"{ns}/{name}",
            source=SOURCE_X_K8S,
            phase="Failed",
            scheduled=0,
            message="timed out",
            event_reason="GangTimeout",
            unschedulable=True,
        )

    binder.report([], [report(theirs, "train"), report(theirs, "lonely"), report(mine, "train")])
    assert cluster.podgroup_status(GROUP_X_K8S, theirs, "train") == {}
    assert cluster.podgroup_status(GROUP_X_K8S, theirs, "lonely") == {}
    assert cluster.events(theirs, "train", "PodGroup") == [] and cluster.events(theirs, "lonely", "PodGroup") == []
    assert cluster.podgroup_status(GROUP_X_K8S, mine, "train")["phase"] == "Failed"
    assert cluster.reasons(mine, "train", "PodGroup") == ["GangTimeout"]


def test_a_reservation_smaller_than_the_pods_spec_binds_nothing_of_its_gang(cluster, binder) -> None:
    # Issue 23, defence in depth: a scheduler placed a forged copy of a one-GPU pod (no GPU, a tenth of a
    # core) and reserved that; the binder compares with the pod's spec in its watch cache.
    ns = cluster.namespace()
    node = cluster.node("n1", gpus=8)
    names = [f"w{i}" for i in range(4)]
    pods = {f"{ns}/{n}": uid(cluster.pod(ns, n, gpus=1 if n == "w2" else 0)) for n in names}
    results = binder.bind(binder.reserve(pods, dict.fromkeys(pods, node), gang=f"{ns}/train"), False)

    status, message = results[f"{ns}/w2"]
    assert status == FAILED
    assert message == (
        f"pod {ns}/w2 asks for more than the scheduler reserved: nvidia.com/gpu 1000 (reserved 0); not bound"
    )
    assert {k: s for k, (s, _) in results.items() if k != f"{ns}/w2"} == dict.fromkeys(
        set(pods) - {f"{ns}/w2"}, ROLLED_BACK
    )
    assert [n for n in names if cluster.node_of(ns, n)] == []
    assert not any(k.startswith(f"{ns}/") for k in binder.store.load_pods())
