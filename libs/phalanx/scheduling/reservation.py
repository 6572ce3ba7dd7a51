"""Reservations for starving gangs: a gang that has waited past the bound gets nodes kept for it.

The reservation is not stored anywhere: each round recomputes it from what memory mirrors of Redis (gang
specs and their creation times, gang records, node usage, the pods held on each node), so a scheduler
that restarts computes the same one and there is no second write to lose in a crash. Only the oldest
starving gangs hold reservations (at most `max_holds`, on disjoint nodes, picked oldest first), so a
reservation never waits on a younger one and two can never wait on each other. It ends by
itself when the gang reaches its minimum, is deleted, or times out (its record says so).

Pod shapes and start times are the two things learnt in memory: a gang's pod shape from its pods as they
are popped (after a restart, from the next pop of the gang, which the queue orders oldest first), and start
times only to allow backfilling by duration; without them the filter only backfills spare capacity.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from phalanx.framework.holds import CapacityHold
from phalanx.framework.snapshot import Snapshot
from phalanx.gang.manager import GangManager
from phalanx.model.objects import Resources
from phalanx.scheduling.ports import Popped


class ReservationPlanner:
    def __init__(self, bound_seconds: float, max_holds: int = 2) -> None:
        self.bound_seconds = bound_seconds  # <= 0: reservations off
        self.max_holds = max_holds
        self.shapes: dict[str, Resources] = {}  # gang -> the largest request of its pods seen
        self.started: dict[str, float] = {}  # pod -> when it was placed (for duration backfill)
        self.active: tuple[CapacityHold, ...] = ()

    @property
    def enabled(self) -> bool:
        return self.bound_seconds > 0

    def learn(self, items: Iterable[Popped]) -> None:
        for item in items:
            pod = item.pod
            if not pod.gang:
                continue
            shape = self.shapes.get(pod.gang)
            if shape is None:
                self.shapes[pod.gang] = dict(pod.requests)
            else:
                for r, v in pod.requests.items():
                    if v > shape.get(r, 0):
                        shape[r] = v

    def note_started(self, pod_key: str, now: float) -> None:
        self.started[pod_key] = now

    def forget(self, gang: str) -> None:
        self.shapes.pop(gang, None)

    def waited_since(self, gangs: GangManager, key: str) -> float | None:
        """When the gang started waiting: its creation (stored with its spec, so the same after a restart), or
        its first wait if that is earlier."""
        spec = gangs.specs.get(key)
        rec = gangs.records.get(key)
        times = [t for t in (spec.created_at if spec else None, rec.first_wait if rec else None) if t is not None]
        return min(times) if times else None

    def starving(self, now: float, gangs: GangManager) -> list[str]:
        """Gangs past the bound that still lack their minimum, oldest first (ties by key)."""
        out: list[tuple[float, str]] = []
        for key, spec in gangs.specs.items():
            if spec.invalid or key not in self.shapes:
                continue
            rec = gangs.records.get(key)
            if rec is not None and (rec.timed_out or rec.satisfied_at is not None or not rec.valid):
                continue
            if gangs.reached_minimum(key):
                continue
            since = self.waited_since(gangs, key)
            if since is not None and now - since >= self.bound_seconds:
                out.append((since, key))
        return [k for _, k in sorted(out)]

    def refresh(self, now: float, snapshot: Snapshot, gangs: GangManager) -> tuple[CapacityHold, ...]:
        """Recomputes the round's reservations and hands them to the filters on the snapshot."""
        holds: list[CapacityHold] = []
        taken = np.zeros(len(snapshot), dtype=bool)
        for key in self.starving(now, gangs):
            if len(holds) >= self.max_holds:
                break
            spec = gangs.specs[key]
            need = spec.min_available - gangs.placed_count(key)
            hold = plan(key, self.shapes[key], need, snapshot, now, self.started, taken)
            if hold is not None:
                holds.append(hold)
                taken |= hold.mask
        self.active = tuple(holds)
        snapshot.reservation = self.active
        if len(self.started) > 4 * max(64, sum(len(p) for p in snapshot.pods_by_node.values())):
            held = {k for pods in snapshot.pods_by_node.values() for k in pods}
            self.started = {k: t for k, t in self.started.items() if k in held}
        return self.active

    def note(self, gang: str) -> str:
        """What a gang's report adds when it holds a reservation."""
        for hold in self.active:
            if hold.gang == gang:
                return f"; holds a reservation on {len(hold.rows)} node(s) for its pods"
        return ""


def plan(
    gang: str,
    shape: Resources,
    need: int,
    snap: Snapshot,
    now: float,
    started: dict[str, float],
    taken: np.ndarray | None = None,
) -> CapacityHold | None:
    """Picks the nodes that need the least draining to take `need` pods of `shape`: most pods fitting in
    their free capacity now, then least used, then by name (rows are sorted by name), so the choice is a
    function of the state alone. None when the cluster cannot hold the gang even empty."""
    if need <= 0 or len(snap) == 0:
        return None
    cols = [snap.column[r] for r, v in sorted(shape.items()) if v > 0 and r in snap.column]
    amounts = np.array([shape[snap.resources[c]] for c in cols], dtype=np.int64)
    if not cols:
        return None
    cap, used = snap.cap[:, cols], snap.used[:, cols]
    slots_cap = (cap // amounts).min(axis=1)
    slots_free = ((cap - used).clip(min=0) // amounts).min(axis=1)
    order = np.lexsort((np.arange(len(snap)), used.sum(axis=1), -slots_free))
    rows: list[int] = []
    counts: list[int] = []
    left = need
    for i in order.tolist():
        if left <= 0:
            break
        if slots_cap[i] <= 0 or snap.nodes[i].unschedulable or (taken is not None and taken[i]):
            continue
        k = int(min(slots_cap[i], left))
        rows.append(i)
        counts.append(k)
        left -= k
    if left > 0:
        return None
    hold = np.zeros((len(rows), len(snap.resources)), dtype=np.int64)
    for n, k in enumerate(counts):
        hold[n, cols] = k * amounts
    start = max(_ready_at(snap, i, hold[n], now, started) for n, i in enumerate(rows))
    mask = np.zeros(len(snap), dtype=bool)
    mask[rows] = True
    return CapacityHold(gang, np.array(rows, dtype=np.intp), mask, hold, start, now, snap.generation)


def _ready_at(snap: Snapshot, row: int, needed: np.ndarray, now: float, started: dict[str, float]) -> float:
    """When the node frees `needed`, from the end times of the pods it holds. A pod whose end is not known
    may end at any moment, so it counts as ending now: the estimate errs early, never late."""
    short = needed - (snap.cap[row] - snap.used[row])
    if (short <= 0).all():
        return now
    ends: list[tuple[float, str, Resources]] = []
    for key, pod in snap.pods_on(row).items():
        t0 = started.get(key)
        end = t0 + pod.duration if (t0 is not None and pod.duration is not None) else now
        ends.append((max(end, now), key, pod.requests))
    for end, _, reqs in sorted(ends):
        for r, v in reqs.items():
            j = snap.column.get(r)
            if j is not None:
                short[j] -= v
        if (short <= 0).all():
            return end
    return now  # held by something the tracked pods do not explain: unknown, so assumed soon
