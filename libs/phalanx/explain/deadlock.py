"""Deadlocks: gangs that each wait, around a cycle, for capacity another of them holds with no known end
(seed-003's two jobs bound pod by pod, each holding 4 of the 8 GPUs and wanting a fifth).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from phalanx.explain.explanation import CapacityReport, GangExplanation, Standing, gang_state
from phalanx.explain.view import ClusterState, GangState


class WaitsFor:
    """Which gangs each gang waits for and that cannot finish first: gangs in its runs_after that are not
    running themselves (they wait too) and hold pods with no known end. A cycle among them is a deadlock.
    A gang not explained (only one was asked for) is analysed when a cycle passes through it."""

    def __init__(
        self,
        state: ClusterState,
        explained: list[GangExplanation],
        report_of: Callable[[GangState], CapacityReport | None],
    ) -> None:
        """`report_of`: the capacity analysis of a gang not explained (analysis.py's, passed in so that this
        module does not import the one that uses it)."""
        self.state = state
        self.report_of = report_of
        self.reports: dict[str, CapacityReport | None] = {e.key: e.capacity for e in explained}
        self.edges: dict[str, list[str]] = {}

    def of(self, key: str) -> list[str]:
        if key not in self.edges:
            report = self.reports[key] if key in self.reports else self._report(key)
            after = report.runs_after if report is not None else None
            self.edges[key] = [
                h.key for h in after or () if h.kind == "gang" and h.ends_at is None and self._stuck(h.key)
            ]
        return self.edges[key]

    def cycle(self, start: str) -> list[str]:
        """The shortest cycle of waits from `start` back to it, `start` first; [] when there is none."""
        parent: dict[str, str] = {}
        frontier = [start]
        while frontier:
            following: list[str] = []
            for key in frontier:
                for nxt in self.of(key):
                    if nxt == start:
                        path = [key]
                        while path[-1] != start:
                            path.append(parent[path[-1]])
                        return path[::-1]
                    if nxt not in parent:
                        parent[nxt] = key
                        following.append(nxt)
            frontier = following
        return []

    def _stuck(self, key: str) -> bool:
        g = self.state.gangs.get(key)
        return g is not None and gang_state(g) in (Standing.WAITING, Standing.TIMED_OUT) and bool(g.pending_pods)

    def _report(self, key: str) -> CapacityReport | None:
        g = self.state.gangs.get(key)
        if g is None or not self._stuck(key):
            return None
        return self.report_of(g)


def deadlock_sentence(cycle: Sequence[str]) -> str:
    """Names every gang of the deadlock; `cycle[0]` is the one explained."""
    if len(cycle) == 2:
        return (
            f"deadlock: gangs {cycle[0]} and {cycle[1]} each hold capacity the other needs, and neither can run "
            "until the other finishes; one of them must give its pods up"
        )
    chain = " -> ".join([*cycle, cycle[0]])
    return (
        f"deadlock: gangs {', '.join(cycle[:-1])} and {cycle[-1]} each wait for the next to finish, which holds "
        f"capacity it needs ({chain}); one of them must give its pods up"
    )
