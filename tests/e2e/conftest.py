"""The compose end-to-end test's stack: one per session, brought up once and torn down (`down -v`) after.

Skipped, with the reason, unless PHALANX_E2E=1 (`make e2e-compose` sets it) and podman, runc, netavark,
aardvark-dns, Go and root are there. The times measured are printed at the end of the run.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from compose_e2e import TIMINGS, Stack, down, prepare, problem, up


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    reason = problem()
    if reason:
        pytest.skip(reason)
    workdir = Path(tempfile.mkdtemp(prefix="phalanx-e2e-"))
    prepared = prepare(workdir)
    try:
        up(prepared)
        yield prepared
    finally:
        down(prepared, workdir / "compose.log")
        print(f"\ncompose logs: {workdir / 'compose.log'}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TIMINGS:
        terminalreporter.section("compose end-to-end: measured")
        for name, seconds in TIMINGS.items():
            terminalreporter.write_line(f"{name}: {seconds:.1f} s")
