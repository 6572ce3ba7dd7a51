"""Phalanx: all-or-nothing gang scheduling for Kubernetes."""

import os

# numpy's OpenBLAS starts a thread per core when numpy is imported, and those threads spin after each
# matrix product. The scheduler's only products are the GPU-fragmentation score's small matrices, and on
# a node it shares with two other services those threads cost more CPU than they save (about 0.1 s at
# every start). A value set by the operator wins; this runs before any Phalanx module imports numpy.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# Before any Phalanx module defines a dataclass: their generated methods' code comes from the cache that
# `python -m phalanx.precompile` built (phalanx.dataclass_code), instead of being compiled at every import.
from phalanx import dataclass_code as _dataclass_code  # noqa: E402

_dataclass_code.install()
