"""Tentative changes to gangs, applied to memory only once Redis has accepted them.

A scheduling attempt adds operations to a statement; the gang manager's decisions within the attempt read
the statement's working copies, so they see the attempt's own changes. The scheduler sends the operations
to Redis with the attempt's reservations; on success the manager installs the working copies
(`GangManager.commit`), on a conflict the statement is dropped and memory never changed.
"""

from __future__ import annotations

from collections.abc import Callable

from phalanx.gang.ops import GangOp
from phalanx.gang.record import GangRecord


class GangStatement:
    def __init__(self, committed: Callable[[str], GangRecord]) -> None:
        self._committed = committed  # the manager's record of a gang (created empty when it has none)
        self.working: dict[str, GangRecord] = {}
        self.ops: list[GangOp] = []

    def record(self, key: str) -> GangRecord:
        """The gang's record as this statement would leave it."""
        rec = self.working.get(key)
        if rec is None:
            rec = self.working[key] = self._committed(key).copy()
        return rec

    def add(self, op: GangOp) -> None:
        op.apply(self.record(op.gang))
        self.ops.append(op)
