"""The services' malloc arenas: capped at two before any thread starts, unless the operator set glibc's own
MALLOC_ARENA_MAX. Each check runs in a fresh interpreter (the cap is per process and cannot be undone)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from phalanx.malloc_tuning import ARENAS_ENV, DEFAULT_ARENAS, limit_arenas

# Eight threads malloc at once (glibc gives a thread that finds the arena busy one of its own), then
# malloc_info's XML is counted: one <heap> per arena.
_ARENAS_AFTER_THREADS = """
import ctypes, os, tempfile, threading
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = (ctypes.c_void_p,)
start = threading.Barrier(8)
def work():
    start.wait()
    blocks = [libc.malloc(4096) for _ in range(2000)]
    for b in blocks:
        libc.free(b)
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
libc.fopen.restype = ctypes.c_void_p
libc.malloc_info.argtypes = (ctypes.c_int, ctypes.c_void_p)
libc.fclose.argtypes = (ctypes.c_void_p,)
fd, path = tempfile.mkstemp()
os.close(fd)
fp = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, fp)
libc.fclose(fp)
print(open(path).read().count("<heap nr="))
os.unlink(path)
"""


def _glibc() -> bool:
    import ctypes

    return hasattr(ctypes.CDLL(None), "malloc_info")


def _arenas(prelude: str, env: dict[str, str] | None = None) -> int:
    import os

    environ = {k: v for k, v in os.environ.items() if k != ARENAS_ENV} | (env or {})
    out = subprocess.run(
        [sys.executable, "-c", prelude + _ARENAS_AFTER_THREADS],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=environ,
    )
    return int(out.stdout.strip().splitlines()[-1])


pytestmark = [
    pytest.mark.starts_processes,
    pytest.mark.skipif(not sys.platform.startswith("linux") or not _glibc(), reason="glibc's arenas"),
]


def test_busy_threads_get_arenas_of_their_own_without_the_cap() -> None:
    """The probe itself: without the cap, eight threads allocating at once make more than two arenas."""
    assert _arenas("") > DEFAULT_ARENAS


@pytest.mark.parametrize(
    "package", ["phalanx_queue", "phalanx_binder", "phalanx_scheduler", "phalanx_controller", "phalanx_combined"]
)
def test_each_service_caps_its_arenas_before_its_threads_start(package: str) -> None:
    assert _arenas(f"import {package}\n") <= DEFAULT_ARENAS


def test_the_operators_malloc_arena_max_wins() -> None:
    assert limit_arenas({ARENAS_ENV: "4"}) is None
    assert _arenas("import phalanx_queue\n", {ARENAS_ENV: "4"}) > DEFAULT_ARENAS
