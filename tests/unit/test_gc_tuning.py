"""The services' collector thresholds: the default, an override, and a malformed value refused by name."""

from __future__ import annotations

import gc

import pytest

from phalanx.gc_tuning import DEFAULT_THRESHOLDS, GC_ENV, freeze_heap, thresholds, tune


def test_default_and_override() -> None:
    assert thresholds({}) == DEFAULT_THRESHOLDS
    assert thresholds({GC_ENV: "700, 10,10"}) == (700, 10, 10)


@pytest.mark.parametrize("raw", ["700,10", "a,b,c", "0,10,10", "-1,2,3"])
def test_a_malformed_value_names_the_variable(raw: str) -> None:
    with pytest.raises(SystemExit, match=GC_ENV):
        thresholds({GC_ENV: raw})


def test_tune_sets_the_process_thresholds() -> None:
    before = gc.get_threshold()
    try:
        assert tune({GC_ENV: "1234,5,6"}) == (1234, 5, 6)
        assert gc.get_threshold() == (1234, 5, 6)
    finally:
        gc.set_threshold(*before)


@pytest.mark.starts_processes
@pytest.mark.parametrize(
    "package", ["phalanx_queue", "phalanx_binder", "phalanx_scheduler", "phalanx_controller", "phalanx_combined"]
)
def test_each_service_tunes_before_its_main_module_imports(package: str) -> None:
    """`python -m phalanx_x` imports the package before __main__: the thresholds must already be set when
    __main__'s own imports run (a fresh interpreter, so this process keeps its own)."""
    import subprocess
    import sys

    probe = (
        "import builtins, gc, sys\n"
        "seen = []\n"
        "real = builtins.__import__\n"
        "def spy(name, *a, **k):\n"
        f"    if name == 'grpc' and not seen and '{package}' in sys.modules: seen.append(gc.get_threshold())\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = spy\n"
        f"import {package}.__main__\n"
        "print(seen[0] if seen else gc.get_threshold())\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == str(DEFAULT_THRESHOLDS)


def test_freeze_heap_moves_what_lives_now_out_of_the_collections() -> None:
    import weakref

    class Kept:
        pass

    gc.unfreeze()
    kept = Kept()
    try:
        freeze_heap()
        assert gc.get_freeze_count() > 0
        assert not any(o is kept for o in gc.get_objects())  # no generation holds it: no collection walks it
        ref = weakref.ref(kept)
        del kept  # reference counting still frees a frozen object
        assert ref() is None
    finally:
        gc.unfreeze()


def test_pause_collection_resumes_once_called_or_at_its_limit() -> None:
    from waiting import wait_for

    from phalanx.gc_tuning import pause_collection

    assert gc.isenabled()
    try:
        resume = pause_collection(60.0)
        assert not gc.isenabled()
        resume()
        assert gc.isenabled()
        resume()  # idempotent
        assert gc.isenabled()

        pause_collection(0.05)  # never resumed by its caller: the limit does it
        assert not gc.isenabled()
        wait_for(gc.isenabled, 5, "the collector resumed at the pause's limit")
    finally:
        gc.enable()


def test_a_pause_over_a_disabled_collector_leaves_it_disabled() -> None:
    from phalanx.gc_tuning import pause_collection

    gc.disable()
    try:
        pause_collection(60.0)()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_overlapping_pauses_resume_collection_when_the_last_one_ends() -> None:
    """The combined layout: the binder's and the scheduler's first lists pause the collector in one
    process; the binder's finishing first must not turn it back on under the scheduler's list."""
    from phalanx.gc_tuning import pause_collection

    assert gc.isenabled()
    try:
        binder = pause_collection(60.0)
        scheduler = pause_collection(60.0)
        binder()
        assert not gc.isenabled()
        binder()  # resuming twice counts once
        assert not gc.isenabled()
        scheduler()
        assert gc.isenabled()
    finally:
        gc.enable()


def test_pause_until_frozen_freezes_then_resumes() -> None:
    from phalanx.gc_tuning import pause_until_frozen

    gc.unfreeze()
    try:
        done = pause_until_frozen(60.0)
        assert not gc.isenabled() and gc.get_freeze_count() == 0
        done()
        assert gc.isenabled() and gc.get_freeze_count() > 0
    finally:
        gc.enable()
        gc.unfreeze()
