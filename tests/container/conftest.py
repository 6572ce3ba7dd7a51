"""Fixtures for the container image tests: podman, the base image, and the numbers the tests measure.

The image tests (test_image.py) run when PHALANX_IMAGE_TESTS=1 (`make test`) or PHALANX_E2E=1 (`make
e2e-image`) and need podman able to run containers; under `make test` a podman that cannot is a failure,
otherwise they are skipped with the reason, as they are when the Debian base cannot be built
here (debootstrap, root). The import checks (test_service_imports.py) need none of that and always run.

`make e2e-image` runs them; the measured numbers are printed at the end of the run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest
from podman_env import BUILD_BASE, DEFAULT_BASE, MEASURED, REPO, podman, podman_problem


@pytest.fixture(scope="session")
def podman_available() -> None:
    # `make test` sets PHALANX_IMAGE_TESTS=1 (after installing podman and building the base), `make e2e-image`
    # PHALANX_E2E=1; a bare `pytest` skips them: building the image takes minutes on a cold machine.
    required = os.environ.get("PHALANX_IMAGE_TESTS", "") == "1"
    if not required and os.environ.get("PHALANX_E2E", "") != "1":
        pytest.skip(
            "container image tests run with PHALANX_IMAGE_TESTS=1 (make test) or PHALANX_E2E=1 (make e2e-image)"
        )
    problem = podman_problem()
    if problem and required:
        pytest.fail(f"make test runs the image tests, but podman cannot run containers here: {problem}")
    if problem:
        pytest.skip(problem)


@pytest.fixture(scope="session")
def base_image(podman_available: None) -> str:
    """The image to build on: PHALANX_TEST_BASE_IMAGE (e.g. python:3.11-slim where Docker Hub is reachable),
    else the Debian base hack/build-base-image.sh makes (built here if missing)."""
    chosen = os.environ.get("PHALANX_TEST_BASE_IMAGE", "")
    if chosen:
        return chosen
    if podman("image", "exists", DEFAULT_BASE, check=False).returncode == 0:
        return DEFAULT_BASE
    if shutil.which("debootstrap") is None or os.geteuid() != 0:
        why = (
            f"{DEFAULT_BASE} is missing and cannot be built here (hack/build-base-image.sh needs root and "
            "debootstrap); or set PHALANX_TEST_BASE_IMAGE to a pullable Python 3.11 image"
        )
        if os.environ.get("PHALANX_IMAGE_TESTS", "") == "1":
            pytest.fail(why)  # `make test` promised these tests
        pytest.skip(why)
    proc = subprocess.run([str(BUILD_BASE)], capture_output=True, text=True, timeout=1200, cwd=REPO)
    assert proc.returncode == 0, f"hack/build-base-image.sh failed:\n{proc.stderr[-3000:]}"
    return DEFAULT_BASE


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if MEASURED:
        terminalreporter.section("container image: measured")
        for name, value in MEASURED.items():
            terminalreporter.write_line(f"{name}: {value}")


@pytest.fixture
def measured() -> Iterator[dict[str, str]]:
    yield MEASURED
