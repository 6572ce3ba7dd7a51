"""glibc malloc's arenas in the services' processes.

glibc gives a thread that finds the allocator busy an arena of its own, up to eight per core, and each arena
keeps the memory freed into it for that arena's next allocations. Python's small objects come from its own
pools, but everything above 512 bytes is glibc's: watch pages, HTTP bodies, JSON texts, protobuf buffers.
A service's threads (gRPC's pool, the watches, the write lanes) each decode such buffers, so each arena
ends up holding its own peak of them. Two arenas keep the peak near one thread's (a bench-k8s gang burst on
the project's 2-core VM: the services' summed peak RSS 12-17 MiB lower on the burst shapes; issue 25's
notes in bench/README.md), and the few threads that run at once here seldom wait on each other's lock.

`MALLOC_ARENA_MAX`, glibc's own variable, wins: glibc applied it before Python started, so nothing is
changed here when it is set.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping

ARENAS_ENV = "MALLOC_ARENA_MAX"
DEFAULT_ARENAS = 2
_M_ARENA_MAX = -8  # malloc.h


def limit_arenas(environ: Mapping[str, str] = os.environ, arenas: int = DEFAULT_ARENAS) -> int | None:
    """Caps this process's malloc arenas at `arenas` (before its threads start); returns the cap, or None
    when the operator set MALLOC_ARENA_MAX or the C library is not glibc (musl and macOS have no arenas)."""
    if environ.get(ARENAS_ENV, "").strip():
        return None
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return arenas if mallopt(_M_ARENA_MAX, arenas) == 1 else None
