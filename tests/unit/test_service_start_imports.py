"""What a service's start imports: only what it runs with. Each check is a fresh interpreter, so nothing an
earlier test imported can hide an import."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.starts_processes  # each check is a fresh interpreter


def _modules_after(code: str, tmp: Path | None = None) -> set[str]:
    """Every module loaded once `code` has run in a fresh interpreter."""
    script = code + "\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def _loaded_after(code: str, tmp: Path | None = None) -> set[str]:
    """The top-level packages of _modules_after."""
    return {n.split(".")[0] for n in _modules_after(code, tmp)}


def test_the_scheduler_without_a_profile_file_does_not_load_yaml() -> None:
    # In a cluster the scheduler reads no YAML at all (in-cluster credentials, no --profile): PyYAML's
    # import is 20-40 ms of every start.
    loaded = _loaded_after(
        "import phalanx_scheduler.__main__\nfrom phalanx.framework.profile import load_profile\nload_profile(None)"
    )
    assert "phalanx" in loaded and "numpy" in loaded  # the scheduler's modules did load
    assert "yaml" not in loaded


def test_a_profile_file_still_loads(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text("scores:\n  LeastAllocated: 2\n")
    code = textwrap.dedent(
        """
        from phalanx.framework.profile import load_profile
        print(load_profile("p.yaml"))
        """
    )
    assert "yaml" in _loaded_after(code, tmp_path)


def test_the_scheduler_does_not_import_numpys_random_generators() -> None:
    # numpy imports numpy.random on first use only: 17 ms of a start for the GPU plugin's 64 hash weights,
    # which the standard library's generator (loaded anyway) draws as well.
    loaded = _modules_after("import phalanx_scheduler.__main__")
    assert "numpy" in loaded and "numpy.random" not in loaded
