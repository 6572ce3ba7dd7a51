"""StarvationReservation: keeps other pods off the nodes reserved for a starving gang, except where they
cannot delay it (backfill): capacity the gang does not need there, or a pod of known duration that ends
before the gang could start anyway. It keeps pods of no higher priority off the nodes nominated for a
preempting gang the same way. With no reservation it passes every node at the cost of one check."""

from __future__ import annotations

from collections import Counter

import numpy as np

from phalanx.framework.holds import CapacityHold
from phalanx.framework.masks import everywhere
from phalanx.framework.plugin import PodRequest
from phalanx.framework.snapshot import Snapshot


class StarvationReservation:
    name = "StarvationReservation"

    def filter(self, req: PodRequest, snap: Snapshot) -> np.ndarray:
        if not snap.reservation and not snap.nominated:
            return everywhere(len(snap))
        ok: np.ndarray | None = None
        for hold in _applying(req, snap):
            allowed = _allowed(req, snap, hold)
            if allowed is not None:
                ok = allowed if ok is None else ok & allowed
        return everywhere(len(snap)) if ok is None else ok

    def explain(self, req: PodRequest, snap: Snapshot, rejected: np.ndarray) -> Counter[str]:
        out: Counter[str] = Counter()
        left = rejected.copy()
        for hold in _applying(req, snap):
            allowed = _allowed(req, snap, hold)
            if allowed is None:
                continue
            here = left & ~allowed
            if here.any():
                out[f"node(s) reserved for {hold.kind} {hold.gang}"] += int(here.sum())
                left &= allowed
        return out


def _applying(req: PodRequest, snap: Snapshot) -> list[CapacityHold]:
    pod = req.pod
    return [
        h
        for h in (*snap.reservation, *snap.nominated)
        if h.gang != pod.gang and h.generation == snap.generation and (h.priority is None or pod.priority <= h.priority)
    ]


def _allowed(req: PodRequest, snap: Snapshot, hold: CapacityHold) -> np.ndarray | None:
    """Where the pod may go as far as `hold` is concerned; None: anywhere."""
    d = req.pod.duration
    if d is not None and hold.now + d <= hold.earliest_start:
        return None  # ends before the gang could start: cannot delay it
    ok = ~hold.mask
    cols = req.cols
    if len(cols) and int(cols.max()) < hold.hold.shape[1]:
        rows = hold.rows
        spare = snap.cap[np.ix_(rows, cols)] - snap.used[np.ix_(rows, cols)] - hold.hold[:, cols]
        ok[rows[(spare >= req.amounts).all(axis=1)]] = True  # capacity the gang does not need there
    return ok
