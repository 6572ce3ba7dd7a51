"""The answers of a plugin with nothing to say: a filter that rejects no node, a score that prefers none.

Each is one shared read-only array per length, which the framework recognises by identity and skips: most
pods ask nothing of most filters (no node selector, no affinity, no GPU, no reservation), and with these
a filter or score with nothing to say costs a function call instead of an array and a reduction."""

from __future__ import annotations

import numpy as np

_EVERYWHERE: list[np.ndarray] = [np.ones(0, dtype=bool)]
_INDIFFERENT: list[np.ndarray] = [np.zeros(0)]


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False  # shared: a caller that tried to change it in place would change everyone's
    return a


def everywhere(n: int) -> np.ndarray:
    """The all-True mask over n nodes (read-only)."""
    if len(_EVERYWHERE[0]) != n:
        _EVERYWHERE[0] = _frozen(np.ones(n, dtype=bool))
    return _EVERYWHERE[0]


def indifferent(n: int) -> np.ndarray:
    """Scores of 0 for n candidates (read-only)."""
    if len(_INDIFFERENT[0]) != n:
        _INDIFFERENT[0] = _frozen(np.zeros(n))
    return _INDIFFERENT[0]
