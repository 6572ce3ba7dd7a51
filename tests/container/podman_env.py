"""podman for the container tests: the wrapper with this machine's options, and what keeps it from working."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PODMAN_WRAPPER = REPO / "hack" / "podman.sh"  # podman with runc and the host's ulimits, see there
BUILD_BASE = REPO / "hack" / "build-base-image.sh"
DEFAULT_BASE = "localhost/phalanx-base:bookworm"

# Name -> human-readable value, filled by the tests, printed by pytest_terminal_summary.
MEASURED: dict[str, str] = {}


def podman_problem() -> str | None:
    """Why podman cannot run the image tests here, or None."""
    if shutil.which("podman") is None:
        return "podman is not installed (Debian/Ubuntu: apt-get install podman runc; see scripts/ensure-system-deps.sh)"
    try:
        subprocess.run([str(PODMAN_WRAPPER), "info"], check=True, capture_output=True, timeout=60)
    except subprocess.CalledProcessError as exc:
        return f"`podman info` fails: {exc.stderr.decode(errors='replace').strip()[-300:]}"
    except subprocess.TimeoutExpired:
        return "`podman info` did not answer in 60 s"
    return None


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Runs hack/podman.sh with `args`; fails with podman's stderr when `check` and it fails."""
    proc = subprocess.run([str(PODMAN_WRAPPER), *args], capture_output=True, text=True, timeout=timeout, cwd=REPO)
    if check and proc.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc
