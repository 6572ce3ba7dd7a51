"""The binder's metrics: how long each batch took, and what became of each pod."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter

from phalanx.metrics.catalog import BIND_DURATION, BIND_RESULTS_TOTAL
from phalanx.model.binding import BindResult, BindStatus

# phalanx_bind_results_total{result}: the label is the status's value ("bound", "rolled_back", ...).
_COUNTERS: dict[BindStatus, Counter] = {status: BIND_RESULTS_TOTAL.labels(status.value) for status in BindStatus}
_DURATION = BIND_DURATION.labels()


def record_bind(results: Iterable[BindResult], seconds: float, batches: int = 1) -> None:
    """`batches` bound together in `seconds`, answered with `results` (every pod of them)."""
    tally: dict[BindStatus, int] = {}
    for r in results:
        tally[r.status] = tally.get(r.status, 0) + 1
    for status, n in tally.items():
        _COUNTERS[status].inc(n)
    if batches:
        _DURATION.observe(seconds, batches)
