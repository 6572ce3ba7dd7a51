"""What a simulation gives back: each pod's track (its life in the embedded cluster), and the run's result."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from phalanx.model.objects import GangSpec
from phalanx.sim import jobs as simjobs


@dataclass
class PodTrack:
    namespace: str
    name: str
    origin: str
    annotations: dict[str, str] = field(default_factory=dict)
    gang: str = ""
    duration: float | None = None
    node: str | None = None
    bound_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    reason: str | None = None  # set for pods refused at intake
    waiting_for: str = ""
    preempted_by: str = ""  # the gang whose preemption ended this pod
    created_at: float | None = None
    # PhalanxJob pods (phalanx.sim.jobs): "Failed" (a planned failure) or "Deleted" (by the job controller)
    # when the pod ended so; its restarts' earlier pods of the same name; when the controller deleted it.
    ended: str = ""
    incarnation: int = 0
    previous: list["PodTrack"] = field(default_factory=list)
    deleted_at: float | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class SimResult:
    pods: dict[str, PodTrack]
    gangs: dict[str, GangSpec]
    gang_refs: set[str]
    errors: list[str]
    end_time: float
    wall_seconds: float
    steps: int
    mode: str
    timed_out_gangs: set[str]
    conditions: dict[str, str]
    phalanx_annotations: dict[str, dict[str, str]]
    until_reached: bool
    series: dict[str, Any] = field(default_factory=dict)
    attempts: int = 0
    gang_messages: dict[str, str] = field(default_factory=dict)  # gang -> its last status message before binding
    jobs: list[simjobs.SimJob] = field(default_factory=list)  # PhalanxJobs, as the controller took them
