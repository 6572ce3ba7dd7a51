"""A gang's runtime record: what the scheduler has decided about it so far (its Strict cycle, its pods
reserved and bound, its wait), as kept in memory and, through `phalanx.state`, in Redis."""

from __future__ import annotations

from dataclasses import dataclass, field


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
    # Pod -> its role (volcano.sh/task-spec), for the gang's pods that have one: what its role minimums
    # (phalanx.gang.roles) count. A fact about the pods, not a decision: learnt when they are tried, and
    # rebuilt on a restart from the pod records Redis keeps for the reserved and bound ones.
    roles: dict[str, str] = field(default_factory=dict)
    # A timed-out gang of a form that retries (phalanx.intake.gangs.timeout_is_final): when its backoff ends
    # and it is tried again. None with timed_out: given up for good.
    retry_at: float | None = None
    timeouts: int = 0  # how many times its wait ran out
    # Its bound pods that finished successfully (released, so in neither set): they still count toward its
    # minimum, so a job finishing is not taken for a gang that lost its pods (phalanx.gang.manager).
    succeeded: int = 0

    def copy(self) -> "GangRecord":
        """An independent copy: its containers copied, the rest immutable values (what deepcopy gives;
        written out because dataclasses.replace costs 10 us, once per gang attempt)."""
        return GangRecord(
            self.key,
            self.cycle,
            self.valid,
            self.first_wait,
            self.satisfied_at,
            self.timed_out,
            self.trace,
            set(self.assumed),
            set(self.bound),
            dict(self.rounds),
            dict(self.roles),
            self.retry_at,
            self.timeouts,
            self.succeeded,
        )
