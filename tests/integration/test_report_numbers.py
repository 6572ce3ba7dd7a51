"""The report's numbers on a small workload checked by hand (through the real stack).

Cluster: two nodes of 2 GPUs (4 GPUs). Pods never finish. Arrivals, one per second:
  t0 p0  1 GPU                      -> gpu-a device 0           allocated 1.0, arrived 1.0
  t1 p1  0.5 of a GPU, on gpu-b     -> gpu-b device 0           allocated 1.5, arrived 1.5
  t2 p2  0.6 of a GPU, on gpu-a     -> gpu-a device 1           allocated 2.1, arrived 2.1
  t3 p3  2 GPUs                     -> no node has 2 free GPUs  allocated 2.1, arrived 4.1
  t4 p4  1 GPU                      -> gpu-b device 1           allocated 3.1, arrived 5.1
  t5 g0, t7 g1: a gang of two 0.4 shares (min 2) -> both bound at t7 (0.4 free on each node)
                                                                allocated 3.9, arrived 5.9
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import make_node, make_pod

from phalanx.model.keys import KOORD_MIN_AVAILABLE, KOORD_NAME
from phalanx.sim.driver import SimOptions
from phalanx.sim.run import simulate
from phalanx.sim.workload import load_workload

pytestmark = pytest.mark.integration
SHARE = "phalanx.dev/gpu-share"


def _pod(name: str, t: int, gpus: int = 0, share: str = "", node: str = "") -> Any:
    b = make_pod(name).scheduler("phalanx").container().cpu("1").created(f"2026-01-01T00:00:{t:02d}Z")
    if gpus:
        b = b.gpu(gpus)
    if share:
        b = b.request(SHARE, share).limit(SHARE, share)
    if node:
        b = b.node_selector("kubernetes.io/hostname", node)
    return b


def test_series_and_fgd_metric_match_the_hand_computed_values(tmp_path: Path) -> None:
    objects = [
        make_node(n).cpu("64").memory("256Gi").gpu(2).created("2026-01-01T00:00:00Z").build()
        for n in ("gpu-a", "gpu-b")
    ]
    objects += [
        _pod("p0", 0, gpus=1).build(),
        _pod("p1", 1, share="500m", node="gpu-b").build(),
        _pod("p2", 2, share="600m", node="gpu-a").build(),
        _pod("p3", 3, gpus=2).build(),
        _pod("p4", 4, gpus=1).build(),
        _pod("g0", 5, share="400m").annotation(KOORD_NAME, "g").annotation(KOORD_MIN_AVAILABLE, "2").build(),
        _pod("g1", 7, share="400m").annotation(KOORD_NAME, "g").annotation(KOORD_MIN_AVAILABLE, "2").build(),
    ]
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    report = simulate(load_workload([path]), SimOptions(), log_dir=tmp_path / "logs")

    pods = {p["name"]: p for p in report["pods"]}
    # Its last attempt was at t3, when it arrived: gpu-a had one whole GPU left, gpu-b a shared one (the
    # gang declared at t5 no longer retries unrelated pods, and no GPU freed afterwards).
    assert pods["p3"]["node"] is None
    assert pods["p3"]["reason"] == (
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had fewer than 2 entirely free GPU(s)"
    )
    assert (pods["p0"]["node"], pods["p2"]["node"]) == ("gpu-a", "gpu-a")
    assert (pods["p1"]["node"], pods["p4"]["node"]) == ("gpu-b", "gpu-b")
    assert pods["g0"]["boundAt"] == pods["g1"]["boundAt"] == 7.0

    s = report["series"]
    assert s["capacity"]["nvidia.com/gpu"] == 4
    by_t = {t: i for i, t in enumerate(s["t"])}
    expected = {
        0.0: (1.0, 1.0),
        1.0: (1.5, 1.5),
        2.0: (2.1, 2.1),
        3.0: (2.1, 4.1),
        4.0: (3.1, 5.1),
        5.0: (3.1, 5.5),
        7.0: (3.9, 5.9),
    }
    for t, (allocated, arrived) in expected.items():
        i = by_t[t]
        assert s["allocated"]["nvidia.com/gpu"][i] == pytest.approx(allocated), t
        assert s["arrivedGpuDemand"][i] == pytest.approx(arrived / 4), t
    assert s["pendingPods"][by_t[3.0]] == 1 and s["pendingPods"][by_t[5.0]] == 2 and s["pendingPods"][by_t[7.0]] == 1
    assert s["pendingGangs"][by_t[5.0]] == 1 and s["pendingGangs"][by_t[7.0]] == 0
    # The FGD metric: allocation when arrived demand first reached 90/100/110/130% of the GPUs.
    assert report["gpuAllocationAtDemand"] == {
        "0.9": pytest.approx(2.1 / 4),
        "1": pytest.approx(2.1 / 4),
        "1.1": pytest.approx(3.1 / 4),
        "1.3": pytest.approx(3.1 / 4),
    }
    assert report["gangWaits"] == [{"gang": "default/g", "waitSeconds": 2.0}]
