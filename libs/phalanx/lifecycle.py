"""A service started by a simulation or a test ends with the process that started it.

The starter sets PHALANX_PARENT_PID to its own pid; the service asks the kernel for SIGTERM when that
parent dies (its graceful-shutdown path), and exits at once if the parent is already gone. Unset, as in
a deployment, nothing changes.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from collections.abc import Mapping

PARENT_PID_ENV = "PHALANX_PARENT_PID"
_PR_SET_PDEATHSIG = 1
SIGNAL_POLL_S = 0.5  # the longest a signal another thread took waits for its handler (wait_for_stop_signal)


def exit_with_parent(environ: Mapping[str, str] = os.environ) -> None:
    raw = environ.get(PARENT_PID_ENV, "")
    if not raw:
        return
    try:
        parent = int(raw)
    except ValueError:
        raise SystemExit(f"{PARENT_PID_ENV}={raw!r}: expected the starting process's pid") from None
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        except (OSError, AttributeError):  # no prctl: the service outlives an interrupted parent
            return
    if os.getppid() != parent:  # the parent died before prctl took effect: nobody is left to signal us
        raise SystemExit(f"{PARENT_PID_ENV}={parent}: the starting process has already exited")


def wait_for_stop_signal() -> int:
    """Blocks until SIGTERM or SIGINT (its handlers installed here) and returns the signal's number. Python runs
    a handler on the main thread when that thread next runs Python code, and the kernel may hand a
    process-directed signal to any thread (a gRPC or watch thread), which does not wake the main thread from
    an untimed wait: the signal was noted, never handled, and the service ran on until its SIGKILL, skipping its
    graceful stop. Waking every SIGNAL_POLL_S runs the handler however the signal came."""
    came: list[int] = []
    stopped = threading.Event()

    def handle(signum: int, _frame: object) -> None:
        came.append(signum)
        stopped.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    while not stopped.wait(SIGNAL_POLL_S):
        pass
    return came[0]
