"""DRF between two tenants through the real stack (redis-server, queue, scheduler and binder as processes):
one tenant submits many small jobs, the other a few large ones, all at once, on a cluster that fits a
third of it. Ordered by DRF, each tenant holds half the GPUs whenever both have work waiting; ordered by
priority and age alone, whoever sorts first takes the whole cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import make_node, make_pod, make_podgroup

from phalanx.model.keys import (
    JOB_QUEUE_POLICY,
    KOORD_MIN_AVAILABLE,
    KOORD_NAME,
    KOORD_WAITING_TIME,
    SIM_DURATION,
    VOLCANO_GROUP_NAME,
)
from phalanx.sim.driver import SimOptions
from phalanx.sim.run import simulate
from phalanx.sim.workload import load_workload

pytestmark = pytest.mark.integration

NODES, GPUS_PER_NODE = 8, 8
TOTAL_GPUS = NODES * GPUS_PER_NODE
# One large job is 8 of the 64 GPUs: the finest step the large tenant's share can take.
TOLERANCE = 8 / TOTAL_GPUS


def _job(ns: str, name: str, pods: int, gpus: int, seconds: int, policy: str | None) -> list[dict[str, Any]]:
    out = []
    for i in range(pods):
        pod = (
            make_pod(f"{name}-{i}", namespace=ns)
            .scheduler("phalanx")
            .container()
            .gpu(gpus)
            .cpu("1")
            .created("2026-01-01T00:00:00Z")
            .annotation(KOORD_NAME, name)
            .annotation(KOORD_MIN_AVAILABLE, str(pods))
            .annotation(KOORD_WAITING_TIME, "3600s")
            .annotation(SIM_DURATION, f"{seconds}s")
        )
        if policy:
            pod = pod.annotation(JOB_QUEUE_POLICY, policy)
        out.append(pod.build())
    return out


def _run(tmp_path: Path, policy: str | None) -> list[dict[str, Any]]:
    nodes = [make_node(f"n{i}").cpu("64").memory("256Gi").gpu(GPUS_PER_NODE).build() for i in range(NODES)]
    small = [p for j in range(40) for p in _job("team-small", f"s{j:02d}", 2, 1, 100, policy)]
    large = [p for j in range(10) for p in _job("team-large", f"l{j}", 2, 4, 150, policy)]
    path = tmp_path / "workload.yaml"
    path.write_text(yaml.safe_dump_all(nodes + small + large))
    return simulate(load_workload([path]), SimOptions(), log_dir=tmp_path / "logs")["pods"]


def _gpus(pod: dict[str, Any]) -> int:
    return 1 if pod["namespace"] == "team-small" else 4


def _shares_while_both_wait(pods: list[dict[str, Any]]) -> list[tuple[float, dict[str, float]]]:
    """(time, each tenant's share of the GPUs) at every start or finish while both tenants have a pod that
    has not started yet."""
    instants = sorted({p[k] for p in pods for k in ("startedAt", "finishedAt") if p[k] is not None})
    out = []
    for t in instants:
        waiting = {p["namespace"] for p in pods if p["startedAt"] is None or p["startedAt"] > t}
        if waiting != {"team-small", "team-large"}:
            continue
        held = {"team-small": 0, "team-large": 0}
        for p in pods:
            if p["startedAt"] is not None and p["startedAt"] <= t and (p["finishedAt"] is None or p["finishedAt"] > t):
                held[p["namespace"]] += _gpus(p)
        out.append((t, {ns: n / TOTAL_GPUS for ns, n in held.items()}))
    return out


def test_drf_gives_each_tenant_half_while_both_wait(tmp_path: Path) -> None:
    samples = _shares_while_both_wait(_run(tmp_path, "DRF"))
    assert len(samples) >= 3, samples  # the first round and at least two waves of finishes and starts
    for t, shares in samples:
        assert abs(shares["team-small"] - 0.5) <= TOLERANCE, (t, shares)
        assert abs(shares["team-large"] - 0.5) <= TOLERANCE, (t, shares)
    assert samples[0][1] == {"team-small": 0.5, "team-large": 0.5}


def test_without_drf_the_tenant_that_sorts_first_takes_everything(tmp_path: Path) -> None:
    t, shares = _shares_while_both_wait(_run(tmp_path, None))[0]
    assert t == 0 and shares == {"team-small": 0.0, "team-large": 1.0}


def test_volcano_queues_are_the_tenants(tmp_path: Path) -> None:
    """One namespace, two Volcano queues: the PodGroups' spec.queue, not the namespace, is the tenant, so
    the two queues share the GPUs as the two namespaces did."""
    nodes = [make_node(f"n{i}").cpu("64").memory("256Gi").gpu(GPUS_PER_NODE).build() for i in range(NODES)]
    objects: list[dict[str, Any]] = list(nodes)
    for queue, jobs, gpus, seconds in (("small", 40, 1, 100), ("large", 10, 4, 150)):
        for j in range(jobs):
            name = f"{queue}{j:02d}"
            objects.append(
                make_podgroup(name, "shared", api_version="scheduling.volcano.sh/v1beta1")
                .min_member(2)
                .set("spec.queue", queue)
                .build()
            )
            for i in range(2):
                objects.append(
                    make_pod(f"{name}-{i}", namespace="shared")
                    .scheduler("phalanx")
                    .container()
                    .gpu(gpus)
                    .cpu("1")
                    .created("2026-01-01T00:00:00Z")
                    .annotation(VOLCANO_GROUP_NAME, name)
                    .annotation(SIM_DURATION, f"{seconds}s")
                    .annotation(JOB_QUEUE_POLICY, "DRF")
                    .build()
                )
    path = tmp_path / "workload.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    pods = simulate(load_workload([path]), SimOptions(), log_dir=tmp_path / "logs")["pods"]
    held = {"small": 0, "large": 0}
    for p in pods:
        if p["startedAt"] == 0:
            held[p["name"][: -len("00-0")]] += 1 if p["name"].startswith("small") else 4
    assert held == {"small": TOTAL_GPUS // 2, "large": TOTAL_GPUS // 2}
