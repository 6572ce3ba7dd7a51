"""The binder's metrics: how long each batch took, and what became of each pod."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter

from phalanx.metrics.catalog import BIND_DURATION, BIND_RESULTS_TOTAL
from phalanx.v1 import binder_pb2

_RESULT_OF = {
    binder_pb2.BIND_STATUS_BOUND: "bound",
    binder_pb2.BIND_STATUS_FAILED: "failed",
    binder_pb2.BIND_STATUS_ROLLED_BACK: "rolled_back",
    binder_pb2.BIND_STATUS_GONE: "gone",
    binder_pb2.BIND_STATUS_PENDING: "pending",
}
_COUNTERS: dict[int, Counter] = {int(status): BIND_RESULTS_TOTAL.labels(result) for status, result in _RESULT_OF.items()}
_DURATION = BIND_DURATION.labels()


def record_bind(results: Iterable[binder_pb2.BindResult], seconds: float, batches: int = 1) -> None:
    """`batches` bound together in `seconds`, answered with `results` (every pod of them)."""
    tally: dict[int, int] = {}
    for r in results:
        tally[int(r.status)] = tally.get(int(r.status), 0) + 1
    for status, n in tally.items():
        counter = _COUNTERS.get(status)
        if counter is not None:
            counter.inc(n)
    if batches:
        _DURATION.observe(seconds, batches)
