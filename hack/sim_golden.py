"""Simulation fingerprints: the simulator's JSON report for the demo and eight varied workloads, written to a
directory so that two trees (before and after a restructuring) can be compared with `diff -r`.

    .venv/bin/python hack/sim_golden.py OUT_DIR

The workloads: the five examples, two synthetic streams (`phalanx trace synthetic`), and three built here
(DRF between two tenants with priorities and preemption, every gang-declaring form side by side with
affinity and spread, and Strict/NonStrict gangs with GangGroups and timeouts). `wallSeconds` (wall-clock
time) is removed from each report and workload paths are cut to their file names; everything else must be
identical for behaviour to be unchanged.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from builders import make_node, make_pod, make_podgroup  # noqa: E402

from phalanx.model.keys import (  # noqa: E402
    JOB_QUEUE_POLICY,
    KOORD_GROUPS,
    KOORD_MIN_AVAILABLE,
    KOORD_MODE,
    KOORD_NAME,
    KOORD_TOTAL_NUMBER,
    KOORD_WAITING_TIME,
    LABEL_X_K8S_PODGROUP,
    LIGHT_MIN_AVAILABLE,
    LIGHT_NAME,
    SIM_DURATION,
    VOLCANO_GROUP_NAME,
)

PHALANX = str(ROOT / ".venv" / "bin" / "phalanx")


def _pod(ns: str, name: str, gpus: int, at: int, seconds: int, **annotations: str) -> Any:
    b = (
        make_pod(name, namespace=ns)
        .scheduler("phalanx")
        .container()
        .gpu(gpus)
        .cpu("1")
        .label("job", name.rsplit("-", 1)[0])
        .created(f"2026-01-01T00:{at // 60:02d}:{at % 60:02d}Z")
        .annotation(SIM_DURATION, f"{seconds}s")
    )
    for k, v in annotations.items():
        b = b.annotation(k, v)
    return b


def _koord(ns: str, job: str, n: int, gpus: int, at: int, seconds: int, **extra: str) -> list[dict[str, Any]]:
    ann = {KOORD_NAME: job, KOORD_MIN_AVAILABLE: str(n), KOORD_WAITING_TIME: "60s", **extra}
    return [_pod(ns, f"{job}-{i}", gpus, at, seconds, **ann).build() for i in range(n)]


def _nodes(count: int, gpus: int, zones: int = 2) -> list[dict[str, Any]]:
    return [
        make_node(f"n{i}")
        .cpu("64")
        .memory("256Gi")
        .gpu(gpus)
        .label("topology.kubernetes.io/zone", f"z{i % zones}")
        .label("kubernetes.io/hostname", f"n{i}")
        .build()
        for i in range(count)
    ]


def drf_preemption() -> list[dict[str, Any]]:
    """Two tenants ordered by DRF; later high-priority gangs preempt low-priority ones."""
    out = _nodes(6, 8)
    for j in range(24):
        out += _koord("team-a", f"a{j:02d}", 2, 1, j * 5, 120, **{JOB_QUEUE_POLICY: "DRF"})
    for j in range(8):
        out += _koord("team-b", f"b{j}", 2, 4, j * 7, 200, **{JOB_QUEUE_POLICY: "DRF"})
    for j in range(3):
        pods = _koord("team-c", f"urgent{j}", 4, 2, 60 + j * 30, 90)
        for p in pods:
            p["spec"]["priority"] = 1000
        out += pods
    return out


def every_form() -> list[dict[str, Any]]:
    """Each gang-declaring form once or twice, with anti-affinity and spread on some gangs."""
    out = _nodes(8, 4, zones=4)
    ns = "forms"
    out.append(make_podgroup("sp1", namespace=ns).min_member(3).set("spec.scheduleTimeoutSeconds", 30).build())
    out += [_pod(ns, f"sp1-{i}", 1, 0, 100).label(LABEL_X_K8S_PODGROUP, "sp1").build() for i in range(3)]
    vc = make_podgroup("vc1", namespace=ns).min_member(2).build()
    vc["apiVersion"] = "scheduling.volcano.sh/v1beta1"
    out.append(vc)
    out += [_pod(ns, f"vc1-{i}", 2, 3, 80, **{VOLCANO_GROUP_NAME: "vc1"}).build() for i in range(2)]
    out += [
        _pod(ns, f"lw1-{i}", 1, 5, 60).label(LIGHT_NAME, "lw1").label(LIGHT_MIN_AVAILABLE, "4").build()
        for i in range(4)
    ]
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"job": "spread"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    for p in _koord(ns, "spread", 4, 1, 8, 150):
        p["spec"]["affinity"] = anti
        out.append(p)
    skew = [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"job": "zoned"}},
        }
    ]
    for p in _koord(ns, "zoned", 8, 1, 10, 120):
        p["spec"]["topologySpreadConstraints"] = skew
        out.append(p)
    out += _koord(ns, "toobig", 6, 8, 12, 60)  # cannot fit: waits, times out, stays out
    return out


def groups_and_modes() -> list[dict[str, Any]]:
    """GangGroups, NonStrict gangs over their minimum, and a Strict gang that must wait for capacity."""
    out = _nodes(4, 8)
    ns = "groups"
    group = json.dumps([f"{ns}/ps", f"{ns}/worker"])
    out += _koord(ns, "ps", 2, 1, 0, 300, **{KOORD_GROUPS: group})
    out += _koord(ns, "worker", 6, 2, 0, 300, **{KOORD_GROUPS: group})
    ns_pods = _koord(ns, "elastic", 10, 1, 5, 200, **{KOORD_MODE: "NonStrict", KOORD_TOTAL_NUMBER: "10"})
    for p in ns_pods:
        p["metadata"]["annotations"][KOORD_MIN_AVAILABLE] = "4"
    out += ns_pods
    out += _koord(ns, "strict", 4, 4, 20, 100, **{KOORD_MODE: "Strict"})
    out += _koord(ns, "late", 3, 2, 250, 50)
    return out


SYNTHETIC = {
    "synthetic-mixed": [
        "--nodes", "16x8gpu,64cpu,512Gi", "--gangs", "8x1@3", "--gangs", "2x4", "--gangs", "16x8@0.2",
        "--count", "150", "--rate", "20", "--arrivals", "poisson", "--duration", "2m-20m", "--seed", "7",
    ],
    "synthetic-models": [
        "--nodes", "8x8gpu,64cpu,512Gi,model=A100", "--nodes", "8x4gpu,32cpu,256Gi,model=V100",
        "--gangs", "4x2,model=A100@2", "--gangs", "2x1,model=V100|A100@3", "--gangs", "1x0",
        "--count", "200", "--rate", "30", "--duration", "1m-10m", "--seed", "11",
    ],
}  # fmt: skip


def _simulate(files: list[Path], out: Path, *extra: str) -> None:
    cmd = [PHALANX, "simulate", "--progress", "never", "-o", str(out), *extra]
    for f in files:
        cmd += ["-f", str(f)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    report = json.loads(out.read_text())
    report.get("summary", {}).pop("wallSeconds", None)
    report["workload"] = [Path(f).name for f in report.get("workload", [])]  # where the run wrote it: not behaviour
    out.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")


def main(out_dir: str) -> None:
    out = Path(out_dir)
    work = out / "workloads"
    work.mkdir(parents=True, exist_ok=True)
    examples = ROOT / "examples"
    _simulate([examples / "demo-two-jobs.yaml"], out / "demo-pod.json", "--mode", "pod", "--until", "1h")
    _simulate([examples / "demo-two-jobs.yaml"], out / "demo-gang.json", "--until", "1h")
    for name in ("seed003-deadlock", "knavigator-gang-burst", "phalanx-job", "phalanx-job-restarts"):
        _simulate([examples / f"{name}.yaml"], out / f"{name}.json", "--until", "2h")
    for name, args in SYNTHETIC.items():
        path = work / f"{name}.yaml"
        subprocess.run([PHALANX, "trace", "synthetic", *args, "-o", str(path)], check=True, stdout=subprocess.DEVNULL)
        _simulate([path], out / f"{name}.json")
    for build in (drf_preemption, every_form, groups_and_modes):
        path = work / f"{build.__name__}.yaml"
        path.write_text(yaml.safe_dump_all(build()))
        _simulate([path], out / f"{build.__name__}.json", "--until", "2h")
    print(f"wrote {len(list(out.glob('*.json')))} reports to {out}")


if __name__ == "__main__":
    main(sys.argv[1])
