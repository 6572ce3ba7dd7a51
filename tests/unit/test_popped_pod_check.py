"""Kubernetes mode: a popped pod is placed as the API server has it, never as the queue's copy says
(issue 23: a GPU gang re-added to the queue asking for no GPU was bound and over-committed its nodes)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import model_pod

from phalanx.intake.pods import parse_pod
from phalanx.metrics.catalog import UNTRUSTED_PODS
from phalanx.model.objects import PodInfo
from phalanx.queueing.scheduling_queue import Outcome
from phalanx.rpc.convert import pod_from_pb, pod_to_pb
from phalanx.scheduling.pod_source import PoppedPodCheck, differences
from phalanx.scheduling.ports import Popped

GPU = "nvidia.com/gpu"


class FeedView:
    """What the cluster feed answers: the pending pods it handed to the queue."""

    def __init__(self, pods: list[PodInfo], synced: bool = True) -> None:
        self.pods = {p.key: p for p in pods}
        self.synced = synced

    def schedulable_pod(self, key: str) -> PodInfo | None:
        pod = self.pods.get(key)
        return replace(pod) if pod is not None else None

    def ready(self) -> bool:
        return self.synced


def _count(reason: str) -> float:
    return UNTRUSTED_PODS.labels(reason)._value.get()  # type: ignore[attr-defined,no-any-return]


def test_a_forged_copy_is_placed_as_the_api_server_has_it(caplog: pytest.LogCaptureFixture) -> None:
    real = model_pod("w0", "gc", gpus=1, cpu=1)
    forged = replace(real, requests={"cpu": 100})
    check, verdicts = PoppedPodCheck(), []  # type: ignore[var-annotated]
    view = FeedView([real])
    check.attach(view, view.ready)
    before = _count("differs")
    out = check.admit([Popped(forged, "trace-1")], verdicts)
    assert [p.pod.requests for p in out] == [real.requests] and out[0].trace == "trace-1"
    assert verdicts == [] and _count("differs") == before + 1
    assert "default/w0 was handed out by the queue with requests differing" in caplog.text


def test_a_pod_the_api_server_has_not_pending_is_dropped() -> None:
    ghost = model_pod("ghost", "gc", gpus=1)
    check, verdicts = PoppedPodCheck(), []  # type: ignore[var-annotated]
    view = FeedView([model_pod("w0", "gc")])
    check.attach(view, view.ready)
    assert check.admit([Popped(ghost)], verdicts) == []
    assert [(v.item.pod.key, v.outcome) for v in verdicts] == [("default/ghost", Outcome.DROPPED)]


def test_nothing_is_placed_or_lost_before_the_feed_has_synced() -> None:
    pod = model_pod("w0", "gc")
    check, verdicts = PoppedPodCheck(), []  # type: ignore[var-annotated]
    assert check.admit([Popped(pod)], verdicts) == []  # no source attached yet
    view = FeedView([pod], synced=False)
    check.attach(view, view.ready)
    assert check.admit([Popped(pod)], verdicts) == []
    assert {v.outcome for v in verdicts} == {Outcome.BACKOFF}


def test_a_pod_as_the_feed_hands_it_over_the_wire_differs_in_nothing() -> None:
    # The queue's copy of an honest pod went through protobuf: no field scheduling reads may change on the way,
    # or every pod would be logged as forged.
    obj = {
        "metadata": {
            "name": "w1",
            "namespace": "team-a",
            "uid": "0c5d",
            "labels": {"job": "gc", "pod-group.scheduling.sigs.k8s.io": "gc"},
            "annotations": {"phalanx.dev/basic-policy": "BinPack", "gang.scheduling.koordinator.sh/name": "gc"},
            "creationTimestamp": "2026-11-27T10:00:00Z",
        },
        "spec": {
            "schedulerName": "phalanx",
            "priority": 1000,
            "preemptionPolicy": "Never",
            "nodeSelector": {"gpu": "a100"},
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                        ]
                    }
                },
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"job": "gc"}}}
                    ]
                },
            },
            "containers": [
                {"name": "t", "resources": {"limits": {GPU: "1"}, "requests": {"cpu": "2", "memory": "8Gi"}}}
            ],
        },
    }
    pod = replace(parse_pod(obj), gang="team-a/gc", gang_created_at=12.5)
    assert differences(pod_from_pb(pod_to_pb(pod)), pod) == []
