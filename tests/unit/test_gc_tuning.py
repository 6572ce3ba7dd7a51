"""The services' collector thresholds: the default, an override, and a malformed value refused by name."""

from __future__ import annotations

import gc

import pytest

from phalanx.gc_tuning import DEFAULT_THRESHOLDS, GC_ENV, thresholds, tune


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
