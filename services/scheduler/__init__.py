"""Sets the collector's thresholds before __main__'s imports run (phalanx/gc_tuning.py says why here)."""

from phalanx.gc_tuning import tune

tune()
