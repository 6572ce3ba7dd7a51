"""Runs before `python -m`'s __main__ and its imports: the collector's thresholds are set here so that the
imports themselves (some 600 modules, most of their objects long-lived) are not walked by full collections
(about 45 ms of the scheduler's start-up CPU on this project's 2-core VM; phalanx/gc_tuning.py says why the
thresholds)."""

from phalanx.gc_tuning import tune

tune()
