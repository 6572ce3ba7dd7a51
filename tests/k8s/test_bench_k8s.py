"""`phalanx bench-k8s --quick` end to end: the Phalanx half always, the peer half (kube-scheduler +
Coscheduling) when hack/build-peer-scheduler.sh has built it, and the output says when it was skipped."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from phalanx.bench.k8s import cli, kubeapi, observe, schedulers, workloads
from phalanx.bench.k8s.workloads import PEER, PG_LABEL, PHALANX
from phalanx.model.gpu import GPU
from phalanx.testing.apiserver import APISERVER_MISSING_REASON, apiserver_available

pytestmark = pytest.mark.skipif(not apiserver_available(), reason=APISERVER_MISSING_REASON)


def _args(tmp_path: Path, **over: object) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_bench_k8s_command(parser.add_subparsers())
    args = parser.parse_args(
        ["bench-k8s", "--quick", "--output", str(tmp_path / "k8s.json"), "--table", str(tmp_path / "k8s.txt")]
    )
    for k, v in over.items():
        setattr(args, k, v)
    return args


def test_peer_config_enables_coscheduling_everywhere_it_documents() -> None:
    config = schedulers.peer_config("/kubeconfig")
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["clientConnection"]["qps"] == 5000 and config["clientConnection"]["burst"] == 5000
    (profile,) = config["profiles"]
    assert profile["schedulerName"] == workloads.SCHEDULER_NAMES[PEER]
    for point in ("queueSort", "preFilter", "postFilter", "permit", "reserve"):
        assert {"name": "Coscheduling"} in profile["plugins"][point]["enabled"], point
    assert profile["plugins"]["queueSort"]["disabled"] == [{"name": "*"}]


def test_request_totals_are_summed_by_verb_and_resource() -> None:
    text = "\n".join(
        [
            "# TYPE apiserver_request_total counter",
            'apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",'
            'subresource="binding",verb="POST",version="v1"} 7',
            'apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",'
            'subresource="binding",verb="POST",version="v1"} 2',
            'apiserver_request_total{code="200",component="apiserver",dry_run="",group="scheduling.x-k8s.io",'
            'resource="podgroups",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 3',
            'apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",'
            'subresource="/metrics",verb="GET",version=""} 5',
        ]
    )
    assert kubeapi.parse_request_totals(text) == {
        "POST pods/binding": 9.0,
        "PATCH podgroups.scheduling.x-k8s.io/status": 3.0,
    }


def test_correctness_finds_partial_gangs_and_overcommitted_nodes() -> None:
    node = {
        "metadata": {"name": "n"},
        "status": {"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "110", GPU: "2"}},
    }

    def pod(name: str, gang: str, node_name: str, gpus: int) -> dict[str, object]:
        return {
            "metadata": {"name": name, "labels": {PG_LABEL: gang}},
            "spec": {
                "nodeName": node_name,
                "containers": [{"resources": {"requests": {"cpu": "100m", "memory": "128Mi", GPU: str(gpus)}}}],
            },
        }

    ok = observe.correctness([pod("a-0", "a", "n", 1), pod("a-1", "a", "n", 1)], [node], {"a": 2}, 2)
    assert ok["ok"] and ok["gangs_bound"] == 1 and ok["partial_gangs"] == 0
    bad = observe.correctness([pod("a-0", "a", "n", 2), pod("b-0", "b", "n", 1)], [node], {"a": 1, "b": 2}, 2)
    assert not bad["ok"] and bad["partial_gangs"] == 1 and bad["overcommitted_nodes"] == 1


def test_quick_run_measures_both_halves_or_says_why_not(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    peer = schedulers.peer_binary_path()
    assert cli.main(_args(tmp_path, strict=True)) == 0
    out, err = capsys.readouterr()
    doc = json.loads((tmp_path / "k8s.json").read_text())
    table = (tmp_path / "k8s.txt").read_text()
    assert table.strip() in out
    assert doc["quick"] and doc["repeats"] == 1
    assert doc["machine"]["cpu_count"] and doc["versions"]["kube_apiserver"]
    expected = [PHALANX] + ([PEER] if peer is not None else [])
    assert doc["peer_ran"] is (peer is not None)
    if peer is None:  # the peer half is skipped only for a missing binary, and the output says so
        assert "SKIPPING the peer half" in err and "NOT RUN" in table

    shapes = {s.name: s for s in workloads.workloads(quick=True)}
    assert {r["workload"] for r in doc["runs"]} == set(shapes)
    assert sorted((r["workload"], r["scheduler"]) for r in doc["runs"]) == sorted(
        (w, s) for w in shapes for s in expected
    )
    for r in doc["runs"]:
        shape, c = shapes[r["workload"]], r["correctness"]
        where = f"{r['workload']}/{r['scheduler']}"
        # Correctness: every expected pod bound, no partial gang, no node over its allocatable.
        assert c["ok"], (where, c)
        assert c["pods_bound"] == shape.expected_bound and c["partial_gangs"] == 0 and c["overcommitted_nodes"] == 0
        if shape.gangs:
            assert c["gangs_bound"] == shape.expected_bound // shape.gang_size, where
        # Numbers present and positive.
        assert 0 < r["first_binding_s"] <= r["launch_to_last_binding_s"], where
        assert r["pods_per_second"] > 0 and r["bind_time_s"]["n"] == shape.expected_bound, where
        assert r["status_lag_ms"]["scheduled_event"]["n"] == shape.expected_bound, where
        assert r["status_lag_ms"]["pod_condition"]["n"] == shape.expected_bound, where
        assert r["api_requests"].get("POST pods/binding", 0) >= shape.expected_bound, where
        assert r["api_requests_per_pod"] > 0, where
        assert r["scheduler_cpu_s"] > 0 and r["scheduler_peak_rss_mib"] > 0, where
        assert r["apiserver_cpu_s"] > 0 and r["apiserver_peak_rss_mib"] > 0, where
        assert r["scheduler_alive_at_end"] and not r["watch_errors"], where
        # The lead figure: CPU per bound pod, all processes and each.
        assert r["cpu_per_bound_pod_ms"] == pytest.approx(r["scheduler_cpu_s"] * 1000 / c["pods_bound"], rel=0.01)
        assert all(m["cpu_per_bound_pod_ms"] > 0 for m in r["processes"].values()), where
        if shape.steady:  # gangs created at the shape's rate after the warm-up gang, each pod's latency measured
            a = r["arrival"]
            assert a["error_count"] == 0 and a["gangs_created"] == shape.gangs, (where, a)
            assert a["pods_bound"] == shape.gangs * shape.gang_size, where
            assert a["achieved_gangs_per_s"] == pytest.approx(shape.arrival_gps, rel=0.1), where
            assert 0 < a["latency_ms"]["p50"] <= a["latency_ms"]["p99"] <= a["latency_ms"]["max"], where
            assert "POST pods" not in r["api_requests"], where  # the harness's creations are left out
            # the machine-pause probe ran beside the arrivals and its figures name the run's slowest pods
            stalls = a["machine_stalls"]
            assert stalls["slowest"] == len(a["slowest"]) > 0 and stalls["count"] >= 0, (where, stalls)
            assert 0 <= stalls["slowest_during_stall"] <= stalls["slowest"], (where, stalls)
            assert a["span_s"] >= shape.arrival_s * 0.9, (where, a["span_s"])
        else:
            assert r["arrival"] is None, where
        if r["scheduler"] == PHALANX:
            assert set(r["processes"]) == {"redis", "queue", "binder", "scheduler"}, where
            if shape.gangs:  # Phalanx reports each bound gang on its PodGroup
                assert r["status_lag_ms"]["podgroup_status"]["n"] == shape.expected_bound // shape.gang_size, where
        else:
            assert set(r["processes"]) == {"kube-scheduler"}, where
    for wl, entry in doc["summary"].items():
        assert set(expected) <= set(entry), wl
        if peer is not None:
            assert entry["ratio_phalanx_over_peer"]["pods_per_second"] > 0, wl
            assert entry["paired_ratio_phalanx_over_peer"]["cpu_per_bound_pod_ms"] > 0, wl
    assert table.count("CPU per bound pod, ms (all scheduler processes)") == len(shapes)
