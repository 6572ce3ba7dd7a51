"""Phalanx against a real kube-apiserver: the cluster feed (watch -> scheduler), the Kubernetes binder backend
(bindings, conditions, annotations, Events, PodGroup status) and the three services together.

etcd and kube-apiserver run on loopback ports (phalanx.testing.apiserver; skipped when the binaries are
absent); there is no kubelet, so pod phases are set by the tests where a kubelet would set them.
"""

from __future__ import annotations

import time

import pytest
from waiting import wait_for

from phalanx.model.binding import Assignment, BindStatus, PodReport
from phalanx.model.keys import (
    CONFIGMAP_LABEL,
    DELAYED_BIND_POD_NUM,
    GROUP_SIGS,
    GROUP_VOLCANO,
    GROUP_X_K8S,
    KOORD_MIN_AVAILABLE,
    KOORD_MODE,
    KOORD_NAME,
    KOORD_TIMEOUT,
    LABEL_SIGS_PODGROUP,
    LABEL_X_K8S_PODGROUP,
    LIGHT_MIN_AVAILABLE,
    LIGHT_NAME,
    VOLCANO_GROUP_NAME,
)
from phalanx.testing.apiserver import APISERVER_MISSING_REASON, apiserver_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not apiserver_available(), reason=APISERVER_MISSING_REASON),
]

GPU = "nvidia.com/gpu"
BIND = 20.0  # seconds allowed for something to happen that needs only a few scheduling rounds


def test_gang_that_fits(cluster, phalanx) -> None:
    ns = cluster.namespace()
    n1, n2 = cluster.node("n1", gpus=4), cluster.node("n2", gpus=4)
    cluster.podgroup(GROUP_X_K8S, ns, "train", 4)
    names = [f"train-{i}" for i in range(4)]
    for name in names:
        cluster.pod(ns, name, gpus=2, labels={LABEL_X_K8S_PODGROUP: "train"})

    nodes = wait_for(lambda: cluster.all_bound(ns, names), BIND, "the gang to be bound")
    assert set(nodes.values()) <= {n1, n2}
    assert all(v <= 4 for v in cluster.gpus_by_node(ns, names).values())
    for name in names:
        assert cluster.condition(ns, name)["status"] == "True"  # the API server's own, on binding
        scheduled = wait_for(
            lambda: [e for e in cluster.events(ns, name) if e["reason"] == "Scheduled"],
            5,
            f"a Scheduled event on {name}",
        )
        assert scheduled[0]["message"] == f"Successfully assigned {ns}/{name} to {nodes[name]}"
        assert scheduled[0]["type"] == "Normal"
        assert scheduled[0]["involvedObject"]["uid"]

    status = wait_for(
        lambda: (
            (s := cluster.podgroup_status(GROUP_X_K8S, ns, "train")).get("phase") == "Scheduled"
            and s.get("scheduled") == 4
            and s
        ),
        5,
        "PodGroup status Scheduled",
    )
    assert status["scheduleStartTime"].endswith("Z")
    wait_for(lambda: "GangScheduled" in cluster.reasons(ns, "train", "PodGroup"), 5, "a GangScheduled event")

    # What a kubelet would report next: the counters and the phase follow the pods.
    for name in names:
        cluster.set_phase(ns, name, "Running")
    wait_for(
        lambda: (
            (s := cluster.podgroup_status(GROUP_X_K8S, ns, "train")).get("phase") == "Running" and s.get("running") == 4
        ),
        5,
        "PodGroup status Running with running=4",
    )
    for name in names:
        cluster.set_phase(ns, name, "Succeeded")
    wait_for(
        lambda: (
            (s := cluster.podgroup_status(GROUP_X_K8S, ns, "train")).get("phase") == "Finished"
            and s.get("succeeded") == 4
            and s.get("running") == 0
        ),
        5,
        "PodGroup status Finished",
    )
    # Finished pods give their reservations back.
    wait_for(lambda: not any(k.startswith(f"{ns}/") for k in phalanx.reserved()), 5, "reservations released")


