"""Before __main__'s imports run: the collector's thresholds (phalanx/gc_tuning.py says why here) and, before
any thread starts, malloc's arenas (phalanx/malloc_tuning.py)."""

from phalanx.gc_tuning import tune
from phalanx.malloc_tuning import limit_arenas

tune()
limit_arenas()
