"""Fault injection for crash tests: PHALANX_FAULT_EXIT_AFTER_COMMITS=N kills the process right after its
N-th successful state commit, the worst moment for a scheduler to die. Unset, nothing is installed."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from phalanx.state.store import StateStore, Txn

log = logging.getLogger(__name__)


def install_fault_hooks(store: StateStore, environ: Mapping[str, str]) -> None:
    raw = environ.get("PHALANX_FAULT_EXIT_AFTER_COMMITS", "")
    if not raw:
        return
    limit = int(raw)
    original = store.apply
    count = 0

    def apply(txn: Txn) -> tuple[bool, str]:
        nonlocal count
        ok, reason = original(txn)
        if ok and txn.reserve:
            count += 1
            if count >= limit:
                log.error("fault injection: exiting after commit %d", count)
                os._exit(86)
        return ok, reason

    store.apply = apply  # type: ignore[method-assign]
