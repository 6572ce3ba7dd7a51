"""Child processes that end with their parent (Linux), so an interrupted run leaves no servers behind."""

from __future__ import annotations

import ctypes
import signal
import sys
from typing import Callable

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn asking the kernel to SIGTERM the child when its parent dies (None off Linux)."""
    if not sys.platform.startswith("linux"):
        return None

    def preexec() -> None:
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        except OSError:  # no glibc: the child simply outlives an interrupted parent
            pass

    return preexec
