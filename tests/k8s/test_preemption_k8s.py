"""Gang preemption against a real kube-apiserver: the victims are evicted through the Eviction API with a
DisruptionTarget condition and a Preempted Event, the preemptor's pods show their nominated node while
the victims terminate, nothing binds on the freed place but the preemptor, and at no point is either gang
partly bound. There is no kubelet: the test plays its part and removes the terminating victims."""

from __future__ import annotations

import json

import pytest
from waiting import wait_for

from phalanx.cli.main import main
from phalanx.testing.apiserver import APISERVER_MISSING_REASON, apiserver_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not apiserver_available(), reason=APISERVER_MISSING_REASON),
]

BIND = 25.0


def _priority_class(cluster, name: str, value: int) -> str:  # type: ignore[no-untyped-def]
    from kubernetes import client

    full = f"{cluster.tid}-{name}"
    client.SchedulingV1Api(cluster.core.api_client).create_priority_class(
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": full}, "value": value}
    )
    return full


def _gang_pods(cluster, ns: str, gang: str, count: int, gpus: int, priority_class: str) -> list[str]:  # type: ignore[no-untyped-def]
    from phalanx.model.keys import KOORD_MIN_AVAILABLE, KOORD_NAME, KOORD_WAITING_TIME

    annotations = {KOORD_NAME: gang, KOORD_MIN_AVAILABLE: str(count), KOORD_WAITING_TIME: "120s"}
    names = [f"{gang}-{i}" for i in range(count)]
    for name in names:
        _create_pod(cluster, ns, name, gpus=gpus, annotations=annotations, spec={"priorityClassName": priority_class})
    return names


def _create_pod(cluster, ns: str, name: str, **kw: object) -> None:  # type: ignore[no-untyped-def]
    """cluster.pod, retried while the Priority admission plugin has not seen a PriorityClass just created
    (it reads them from an informer: a 403 "no PriorityClass with name ..." for a moment)."""
    from kubernetes.client.rest import ApiException

    def created() -> bool:
        try:
            cluster.pod(ns, name, **kw)
        except ApiException as exc:
            if exc.status == 403 and "no PriorityClass" in str(exc.body):
                return False
            raise
        return True

    wait_for(created, BIND, f"pod {name} admitted with its PriorityClass", interval=0.2)


def _bound_count(cluster, ns: str, names: list[str]) -> int:  # type: ignore[no-untyped-def]
    return sum(1 for n in names if _exists(cluster, ns, n) and cluster.node_of(ns, n))


def _exists(cluster, ns: str, name: str) -> bool:  # type: ignore[no-untyped-def]
    from kubernetes.client.rest import ApiException

    try:
        cluster.read_pod(ns, name)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def test_a_high_priority_gang_preempts_a_whole_low_priority_gang(apiserver, cluster, phalanx, capsys) -> None:  # type: ignore[no-untyped-def]
    ns = cluster.namespace()
    nodes = [cluster.node(f"n{i}", gpus=4) for i in range(2)]
    low_class = _priority_class(cluster, "low", 10)
    high_class = _priority_class(cluster, "high", 1000)
    low = _gang_pods(cluster, ns, "low", 2, 4, low_class)
    wait_for(lambda: cluster.all_bound(ns, low), BIND, "the low-priority gang bound")

    high = _gang_pods(cluster, ns, "high", 2, 4, high_class)

    def evicting() -> bool:
        return all((cluster.read_pod(ns, n).get("metadata") or {}).get("deletionTimestamp") for n in low)

    wait_for(evicting, BIND, "both low-priority pods evicted (terminating)")
    for name in low:
        pod = cluster.read_pod(ns, name)
        target = [c for c in pod["status"].get("conditions") or [] if c["type"] == "DisruptionTarget"]
        # The Eviction API sets the condition itself (reason EvictionByEvictionAPI); --eviction-mode delete
        # would write PreemptionByScheduler first, as kube-scheduler does.
        assert target and target[0]["reason"] == "EvictionByEvictionAPI", pod["status"]
    wait_for(lambda: all("Preempted" in cluster.reasons(ns, n) for n in low), BIND, "a Preempted Event on each victim")
    said = [e["message"] for e in cluster.events(ns, low[0]) if e["reason"] == "Preempted"]
    assert f"preempted by gang {ns}/high (priority 1000)" in said[0], said
    nominated = wait_for(
        lambda: (
            [cluster.read_pod(ns, n)["status"].get("nominatedNodeName") for n in high]
            if all(cluster.read_pod(ns, n)["status"].get("nominatedNodeName") for n in high)
            else None
        ),
        BIND,
        "the preemptor's pods nominated",
    )
    assert sorted(nominated) == sorted(nodes)
    # The victims still hold the nodes while they terminate: the preemptor waits, whole.
    assert _bound_count(cluster, ns, high) == 0

    # `phalanx explain` says why the gang waits: it is preempting.
    with pytest.raises(SystemExit) as exit_:
        main(
            [
                "explain",
                "--kubeconfig",
                str(apiserver.kubeconfig_path),
                "-n",
                ns,
                "--scheduler-name",
                cluster.scheduler_name,
                "-o",
                "json",
            ]
        )
    out, err = capsys.readouterr()
    assert exit_.value.code == 0, err
    gangs = {g["name"]: g for g in json.loads(out)["gangs"]}
    assert gangs["high"]["preemption"].startswith("preempting"), gangs["high"]
    assert gangs["high"]["verdict"] == gangs["high"]["preemption"]

    for name in low:  # the kubelet's part: the terminating pods go
        cluster.delete_pod(ns, name)
    placed = wait_for(lambda: cluster.all_bound(ns, high), BIND, "the preemptor bound after the victims left")
    assert sorted(placed.values()) == sorted(nodes)