def test_a_gang_assembling_is_not_marked_unschedulable(cluster, phalanx) -> None:
    """Its first pod is placed and waits for the second: as kube-scheduler in Permit, Phalanx writes nothing
    on it (no PodScheduled=False of any reason, which cluster-autoscaler or a job operator would act on, and
    no Event); the gang's Normal GangWaiting Event says it. (Declared by its pods' annotations: a PodGroup
    could reach the scheduler after its pod, which is refused until it does.)"""
    ns = cluster.namespace()
    cluster.node("n1", gpus=4)
    first = cluster.koord_pods(ns, "train", 1, min_available=2)
    wait_for(
        lambda: any(k == f"{ns}/{first[0]}" and s == "assumed" for k, (_, s) in phalanx.reserved().items()),
        BIND,
        f"{first[0]} placed",
    )
    wait_for(lambda: "GangWaiting" in cluster.reasons(ns, first[0]), 5, "the gang's GangWaiting Event")
    cluster.canary()  # the binder's report lanes have run past the first pod's report
    assert cluster.condition(ns, first[0]) == {}
    names = first + cluster.koord_pods(ns, "train", 1, min_available=2, start=1)
    wait_for(lambda: cluster.all_bound(ns, names), BIND, "the gang bound")
    for name in names:
        wait_for(lambda: "Scheduled" in cluster.reasons(ns, name), 5, f"a Scheduled event on {name}")
    events = [e for name in names for e in cluster.events(ns, name)]
    assert not [e for e in events if e["type"] != "Normal"], events
    assert "FailedScheduling" not in {e["reason"] for e in events}


def test_gang_that_never_fits_times_out(cluster, phalanx) -> None:
    ns = cluster.namespace()
    cluster.node("n1", gpus=2)
    cluster.node("n2", gpus=2)
    cluster.podgroup(GROUP_SIGS, ns, "big", 3, timeout_seconds=3)  # 3 pods of 2 GPUs on 2 nodes of 2 GPUs
    names = [f"big-{i}" for i in range(3)]
    for name in names:
        cluster.pod(ns, name, gpus=2, labels={LABEL_SIGS_PODGROUP: "big"})

    for name in names:
        wait_for(lambda: cluster.annotations(ns, name).get(KOORD_TIMEOUT) == "true", 15, f"{name} timed out")
    wait_for(lambda: all("GangTimeout" in cluster.reasons(ns, n) for n in names), 5, "GangTimeout events")
    for name in names:
        assert cluster.node_of(ns, name) == ""
        condition = cluster.condition(ns, name)
        assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
        assert f"gang {ns}/big" in condition["message"] and "timed out" in condition["message"]
        assert "Insufficient nvidia.com/gpu" in condition["message"]  # what would have to change
        events = cluster.events(ns, name)
        failed = [e for e in events if e["reason"] == "FailedScheduling"]
        assert failed and all(e["type"] == "Warning" for e in failed)
        assert any("Insufficient nvidia.com/gpu" in e["message"] for e in failed)
    status = wait_for(
        lambda: (s := cluster.podgroup_status(GROUP_SIGS, ns, "big")).get("phase") == "Failed" and s,
        5,
        "PodGroup phase Failed",
    )
    assert status["scheduled"] == 0
    wait_for(lambda: "GangTimeout" in cluster.reasons(ns, "big", "PodGroup"), 5, "a GangTimeout event")
    assert not any(k.startswith(f"{ns}/") for k in phalanx.reserved())  # assumed resources released
    cluster.canary()  # the scheduler has run past the timeout's own writes on the pods
    assert all(cluster.node_of(ns, n) == "" for n in names)  # and never scheduled again
    assert not any(k.startswith(f"{ns}/") for k in phalanx.reserved())


