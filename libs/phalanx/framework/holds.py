"""Capacity held for a gang, as the filters see it on the snapshot: for a starving gang (see
phalanx.scheduling.reservation, which computes it each round) or for a preempting gang while its victims
terminate (phalanx.preemption.nomination); phalanx.plugins.reservation_filter keeps other pods off it."""

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
    # Pods of higher priority than this are not kept off (a preemption nomination, like kube-scheduler's);
    # None: every other pod is (a starving gang's reservation).
    priority: int | None = None
    kind: str = "starving gang"  # for the filter's message: "node(s) reserved for <kind> <gang>"
