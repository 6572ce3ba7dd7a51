"""PodGroup status, written by one author: each gang's counters and phase, from the mirror's pods and the
scheduler's facts.

The mirror sees every pod of a gang (pending, bound, finished), so the counters (scheduled, running,
succeeded, failed) and the phase derived from them (phalanx.kube.podgroups.pods_phase) are computed here.
The scheduler knows what the mirror cannot: how many pods it holds reserved, which it has bound before the
watch shows it, why the gang cannot be placed, when its attempt started, and whether a final timeout gave it
up. In Kubernetes mode its gang reports come here (`author`, through StatusReports.gang_author) instead of
going to the binder: each becomes the PodGroup's one report, with the counters and phase computed here and
the scheduler's message, Event and start time. A change of the pods alone reports again (`reports`) with the
scheduler's last facts. So `phase` and `scheduled` have one writer; the scheduler's report for a gang
declared without a PodGroup (its Event) passes through unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from phalanx.cluster.mirror import Mirror
from phalanx.kube import podgroups
from phalanx.model.binding import GangReport
from phalanx.model.keys import GROUP_VOLCANO
from phalanx.model.objects import GangSpec
from phalanx.model.status import GangPhase


class _Counts(NamedTuple):
    """What was last reported of a PodGroup: its counters, and the phase its pods imply."""

    scheduled: int
    running: int
    succeeded: int
    failed: int
    phase: str


@dataclass(frozen=True)
class _Facts:
    """What the scheduler last said of a gang, kept for the reports its pods' changes make."""

    message: str = ""
    unschedulable: bool = False
    schedule_start_time: float = 0.0
    pod_key: str = ""
    given_up: bool = False  # a final timeout (Koordinator's forms): Failed while nothing is placed


# A gang never reported: a new gang of pending pods is Pending without being told so (the scheduler reports
# its progress from there), so the first report goes out when a pod is placed, runs or ends.
_UNREPORTED = _Counts(0, 0, 0, 0, GangPhase.PENDING)