def test_gang_group_across_namespaces(cluster, phalanx) -> None:
    ns_a, ns_b = cluster.namespace("a"), cluster.namespace("b")
    cluster.node("n1", gpus=8)
    group = [f"{ns_a}/ga", f"{ns_b}/gb"]
    pods_a = cluster.koord_pods(ns_a, "ga", 2, min_available=2, groups=group)
    wait_for(
        lambda: (
            sum(1 for k, (_, state) in phalanx.reserved().items() if k.startswith(f"{ns_a}/") and state == "assumed")
            == 2
        ),
        BIND,
        "ga's pods reserved",
    )
    cluster.canary()  # the binder's report lanes have run past ga's reports
    assert all(cluster.node_of(ns_a, n) == "" for n in pods_a)  # ga has its minimum but waits for gb
    # Waiting for the rest of its group is not being unschedulable: nothing written on its pods.
    assert all(cluster.condition(ns_a, n) == {} for n in pods_a)
    assert not any(e["type"] == "Warning" for n in pods_a for e in cluster.events(ns_a, n))
    pods_b = cluster.koord_pods(ns_b, "gb", 2, min_available=2, groups=group)
    wait_for(lambda: cluster.all_bound(ns_a, pods_a) and cluster.all_bound(ns_b, pods_b), BIND, "the group bound")


