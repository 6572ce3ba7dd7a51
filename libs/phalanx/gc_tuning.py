"""The services' garbage-collector thresholds.

CPython collects its youngest generation every 700 net allocations of container objects, and every such
collection also walks what survived into it. A scheduler decodes thousands of JSON objects a second (watch
events: every dict and list in them is a container), so the default spent 12-14% of the scheduler's CPU in
the collector (perf on a bench-k8s gang run: gc_collect_main, visit_decref, visit_reachable). Memory is
freed by reference counting all the same; the collector only finds cycles, which Phalanx's hot path does
not make, so collecting 50 times less often costs little memory and most of that CPU back.

`PHALANX_GC_THRESHOLDS=a,b,c` sets other thresholds (`700,10,10` is CPython's own).

Each service calls `tune()` from its package's `__init__`, which `python -m` (and a console script) runs
before `__main__` and its imports: the imports themselves, some 600 modules whose objects mostly live as long
as the process, then run under these thresholds (importing the scheduler: 409-420 ms of CPU under CPython's,
361-377 ms with the collector off, on this project's 2-core VM).
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Callable, Mapping

GC_ENV = "PHALANX_GC_THRESHOLDS"
DEFAULT_THRESHOLDS = (50_000, 20, 10)


def thresholds(environ: Mapping[str, str] = os.environ) -> tuple[int, int, int]:
    """The thresholds `environ` asks for; a malformed value is refused naming the variable."""
    raw = environ.get(GC_ENV, "").strip()
    if not raw:
        return DEFAULT_THRESHOLDS
    parts = [p.strip() for p in raw.split(",")]
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise SystemExit(f"{GC_ENV}={raw!r}: must be three positive integers a,b,c (CPython's own: 700,10,10)")
    return int(parts[0]), int(parts[1]), int(parts[2])


def tune(environ: Mapping[str, str] = os.environ) -> tuple[int, int, int]:
    """Sets the thresholds for this process; returns them."""
    chosen = thresholds(environ)
    gc.set_threshold(*chosen)
    return chosen


def freeze_heap() -> None:
    """Moves every object alive now into the collector's permanent generation, where no collection looks
    again (constant time; gc.get_freeze_count() is not: it walks them all, 40 ms in the scheduler).

    Called once a service has started (its imports, and the scheduler's first list of the cluster): those
    objects live as long as the process, yet each full collection walked them all, a pause in every
    thread at once (60 ms of the scheduler's 123-151 ms ones in a steady-arrival run was its imports).
    Frozen objects are still freed by reference counting when they are dropped; only a cycle among them
    would stay, and start-up makes none worth keeping track of."""
    gc.freeze()


_pause_lock = threading.Lock()
_pauses = 0  # pauses not yet resumed, in this process
_enable_after = False  # whether the collector was on when the first of them began


def pause_collection(limit_seconds: float) -> Callable[[], None]:
    """Turns the collector off until the returned function is called, or `limit_seconds` have passed.

    For the scheduler's first list of the cluster: tens of thousands of pods and nodes decoded and kept, so
    every collection in the meantime walks a young generation that only grows and frees nothing (Phalanx
    makes no cycles there), and full collections walk all of it again. The objects are frozen once the list
    is applied (freeze_heap), so they are never walked at all. The limit bounds what a list that never
    finishes (an unreachable API server) could let cyclic garbage pile up to. Idempotent.

    Pauses nest: in the combined layout the binder's and the scheduler's first lists overlap in one process,
    and the collector comes back when the last of them resumes, not the first."""
    global _pauses, _enable_after
    with _pause_lock:
        if _pauses == 0:
            _enable_after = gc.isenabled()
        _pauses += 1
        gc.disable()
    resumed = False

    def resume() -> None:
        global _pauses
        nonlocal resumed
        with _pause_lock:
            if resumed:
                return
            resumed = True
            _pauses -= 1
            if _pauses == 0 and _enable_after:
                gc.enable()
        timer.cancel()

    timer = threading.Timer(limit_seconds, resume)
    timer.daemon = True
    timer.name = "gc-pause-limit"
    timer.start()
    return resume


def pause_until_frozen(limit_seconds: float) -> Callable[[], None]:
    """pause_collection for a service's first lists; the returned function freezes what they made
    (freeze_heap) and then resumes collection."""
    resume = pause_collection(limit_seconds)

    def frozen_then_resumed() -> None:
        freeze_heap()
        resume()

    return frozen_then_resumed
