"""PodGroup status: each gang's counters and the phase its pods imply, computed from the mirror's pods.

The mirror sees every pod of a gang (pending, bound, finished), so the counters (scheduled, running,
succeeded, failed) and the phase derived from them (phalanx.kube.podgroups.pods_phase) are computed here,
once per change of the gang's pods; the scheduler contributes the one fact the mirror cannot see, how
many of the gang's pods it holds reserved (placed, not bound yet).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

from phalanx.cluster.mirror import Mirror
from phalanx.kube import podgroups
from phalanx.model.binding import GangReport
from phalanx.model.objects import GangSpec
from phalanx.model.status import GangPhase


class _Counts(NamedTuple):
    """What was last reported of a PodGroup: its counters, and the phase its pods imply."""

    scheduled: int
    running: int
    succeeded: int
    failed: int
    phase: str


# A gang never reported: a new gang of pending pods is Pending without being told so (the scheduler reports
# its progress from there), so the first report goes out when a pod is placed, runs or ends.
_UNREPORTED = _Counts(0, 0, 0, 0, GangPhase.PENDING)


class GangCounts:
    """Which of our pods belong to which gang, and what each PodGroup's status was last reported as."""

    def __init__(self) -> None:
        self._members: dict[str, set[str]] = {}  # gang key -> our pods resolved to it
        self._counts: dict[str, _Counts] = {}  # gang -> the counters and phase last reported

    # -- membership --------------------------------------------------------------------------------------
    def move(self, key: str, old: str, new: str) -> bool:
        """Moves pod `key` from gang `old` to gang `new` ("" for none); whether `old` lost its last pod."""
        emptied = False
        if old and old != new:
            members = self._members.get(old, set())
            members.discard(key)
            if not members:
                self._members.pop(old, None)
                emptied = True
        if new:
            self._members.setdefault(new, set()).add(key)
        return emptied

    def in_use(self, gang: str) -> bool:
        return gang in self._members

    def gangs(self) -> list[str]:
        """Every gang with a pod of ours."""
        return sorted(self._members)

    def forget(self, gang: str) -> None:
        self._counts.pop(gang, None)

    # -- the status ---------------------------------------------------------------------------------------
    def reports(
        self,
        gangs: Iterable[str],
        mirror: Mirror,
        spec_of: Callable[[str], GangSpec | None],
        reserved: Callable[[str], int],
    ) -> list[GangReport]:
        """PodGroup counters and phase from the pods, for gangs declared by a PodGroup whose pods changed
        (deleted ones included: a gang that lost every pod goes back to Pending); unchanged ones are not
        reported again. `reserved(gang)`: its pods the scheduler placed and has not bound yet."""
        reports = []
        for gang in sorted(gangs):
            spec = spec_of(gang)
            if spec is None or podgroups.group_of(spec.source) is None:
                continue
            members = [p for k in self._members.get(gang, ()) if (p := mirror.pod(k)) is not None]
            live = [p for p in members if not p.finished]
            bound = sum(1 for p in live if p.node)
            running = sum(1 for p in members if p.phase == "Running")
            succeeded = sum(1 for p in members if p.phase == "Succeeded")
            failed = sum(1 for p in members if p.phase == "Failed")
            last = self._counts.get(gang, _UNREPORTED)
            phase = podgroups.pods_phase(
                spec.min_available,
                live=len(live),
                placed=bound + reserved(gang),
                bound=bound,
                running=running,
                succeeded=succeeded,
                failed=failed,
                previous=last.phase,
            )
            counts = _Counts(sum(1 for p in members if p.node), running, succeeded, failed, phase)
            if counts == last:
                continue
            self._counts[gang] = counts
            reports.append(
                GangReport(
                    gang_key=gang,
                    source=spec.source,
                    scheduled=counts.scheduled,
                    has_counts=True,
                    running=running,
                    succeeded=succeeded,
                    failed=failed,
                    phase=phase,
                )
            )
        return reports