def test_each_declaration_form(cluster, phalanx) -> None:
    ns = cluster.namespace()
    cluster.node("n1", gpus=16)
    cluster.node("n2", gpus=16)
    gangs: dict[str, list[str]] = {}

    def pods(gang: str, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> None:
        gangs[gang] = [f"{gang}-{i}" for i in range(2)]
        for name in gangs[gang]:
            cluster.pod(ns, name, labels=labels, annotations=annotations)

    cluster.podgroup(GROUP_X_K8S, ns, "pg-x", 2)
    pods("pg-x", labels={LABEL_X_K8S_PODGROUP: "pg-x"})
    cluster.podgroup(GROUP_SIGS, ns, "pg-s", 2)
    pods("pg-s", labels={LABEL_SIGS_PODGROUP: "pg-s"})
    pods("koord", annotations={KOORD_NAME: "koord", KOORD_MIN_AVAILABLE: "2"})
    pods("light", annotations={LIGHT_NAME: "light", LIGHT_MIN_AVAILABLE: "2"})
    cluster.configmap(ns, "cm", {"minAvailable": "2", "scheduleTimeoutSeconds": "30"})
    pods("cm", labels={CONFIGMAP_LABEL: "cm"})
    pods("delayed", annotations={VOLCANO_GROUP_NAME: "delayed", DELAYED_BIND_POD_NUM: "2"})
    # Volcano: the pods come before their PodGroup (as a Job's often do) and wait for it.
    pods("pg-v", annotations={VOLCANO_GROUP_NAME: "pg-v"})
    wait_for(
        lambda: "does not exist yet" in cluster.condition(ns, "pg-v-0").get("message", ""),
        BIND,
        "pg-v's pods told their PodGroup is missing",
    )
    assert cluster.node_of(ns, "pg-v-0") == ""
    cluster.podgroup(GROUP_VOLCANO, ns, "pg-v", 2)

    for gang, names in gangs.items():
        wait_for(lambda: cluster.all_bound(ns, names), BIND, f"gang {gang} bound")
    specs = phalanx.store.load_gangs()
    sources = {key.partition("/")[2]: spec.source for key, spec in specs.items() if key.startswith(f"{ns}/")}
    assert sources == {
        "pg-x": f"podgroup/{GROUP_X_K8S}",
        "pg-s": f"podgroup/{GROUP_SIGS}",
        "pg-v": f"podgroup/{GROUP_VOLCANO}",
        "koord": "koordinator-annotations",
        "light": "lightweight-coscheduling",
        "cm": "configmap",
        "delayed": "delayed-binding-annotations",
    }
    assert all(specs[f"{ns}/{g}"].min_available == 2 for g in gangs)
    for group, name in ((GROUP_X_K8S, "pg-x"), (GROUP_SIGS, "pg-s")):
        wait_for(
            lambda: (
                (s := cluster.podgroup_status(group, ns, name)).get("phase") == "Scheduled" and s.get("scheduled") == 2
            ),
            5,
            f"{name} status",
        )
    volcano = wait_for(
        lambda: (s := cluster.podgroup_status(GROUP_VOLCANO, ns, "pg-v")).get("phase") == "Running" and s,
        5,
        "the Volcano PodGroup Running",
    )
    assert [c["type"] for c in volcano["conditions"]] == ["Scheduled"]
    # A gang without a PodGroup gets its gang-level events on a pod.
    wait_for(
        lambda: any("GangScheduled" in cluster.reasons(ns, n) for n in gangs["koord"]),
        5,
        "GangScheduled on a pod of the annotation gang",
    )


def test_scheduler_restarted_mid_gang(cluster, phalanx) -> None:
    ns = cluster.namespace()
    cluster.node("n1", gpus=2)
    cluster.node("n2", gpus=2)
    first = cluster.koord_pods(ns, "train", 2, min_available=4, wait="60s")
    wait_for(
        lambda: sum(1 for k, (_, s) in phalanx.reserved().items() if k.startswith(f"{ns}/") and s == "assumed") == 2,
        BIND,
        "two pods reserved",
    )
    phalanx.stop_scheduler()
    rest = cluster.koord_pods(ns, "train", 2, min_available=4, wait="60s", start=2)
    phalanx.start_scheduler()  # same Redis: it resumes the gang with its two reservations
    names = first + rest
    wait_for(lambda: cluster.all_bound(ns, names), BIND, "the gang bound after the restart")
    assert all(v <= 2 for v in cluster.gpus_by_node(ns, names).values())  # no reservation counted twice
    # Bound in the cluster first, then committed as bound in Redis.
    wait_for(
        lambda: all(phalanx.reserved().get(f"{ns}/{n}", ("", ""))[1] == "bound" for n in names),
        5,
        "the bindings committed in Redis",
    )


def test_queue_restarted_loses_no_pending_pod(cluster, phalanx) -> None:
    ns = cluster.namespace()
    cluster.node("n1", gpus=2)
    cluster.pod(ns, "big", gpus=4)  # fits nowhere yet: it waits in the queue's unschedulable sub-queue
    wait_for(lambda: cluster.condition(ns, "big").get("reason") == "Unschedulable", BIND, "the pod unschedulable")
    phalanx.restart_queue()  # the new queue holds nothing; the scheduler notices and its feed adds the pod again
    n2 = cluster.node("n2", gpus=4)
    assert wait_for(lambda: cluster.node_of(ns, "big"), BIND, "the pod bound after the queue restart") == n2


def test_redis_wiped_while_pods_are_bound(cluster, phalanx) -> None:
    ns = cluster.namespace()
    n1, n2, n3 = cluster.node("n1", gpus=2), cluster.node("n2", gpus=2), cluster.node("n3", gpus=2)
    held = cluster.koord_pods(ns, "held", 2, min_available=2, gpus=2)
    nodes = wait_for(lambda: cluster.all_bound(ns, held), BIND, "the first gang bound")
    wait_for(
        lambda: all(phalanx.reserved().get(f"{ns}/{n}", ("", ""))[1] == "bound" for n in held),
        5,
        "the bindings committed in Redis",
    )
    phalanx.stop_scheduler()
    phalanx.store.wipe()  # Redis lost everything
    phalanx.start_scheduler()
    reserved = phalanx.reserved()  # rebuilt from the API server before the scheduler starts scheduling
    assert {k: v for k, v in reserved.items() if k.startswith(f"{ns}/")} == {
        f"{ns}/{n}": (nodes[n], "bound") for n in held
    }
    used = phalanx.store.load_used()
    assert all(used.get((nodes[n], GPU)) == 2000 for n in held)
    # The rebuilt reservations count: a 2-GPU pod fits only on the node the first gang left free.
    free = ({n1, n2, n3} - set(nodes.values())).pop()
    cluster.pod(ns, "late", gpus=2)
    assert wait_for(lambda: cluster.node_of(ns, "late"), BIND, "the late pod bound") == free


def test_pod_deleted_while_its_gang_waits(cluster, phalanx) -> None:
    ns = cluster.namespace()
    node = cluster.node("n1", gpus=3)
    cluster.koord_pods(ns, "train", 2, min_available=3, wait="60s")
    wait_for(lambda: sum(1 for k in phalanx.reserved() if k.startswith(f"{ns}/")) == 2, BIND, "two pods reserved")
    cluster.delete_pod(ns, "train-1")
    wait_for(
        lambda: set(phalanx.reserved()) & {f"{ns}/train-0", f"{ns}/train-1"} == {f"{ns}/train-0"},
        BIND,
        "the deleted pod's reservation released",
    )
    cluster.koord_pods(ns, "train", 2, min_available=3, wait="60s", start=2)  # its replacement, and the third
    names = ["train-0", "train-2", "train-3"]
    nodes = wait_for(lambda: cluster.all_bound(ns, names), BIND, "the gang bound")
    assert set(nodes.values()) == {node}  # 3 GPUs: only possible if the deleted pod's one was given back


def test_a_deleted_job_leaves_no_gang_state_and_its_name_starts_afresh(cluster, phalanx) -> None:
    ns = cluster.namespace()
    cluster.node("n1", gpus=4)
    names = cluster.koord_pods(ns, "train", 2, min_available=2)
    wait_for(lambda: cluster.all_bound(ns, names), BIND, "the gang bound")
    gang = f"{ns}/train"
    scheduler = phalanx.scheduler[1].scheduler
    assert gang in phalanx.store.gang_keys_with_state() and gang in scheduler.gangs.records
    for name in names:  # the job ran and its controller cleaned up
        cluster.set_phase(ns, name, "Succeeded")
        cluster.delete_pod(ns, name)
    wait_for(lambda: gang not in phalanx.store.gang_keys_with_state(), BIND, "the gang's Redis state deleted")
    assert gang not in scheduler.gangs.records and gang not in scheduler.gangs.specs
    # The same job submitted again is a new gang: its first pod waits for its sibling (had the old, satisfied
    # record survived, the pod would have been bound alone as an already-satisfied gang's extra pod).
    cluster.koord_pods(ns, "train", 1, min_available=2)
    wait_for(lambda: f"{ns}/train-0" in phalanx.reserved(), BIND, "the first pod reserved")
    cluster.canary()  # the scheduler has run its rounds past the first pod
    assert cluster.node_of(ns, "train-0") == ""
    cluster.koord_pods(ns, "train", 1, min_available=2, start=1)
    wait_for(lambda: cluster.all_bound(ns, names), BIND, "the new gang bound whole")


def test_a_podgroup_gang_is_forgotten_once_its_podgroup_and_pods_are_gone(cluster, phalanx) -> None:
    ns = cluster.namespace()
    cluster.node("n1", gpus=4)
    cluster.podgroup(GROUP_X_K8S, ns, "pg", 1)
    cluster.pod(ns, "pg-0", labels={LABEL_X_K8S_PODGROUP: "pg"})
    wait_for(lambda: cluster.node_of(ns, "pg-0"), BIND, "the pod bound")
    cluster.delete_pod(ns, "pg-0")
    wait_for(lambda: f"{ns}/pg-0" not in phalanx.reserved(), BIND, "the pod's reservation released")
    assert f"{ns}/pg" in phalanx.store.load_gangs()  # the PodGroup still declares it
    cluster.delete_podgroup(GROUP_X_K8S, ns, "pg")
    wait_for(lambda: f"{ns}/pg" not in phalanx.store.gang_keys_with_state(), BIND, "the gang's state deleted")


def test_malformed_annotations(cluster, phalanx) -> None:
    ns = cluster.namespace()
    cluster.node("n1", gpus=8)
    cluster.pod(ns, "bad-0", annotations={KOORD_NAME: "bad", KOORD_MIN_AVAILABLE: "abc"})
    # A PodGroup the API server accepts but Phalanx cannot use: its pods say why.
    cluster.podgroup(GROUP_X_K8S, ns, "odd", 2, annotations={KOORD_MODE: "Sometimes"})
    cluster.pod(ns, "odd-0", labels={LABEL_X_K8S_PODGROUP: "odd"})
    good = cluster.koord_pods(ns, "good", 2, min_available=2)

    wait_for(lambda: cluster.all_bound(ns, good), BIND, "the valid gang bound")
    bad = wait_for(lambda: cluster.condition(ns, "bad-0"), BIND, "a condition on the malformed pod")
    assert (bad["status"], bad["reason"]) == ("False", "Unschedulable")
    assert f"metadata.annotations[{KOORD_MIN_AVAILABLE}]" in bad["message"] and '"abc"' in bad["message"]
    wait_for(lambda: "FailedScheduling" in cluster.reasons(ns, "bad-0"), 5, "an event on the malformed pod")
    odd = wait_for(lambda: cluster.condition(ns, "odd-0"), BIND, "a condition on the pod of the invalid PodGroup")
    assert f"PodGroup {ns}/odd" in odd["message"] and f"metadata.annotations[{KOORD_MODE}]" in odd["message"]
    assert cluster.node_of(ns, "bad-0") == "" and cluster.node_of(ns, "odd-0") == ""  # judged: refused, not bound


def test_other_schedulers_pods_ignored_but_counted(cluster, phalanx) -> None:
    ns = cluster.namespace()
    n1, n2 = cluster.node("n1", gpus=2), cluster.node("n2", gpus=2)
    cluster.pod(ns, "other-bound", gpus=2, scheduler="default-scheduler")
    cluster.bind(ns, "other-bound", n1)  # as if kube-scheduler had placed it
    cluster.pod(ns, "other-pending", gpus=1, scheduler="default-scheduler")
    names = cluster.koord_pods(ns, "train", 2, min_available=2)
    nodes = wait_for(lambda: cluster.all_bound(ns, names), BIND, "the gang bound")
    # That round's reports are written too (a gang without a PodGroup has its gang Events on a pod).
    wait_for(lambda: any("GangScheduled" in cluster.reasons(ns, n) for n in names), 5, "the round's reports")
    assert set(nodes.values()) == {n2}  # n1's GPUs are held by the other scheduler's pod
    assert phalanx.reserved()[f"{ns}/other-bound"] == (n1, "bound")
    assert cluster.node_of(ns, "other-pending") == ""
    assert cluster.condition(ns, "other-pending") == {}  # not Phalanx's to judge
    assert cluster.events(ns, "other-pending") == []


def test_backend_bind_outcomes(apiserver, cluster) -> None:
    """KubernetesBackend.bind on its own: success, already bound where asked, bound elsewhere, deleted,
    recreated under the same name."""
    from phalanx.backends.kubernetes import KubernetesBackend, RetryPolicy
    from phalanx.state.store import Txn

    ns = cluster.namespace()
    n1, n2 = cluster.node("n1", gpus=4), cluster.node("n2", gpus=4)
    uids = {name: cluster.pod(ns, name, scheduler="nobody")["metadata"]["uid"] for name in ("a", "b", "c", "d")}
    cluster.bind(ns, "b", n1)
    cluster.bind(ns, "c", n2)
    cluster.delete_pod(ns, "d")
    recreated_uid = uids["a"]
    cluster.pod(ns, "e", scheduler="nobody")
    backend = KubernetesBackend(
        apiserver.api_client(),
        component="nobody",  # the pods' scheduler: reports on them
        retry=RetryPolicy(attempts=2, initial_delay=0.01),
    )
    try:
        failures = backend.bind(
            [
                Assignment(pod_key=f"{ns}/a", uid=uids["a"], node=n1),
                Assignment(pod_key=f"{ns}/b", uid=uids["b"], node=n1),
                Assignment(pod_key=f"{ns}/c", uid=uids["c"], node=n1),
                Assignment(pod_key=f"{ns}/d", uid=uids["d"], node=n1),
                Assignment(pod_key=f"{ns}/e", uid=recreated_uid, node=n1),
            ],
            time.time(),
            Txn(),
        )
        # Reports: a stale one about a bound pod changes nothing; the same message twice is written once.
        report = PodReport(
            pod_key=f"{ns}/a", unschedulable_message="stale", event_reason="FailedScheduling", event_message="stale"
        )
        again = PodReport(
            pod_key=f"{ns}/e", unschedulable_message="no", event_reason="FailedScheduling", event_message="no"
        )
        backend.report([report, again, again], [], time.time())
        assert backend.flush()
    finally:
        backend.close()
    assert cluster.condition(ns, "a")["status"] == "True" and "FailedScheduling" not in cluster.reasons(ns, "a")
    assert cluster.condition(ns, "e")["message"] == "no" and cluster.reasons(ns, "e") == ["FailedScheduling"]
    assert cluster.node_of(ns, "a") == n1
    assert set(failures) == {f"{ns}/c", f"{ns}/d", f"{ns}/e"}  # b: bound where asked already, a success
    assert not failures[f"{ns}/c"].gone and n2 in failures[f"{ns}/c"].message
    assert failures[f"{ns}/d"].gone and failures[f"{ns}/e"].gone
    assert cluster.node_of(ns, "e") == ""


def test_pod_deleted_mid_bind_is_not_an_error_for_its_gang(apiserver, cluster, redis_server) -> None:
    """The binder's batch for a gang whose pod was deleted after its reservation: the others bind."""
    import redis

    from phalanx.backends.kubernetes import KubernetesBackend
    from phalanx.binding.batch_binder import BatchBinder
    from phalanx.binding.lock import FencedLock
    from phalanx.model.objects import NodeInfo, PodInfo
    from phalanx.state.keys import Keys
    from phalanx.state.store import StateStore, Txn

    store = StateStore(redis.Redis.from_url(redis_server.url, decode_responses=True), Keys(f"mid-{cluster.tid}"))
    ns = cluster.namespace()
    node = cluster.node("n1", gpus=4)
    store.put_nodes([NodeInfo(node, {"cpu": 16_000, "pods": 110_000, GPU: 4000})])
    names = ["w0", "w1", "w2"]
    uids = {n: cluster.pod(ns, n, scheduler="nobody")["metadata"]["uid"] for n in names}
    # Reserved as the pods ask (the binder refuses a reservation smaller than the pod's spec).
    pods = [PodInfo(ns, n, uid=uids[n], requests={"cpu": 100, GPU: 1000, "pods": 1000}, gang=f"{ns}/g") for n in names]
    store.must_apply(Txn(reserve=[store.reserve_entry(p, node) for p in pods]))
    cluster.delete_pod(ns, "w1")  # after the scheduler reserved it, before the binder binds it
    backend = KubernetesBackend(apiserver.api_client(), component="nobody")  # the pods' scheduler: it may bind them
    try:
        results, _ = BatchBinder(store, backend, FencedLock(store.redis, store.keys)).bind(
            [Assignment(pod_key=p.key, uid=p.uid, node=node, gang=p.gang) for p in pods], True, time.time()
        )
    finally:
        backend.close()
    statuses = {r.pod_key: r.status for r in results}
    assert statuses == {f"{ns}/w0": BindStatus.BOUND, f"{ns}/w1": BindStatus.GONE, f"{ns}/w2": BindStatus.BOUND}
    assert cluster.node_of(ns, "w0") == node and cluster.node_of(ns, "w2") == node
    assert {k: r.state for k, r in store.load_pods().items()} == {f"{ns}/w0": "bound", f"{ns}/w2": "bound"}
    store.wipe()


def test_bindings_and_events_reuse_their_connections(apiserver, cluster) -> None:
    """Every answer is read, so its connection goes back to the pool: 60 bindings and their 60 Events
    use a handful of TLS connections, not one each (which cost the binder and the API server a
    handshake per call)."""
    from phalanx.backends.kubernetes import KubernetesBackend
    from phalanx.kube.connection import connect
    from phalanx.state.store import Txn

    ns = cluster.namespace()
    node = cluster.node("n1", cpu="64")
    uids = {f"p{i}": cluster.pod(ns, f"p{i}", gpus=0, scheduler="nobody")["metadata"]["uid"] for i in range(60)}
    api = connect(str(apiserver.kubeconfig_path))
    backend = KubernetesBackend(api, component="nobody")
    try:
        failures = backend.bind(
            [Assignment(pod_key=f"{ns}/{n}", uid=u, node=node) for n, u in uids.items()], time.time(), Txn()
        )
        assert backend.flush()
        pools = list(api.pool.pools._container.values())
        connections = sum(p.num_connections for p in pools)
    finally:
        backend.close()
    assert failures == {}
    assert len(cluster.events(ns, "p0")) == 1
    assert connections <= 20, f"{connections} connections for 120 calls"  # 8 bind + 8 report threads, watches
