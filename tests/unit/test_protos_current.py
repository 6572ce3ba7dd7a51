"""The committed generated code matches protos/ (what `make check-protos` checks)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.starts_processes
def test_generated_code_is_up_to_date() -> None:
    proc = subprocess.run(
        ["bash", "scripts/check-protos.sh"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_proto_path_equals_import_path() -> None:
    for proto in (REPO / "protos").rglob("*.proto"):
        module = proto.relative_to(REPO / "protos").with_suffix("")
        generated = REPO / "libs" / f"{module}_pb2.py"
        assert generated.exists(), f"{proto} has no generated module at {generated}"
        assert f"package {'.'.join(module.parts[:-1])};" in proto.read_text()
