"""The binder's view waits for its first lists on behalf of PodGroup reports only until a bound after its watches
started, or after the first bind or report let a paced list go on: a view that cannot list holds each report
back once, not each for the whole bound again."""

from __future__ import annotations

import time
from typing import Any

from phalanx.backends.cluster_view import ClusterView


class Unreachable:
    """An API server that refuses every list."""

    def __init__(self) -> None:
        self.calls = 0

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        raise ConnectionError("connection refused")

    list_pod_for_all_namespaces = list_node = _refuse


def test_reports_wait_for_the_first_lists_until_the_bound_after_the_start_not_each_for_it() -> None:
    view = ClusterView(Unreachable(), "phalanx")
    assert view.wait_first_lists(5.0) is False  # not started: nothing to wait for
    view.start()
    try:
        t0 = time.monotonic()
        assert view.wait_first_lists(0.3) is False
        first = time.monotonic() - t0
        t1 = time.monotonic()
        assert view.wait_first_lists(0.3) is False  # the bound has passed: no second wait
        second = time.monotonic() - t1
        view.want()  # the first bind or report: a paced list goes on from now, so the bound counts from now
        t2 = time.monotonic()
        assert view.wait_first_lists(0.3) is False
        third = time.monotonic() - t2
        view.want()
        t3 = time.monotonic()
        assert view.wait_first_lists(0.3) is False  # only the first bind or report moves the bound
        fourth = time.monotonic() - t3
    finally:
        view.stop(1.0)
    assert 0.25 <= first < 2.0 and second < 0.1 and 0.25 <= third < 2.0 and fourth < 0.1
