"""One queued pod's record: what orders it, where it waits, and what happened to it so far."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from phalanx.queueing.hints import Hint


class SubQueue(str, Enum):
    ACTIVE = "active"
    BACKOFF = "backoff"
    UNSCHEDULABLE = "unschedulable"
    IN_FLIGHT = "in_flight"


@dataclass
class Entry:
    key: str
    priority: int
    created_at: float
    gang: str
    gang_created_at: float
    payload: Any  # what a pop hands out (the caller's, carried as is)
    where: SubQueue = SubQueue.ACTIVE
    attempts: int = 0
    backoff_until: float = 0.0
    unschedulable_since: float = 0.0
    move_seq_at_pop: int = 0  # the hint moves' event count when it was popped (see HintMoves.missed)
    # Stamped each time it joins the active or backoff heap; a heap item with another stamp is stale
    # (heaps are cleaned lazily). -1: in neither.
    version: int = 0
    lent_to: str = ""  # consumer name while in flight
    hint: Hint | None = None  # while unschedulable: what may help it (None: any event)
    tenant: str = ""  # a DRF job's tenant, whose dominant share orders it; "" for a job ordered by priority
