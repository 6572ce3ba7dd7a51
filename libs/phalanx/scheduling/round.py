"""What one scheduling round collects while it runs: the verdicts for the queue, the gangs to bind, the
capacity freed. The queue receives it with the next pop (see `Carry`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from phalanx.queueing.hints import FreedCapacity, Hint
from phalanx.queueing.scheduling_queue import Outcome
from phalanx.scheduling.ports import Carry, Popped, Verdict
from phalanx.scheduling.reports import StatusReports


@dataclass
class RoundState:
    now: float
    verdicts: list[Verdict] = field(default_factory=list)
    activate: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    ready_groups: dict[tuple[str, ...], str] = field(default_factory=dict)  # group -> trace
    ordinary: list[Popped] = field(default_factory=list)
    bound: int = 0
    # Reservations released: pods waiting for that capacity get another try (see phalanx.queueing.hints).
    freed: FreedCapacity = field(default_factory=FreedCapacity)
    reloaded: bool = False  # usage was reloaded from Redis: any unschedulable pod may fit now

    def reject(
        self,
        unit: list[Popped],
        outcome: Outcome,
        message: str,
        reports: StatusReports | None,
        hint: Hint | None = None,
    ) -> None:
        """The same verdict for every pod of `unit`, reported on each pod unless `reports` is None."""
        for item in unit:
            self.verdicts.append(Verdict(item, outcome, message, hint))
            if reports is not None:
                reports.pod(item.pod.key, message)

    def into(self, carry: Carry) -> None:
        """Hands the round's queue updates to the next pop."""
        carry.verdicts += self.verdicts
        carry.activate += self.activate
        carry.failed += self.failed
        carry.freed.merge(self.freed)
        carry.move_all = carry.move_all or self.reloaded
