"""numpy's BLAS thread pool stays at one thread under Phalanx unless the operator asks for more."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.starts_processes  # each check is a fresh interpreter

_THREADS_AFTER_NUMPY = (
    "import os, phalanx, numpy; "
    "numpy.ones((64, 64), dtype=numpy.float32) @ numpy.ones((64, 64), dtype=numpy.float32); "
    "print(len(os.listdir('/proc/self/task')))"
)


def _threads(extra_env: dict[str, str]) -> int:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env.update(extra_env)
    out = subprocess.run(
        [sys.executable, "-c", _THREADS_AFTER_NUMPY], env=env, check=True, capture_output=True, text=True
    ).stdout
    return int(out.strip())


def test_importing_phalanx_first_keeps_openblas_to_the_calling_thread() -> None:
    assert _threads({}) == 1


def test_an_operators_setting_wins() -> None:
    assert _threads({"OPENBLAS_NUM_THREADS": "2"}) == 2