def test_a_gang_with_preemption_policy_never_waits(cluster, phalanx) -> None:  # type: ignore[no-untyped-def]
    ns = cluster.namespace()
    cluster.node("n0", gpus=4)
    low_class = _priority_class(cluster, "low", 10)
    low = _gang_pods(cluster, ns, "low", 1, 4, low_class)
    wait_for(lambda: cluster.all_bound(ns, low), BIND, "the low-priority gang bound")
    from kubernetes import client

    never = f"{cluster.tid}-never"
    client.SchedulingV1Api(cluster.core.api_client).create_priority_class(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": never},
            "value": 1000,
            "preemptionPolicy": "Never",
        }
    )
    high = _gang_pods(cluster, ns, "polite", 1, 4, never)
    judged = wait_for(lambda: cluster.condition(ns, high[0]) or None, BIND, "the polite gang judged")
    assert "preemptionPolicy is Never" in judged["message"], judged
    assert not (cluster.read_pod(ns, low[0]).get("metadata") or {}).get("deletionTimestamp")


def test_a_disruption_budget_steers_preemption_to_the_unprotected_gang(cluster, phalanx) -> None:  # type: ignore[no-untyped-def]
    """`cheap` has the lowest priority but a PodDisruptionBudget allows none of its pods to go (no
    disruption controller runs here: the budget's allowance comes from its spec); `dearer` is preempted."""
    from kubernetes import client

    ns = cluster.namespace()
    for i in range(2):
        cluster.node(f"n{i}", gpus=4)
    low_class = _priority_class(cluster, "low", 10)
    mid_class = _priority_class(cluster, "mid", 20)
    high_class = _priority_class(cluster, "high", 1000)
    client.PolicyV1Api(cluster.core.api_client).create_namespaced_pod_disruption_budget(
        ns,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep-cheap"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"job": "cheap"}}},
        },
    )
    cheap = ["cheap-0"]
    _create_pod(
        cluster,
        ns,
        "cheap-0",
        gpus=4,
        labels={"job": "cheap"},
        annotations={
            "gang.scheduling.koordinator.sh/name": "cheap",
            "gang.scheduling.koordinator.sh/min-available": "1",
        },
        spec={"priorityClassName": low_class},
    )
    dearer = _gang_pods(cluster, ns, "dearer", 1, 4, mid_class)
    wait_for(lambda: cluster.all_bound(ns, cheap + dearer), BIND, "both low-priority gangs bound")
    high = _gang_pods(cluster, ns, "high", 1, 4, high_class)
    wait_for(
        lambda: (cluster.read_pod(ns, dearer[0]).get("metadata") or {}).get("deletionTimestamp"),
        BIND,
        "the unprotected gang evicted",
    )
    assert not (cluster.read_pod(ns, "cheap-0").get("metadata") or {}).get("deletionTimestamp")
    cluster.delete_pod(ns, dearer[0])
    wait_for(lambda: cluster.all_bound(ns, high), BIND, "the preemptor bound")
