"""A capacity hold for a starving gang, as the filters see it on the snapshot (see
phalanx.scheduling.reservation, which computes it each round, and phalanx.plugins.reservation_filter)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CapacityHold:
    gang: str  # "namespace/name" of the gang the nodes are kept for
    rows: np.ndarray  # snapshot row of each reserved node
    mask: np.ndarray  # bool over all rows: True on reserved nodes
    hold: np.ndarray  # (len(rows), columns at build time): what the gang needs on each reserved node
    earliest_start: float  # the soonest the gang could start on its nodes (from known end times)
    now: float
    generation: int  # the snapshot's generation it was built for; stale after nodes change
