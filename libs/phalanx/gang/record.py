"""A gang's runtime record: what the scheduler has decided about it so far (its Strict cycle, its pods
reserved and bound, its wait), as kept in memory and, through `phalanx.state`, in Redis."""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass
class GangRecord:
    key: str
    cycle: int = 1
    valid: bool = True
    first_wait: float | None = None
    satisfied_at: float | None = None
    timed_out: bool = False
    trace: str = ""
    assumed: set[str] = field(default_factory=set)
    bound: set[str] = field(default_factory=set)
    rounds: dict[str, int] = field(default_factory=dict)

    def copy(self) -> "GangRecord":
        """An independent copy: its three containers copied, the rest immutable values (what deepcopy
        gives, at a fraction of its cost, once per gang attempt)."""
        return replace(self, assumed=set(self.assumed), bound=set(self.bound), rounds=dict(self.rounds))
