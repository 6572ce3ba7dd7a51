"""DRF between two tenants through the real stack (redis-server, queue, scheduler and binder as processes):
one tenant submits many small jobs, the other a few large ones, all at once, on a cluster that fits a
third of it. Ordered by DRF, each tenant holds half the GPUs whenever both have work waiting; ordered by
priority and age alone, whoever sorts first takes the whole cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import make_node, make_pod

from phalanx.model.keys import JOB_QUEUE_POLICY, KOORD_MIN_AVAILABLE, KOORD_NAME, KOORD_WAITING_TIME, SIM_DURATION
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
