"""A service's stop is bounded: a thread that never ends cannot keep the process alive past the bound."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

_CODE = """
import threading, time
from phalanx.rpc.server import _exit_anyway
threading.Thread(target=lambda: time.sleep(60)).start()  # non-daemon: the interpreter's exit would wait for it
threading.Thread(target=_exit_anyway, args=("test", 0.3), daemon=True).start()
"""


@pytest.mark.starts_processes
def test_a_stuck_thread_does_not_keep_a_stopping_service_alive() -> None:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", _CODE], capture_output=True, text=True, timeout=30)
    assert time.monotonic() - started < 10
    assert done.returncode == 1
    assert "test: still running 0 s after the signal" in done.stderr
