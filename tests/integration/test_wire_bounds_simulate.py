"""Issue 24's fuzz cases through `phalanx simulate`: a PodGroup scheduleTimeoutSeconds of 2^63, a 1 MB
annotation and thousands of labels on one pod each used to end the run in a gRPC traceback (the services
refused a request the intake had let through). Now the intake refuses the object with a one-line error
naming it and the field, and the rest of the workload runs, as for any other bad object (the simulator's
rule: only input with nothing usable at all fails the command)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import make_node, make_pod, make_podgroup

from phalanx.model.keys import LABEL_X_K8S_PODGROUP
from phalanx.model.limits import MAX_ENTRIES

pytestmark = pytest.mark.integration


def _pod(name: str) -> Any:
    return make_pod(name, "ns").scheduler("phalanx").container().cpu("1")


CASES = {
    "timeout": (
        [
            make_podgroup("pg", "ns").min_member(1).timeout(2**63).build(),
            _pod("p0").label(LABEL_X_K8S_PODGROUP, "pg").build(),
        ],
        "PodGroup ns/pg: spec.scheduleTimeoutSeconds: 9223372036854775808 is above the maximum 1000000000000 seconds",
    ),
    "annotation": (
        [_pod("p0").annotation("big", "x" * 2**20).build()],
        "Pod ns/p0: metadata.annotations[big]: 1048576 characters is above the maximum 262144",
    ),
    # 875,000 labels take most of a minute to parse as YAML; one past the bound is the same case (the
    # 875,000 are read in tests/unit/test_wire_bounds.py).
    "labels": (
        [
            _pod("p0").build()
            | {"metadata": {"name": "p0", "namespace": "ns", "labels": {f"l{i}": "v" for i in range(MAX_ENTRIES + 1)}}}
        ],
        f"Pod ns/p0: metadata.labels: {MAX_ENTRIES + 1} entries is above the maximum {MAX_ENTRIES}",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_simulate_names_the_object_and_field_instead_of_a_grpc_traceback(tmp_path: Path, case: str) -> None:
    bad, expected = CASES[case]
    good = _pod("good").build()
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump_all([make_node("n1").cpu("8").memory("16Gi").build(), good, *bad]))
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "phalanx.cli.main", "simulate", "-f", str(path), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in proc.stderr and "grpc" not in proc.stderr.lower(), proc.stderr
    assert proc.returncode == 0, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if expected in line]
    assert errors == [line for line in errors if line.strip().startswith("error: ")] and errors, proc.stderr
    report = json.loads(out.read_text())
    pods = {p["name"]: p for p in report["pods"]}
    assert pods["good"]["node"] == "n1"
    assert pods["p0"]["node"] is None and expected in pods["p0"]["reason"]  # its PodGroup's error, if refused
    assert any(expected in e for e in report["summary"]["errors"])
