"""A simulation's state, which each of its parts (admission, pod lives, the job controller, the look-ahead) reads and writes.

Also the few helpers every part uses: the event timeline's push, a pod's planned life, its end.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any, Callable, Protocol

import redis

from phalanx.cluster.gang_intake import GangIntake
from phalanx.model.objects import PodInfo
from phalanx.rpc.clients import QueueClient, SchedulerClient
from phalanx.sim import jobs as simjobs
from phalanx.sim.series import SeriesRecorder
from phalanx.sim.steps import MAX_LATER_INSTANTS
from phalanx.sim.tracks import PodTrack
from phalanx.sim.workload import Workload
from phalanx.state.keys import Keys


class RunOptions(Protocol):
    """What the parts read of the run's options (driver.SimOptions)."""

    @property
    def mode(self) -> str: ...  # gang | pod

    @property
    def until(self) -> float | None: ...

    @property
    def scheduler_name(self) -> str: ...


class SimState:
    def __init__(
        self,
        workload: Workload,
        queue: QueueClient,
        scheduler: SchedulerClient,
        client: redis.Redis,
        keys: Keys,
        options: RunOptions,
        recover_scheduler: Callable[[], SchedulerClient] | None = None,
    ) -> None:
        self.w = workload
        self.queue = queue
        self.scheduler = scheduler
        self.redis = client
        self.keys = keys
        self.opt = options
        self.recover_scheduler = recover_scheduler
        # A refused pod stays refused: each object arrives once, and each refusal is listed once in `errors`.
        self.intake = GangIntake(retry_refused=False)
        self.pods: dict[str, PodTrack] = {}
        self.parsed: dict[str, PodInfo] = {}
        self.errors: list[str] = list(workload.errors)
        self.gang_started: dict[str, float] = {}
        self.gang_bound: dict[str, list[str]] = {}
        self.gang_refs: set[str] = set()
        self._events: list[tuple[float, int, str, Any]] = []
        self._seq = itertools.count()
        self._bind_cursor = 0
        self._preempt_cursor = 0
        self._events_cursor = 0
        self.gang_messages: dict[str, str] = {}
        self.steps = 0
        self.running = 0
        self.attempts = 0  # pods the scheduler tried, retries included
        self.bound_count = 0
        self.series = SeriesRecorder()
        self._waiting_durations: dict[str, float] = {}  # pods arrived, not started: their run times
        self._finished_early: set[str] = set()  # pods whose finish ran, foreseen, in a run of instants
        self._later_limit = MAX_LATER_INSTANTS
        # (pods bound, each gang's timeouts) when the timeline last ran dry or something last bound since
        self._quiet: tuple[int, dict[str, int]] | None = None
        # PhalanxJobs: the controller played on the virtual clock (phalanx.sim.jobs)
        self.job_of: dict[str, simjobs.SimJob] = {k: j for j in workload.jobs for k in j.pods}
        self._jobs: dict[str, simjobs.SimJob] = {j.key: j for j in workload.jobs}

    # -- event timeline --------------------------------------------------------------------------
    def _push(self, at: float, kind: str, payload: Any) -> None:
        heapq.heappush(self._events, (at, next(self._seq), kind, payload))

    def _drop_finish(self, key: str) -> None:
        """A pod that ended early: its planned finish goes (a pod of the same name made later has its own)."""
        kept = [e for e in self._events if not (e[2] == "finish" and e[3] == key)]
        if len(kept) != len(self._events):
            self._events = kept
            heapq.heapify(self._events)

    def _life(self, key: str, duration: float | None) -> float | None:
        """How long the pod runs once started: its duration, or sooner its next planned failure."""
        job = self.job_of.get(key)
        failures = job.failures.get(key) if job is not None else None
        if failures:
            return failures[0] if duration is None else min(duration, failures[0])
        return duration

    def _note_finished(self, key: str, now: float) -> None:
        if self.pods[key].finished_at is not None:
            return  # preempted, and its foreseen finish came too: it ended once
        self.pods[key].finished_at = now
        self.running -= 1
        self.series.pod_finished(self.parsed[key].requests, now, self.pods[key].node or "")