class GangCounts:
    """Which of our pods belong to which gang, and what each PodGroup's status was last reported as."""

    def __init__(self) -> None:
        self._members: dict[str, set[str]] = {}  # gang key -> our pods resolved to it
        self._counts: dict[str, _Counts] = {}  # gang -> the counters and phase last reported
        self._facts: dict[str, _Facts] = {}  # gang -> what the scheduler last said of it
        # gang -> its PodGroup's status as the API server shows it (scheduler-plugins' groups), for the gangs
        # not reported by this process yet: a restart must not write again what an earlier one wrote.
        self._observed: dict[str, dict[str, object]] = {}

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

    def member_count(self, gang: str) -> int:
        """Our pods known to belong to the gang, whatever their state."""
        return len(self._members.get(gang, ()))

    def in_use(self, gang: str) -> bool:
        return gang in self._members

    def gangs(self) -> list[str]:
        """Every gang with a pod of ours."""
        return sorted(self._members)

    def forget(self, gang: str) -> None:
        self._counts.pop(gang, None)
        self._facts.pop(gang, None)
        self._observed.pop(gang, None)

    def observe(self, gang: str, group: str, status: object) -> None:
        """The status of the gang's PodGroup as watched. Before this process first reports the gang, a
        derived status the PodGroup already shows is not written again: a restarted scheduler (or a new
        leader) would otherwise patch every PodGroup of the cluster, 10,000 writes at 10,000 gangs, while the
        API server serves its lists. Volcano's status is in other words (phase names, a condition) and is
        written as before."""
        if gang in self._counts:
            return  # reported by this process: what it wrote is what it compares with
        if group == GROUP_VOLCANO or not isinstance(status, dict) or not status.get("phase"):
            self._observed.pop(gang, None)  # no status yet: a new gang, reported from its first placement
            return
        self._observed[gang] = status

    # -- the status ---------------------------------------------------------------------------------------
    def author(
        self,
        scheduler_reports: list[GangReport],
        mirror: Mirror,
        spec_of: Callable[[str], GangSpec | None],
        scheduler_view: Callable[[str], tuple[int, int]],
    ) -> list[GangReport]:
        """The scheduler's gang reports made the PodGroups' reports: counters and phase from here, message,
        Event and start time from the scheduler. `scheduler_view(gang)`: (reserved, bound) as the scheduler
        holds them."""
        out = []
        for r in scheduler_reports:
            if r.has_counts:  # made here already (kept over a binder outage and sent again)
                out.append(r)
                continue
            spec = _podgroup_spec(spec_of, r.gang_key)
            if spec is None:
                out.append(r)  # no PodGroup: only its Event is written
                continue
            facts = _Facts(
                r.message, r.unschedulable, r.schedule_start_time, r.pod_key, given_up=r.phase == GangPhase.FAILED
            )
            self._facts[r.gang_key] = facts
            counts = self._derive(r.gang_key, spec, mirror, scheduler_view)
            self._counts[r.gang_key] = counts
            out.append(self._report(r.gang_key, spec, counts, facts, r.event_reason))
        return out

    def reports(
        self,
        gangs: Iterable[str],
        mirror: Mirror,
        spec_of: Callable[[str], GangSpec | None],
        scheduler_view: Callable[[str], tuple[int, int]],
    ) -> list[GangReport]:
        """Reports for gangs declared by a PodGroup whose pods changed (deleted ones included: a gang that lost
        every pod goes back to Pending); unchanged ones are not reported again."""
        reports = []
        for gang in sorted(gangs):
            spec = _podgroup_spec(spec_of, gang)
            if spec is None:
                continue
            counts = self._derive(gang, spec, mirror, scheduler_view)
            unchanged = counts == self._counts.get(gang, _UNREPORTED) or self._shown_already(gang, counts)
            self._counts[gang] = counts
            if unchanged:
                continue
            reports.append(self._report(gang, spec, counts, self._facts.get(gang, _Facts()), ""))
        return reports

    def _derive(
        self, gang: str, spec: GangSpec, mirror: Mirror, scheduler_view: Callable[[str], tuple[int, int]]
    ) -> _Counts:
        members = [p for k in self._members.get(gang, ()) if (p := mirror.pod(k)) is not None]
        live = [p for p in members if not p.finished]
        reserved, held_bound = scheduler_view(gang)
        # The scheduler records a binding as soon as the binder has it; the watch shows it a moment later.
        bound = max(sum(1 for p in live if p.node), held_bound)
        running = sum(1 for p in members if p.phase == "Running")
        succeeded = sum(1 for p in members if p.phase == "Succeeded")
        failed = sum(1 for p in members if p.phase == "Failed")
        last = self._counts.get(gang, _UNREPORTED)
        phase = podgroups.pods_phase(
            spec.min_available,
            live=len(live),
            placed=bound + reserved,
            bound=bound,
            running=running,
            succeeded=succeeded,
            failed=failed,
            previous=last.phase,
        )
        if phase == GangPhase.PENDING and self._facts.get(gang, _Facts()).given_up:
            phase = GangPhase.FAILED  # given up by a final timeout, and nothing placed since
        scheduled = max(sum(1 for p in members if p.node), held_bound)
        return _Counts(scheduled, running, succeeded, failed, phase)

    def _shown_already(self, gang: str, counts: _Counts) -> bool:
        """Whether the PodGroup, never reported by this process, shows `counts` already. A counter the CRD
        lacks (upstream's has no `scheduled`) is not compared."""
        status = self._observed.pop(gang, None)
        if status is None or gang in self._counts:
            return False
        # _Counts' fields are the status' own names; observe() kept only statuses that have a phase.
        return all(status.get(name, value) == value for name, value in counts._asdict().items())

    @staticmethod
    def _report(gang: str, spec: GangSpec, counts: _Counts, facts: _Facts, event_reason: str) -> GangReport:
        return GangReport(
            gang_key=gang,
            source=spec.source,
            phase=counts.phase,
            scheduled=counts.scheduled,
            has_counts=True,
            running=counts.running,
            succeeded=counts.succeeded,
            failed=counts.failed,
            message=facts.message,
            event_reason=event_reason,
            unschedulable=facts.unschedulable,
            schedule_start_time=facts.schedule_start_time,
            pod_key=facts.pod_key,
        )


def _podgroup_spec(spec_of: Callable[[str], GangSpec | None], gang: str) -> GangSpec | None:
    """The gang's spec if a PodGroup declares it (a PodGroup has a status to author), else None."""
    spec = spec_of(gang)
    return spec if spec is not None and podgroups.group_of(spec.source) is not None else None
