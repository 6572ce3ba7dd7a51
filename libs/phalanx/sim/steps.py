"""What one Step carries: the events due at its instant, and the quiet instants sent ahead with it."""

from __future__ import annotations

from dataclasses import dataclass, field

from phalanx.model.objects import GangSpec, NodeInfo, PodInfo

MAX_LATER_INSTANTS = 256  # instants sent ahead with one step (bounded: the unused ones are re-admitted)


@dataclass
class Instant:
    at: float
    pods: list[PodInfo] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    foreseen: list[str] = field(default_factory=list)  # finishes of pods bound earlier in the same run

    @property
    def releases(self) -> list[str]:
        return self.finished + self.foreseen


@dataclass
class Due:
    """What became due at one instant, sent to the scheduler with one Step."""

    nodes: list[NodeInfo] = field(default_factory=list)
    gangs: list[GangSpec] = field(default_factory=list)
    pods: list[PodInfo] = field(default_factory=list)
    bound: list[PodInfo] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    def no_events(self) -> bool:
        return not (self.nodes or self.gangs or self.bound or self.finished or self.deleted)

    def only_finishes(self) -> bool:
        return not (self.nodes or self.gangs or self.bound or self.deleted or self.pods)
