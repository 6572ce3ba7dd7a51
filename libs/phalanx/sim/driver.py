"""The embedded cluster: replays a workload through the real services on a shared virtual clock.

The driver plays the API server and the kubelets. It jumps the clock from one event to the next
(an object's arrival, a pod finishing, a backoff expiring, a gang's wait running out) whenever nothing
else can happen at the current instant: the scheduler's Step returns only when the queue has nothing
runnable at `now`, and says when it next needs to be woken. The services read time only from the
requests, so the same input gives the same output.

A run ends when nothing more can happen: no event left and the scheduler asks for no wake-up, or only gangs
retrying after their timeouts, in vain (see `_retrying_in_vain`); or at `until`.

A pod's run time (annotation simulation.phalanx.dev/duration) starts when it binds, except for a pod of a
gang, which starts only once its gang has its minimum bound — as a distributed training job's workers
wait for each other. That is what turns partial placements into the deadlocks gang scheduling prevents.

Pods are resolved to their gangs by the gang intake the cluster feed uses too (phalanx.cluster.gang_intake),
and the scheduler applies the events with the same handlers (phalanx.scheduling.events) as the feed's.
"""

from __future__ import annotations

import heapq
import itertools
import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import grpc
import redis

from phalanx.cluster.gang_intake import Decision, GangIntake
from phalanx.intake.errors import IntakeError
from phalanx.intake.nodes import parse_node
from phalanx.intake.pods import parse_pod, scheduler_name
from phalanx.jobs.api import FINISHED
from phalanx.jobs.objects import desired_pods
from phalanx.model.keys import DEFAULT_SCHEDULER_NAME
from phalanx.model.objects import GangSpec, NodeInfo, PodInfo
from phalanx.rpc.clients import QueueClient, SchedulerClient
from phalanx.rpc.validation import MAX_ITEMS
from phalanx.sim import jobs as simjobs
from phalanx.sim.series import SeriesRecorder
from phalanx.sim.workload import Workload, WorkloadObject
from phalanx.state.keys import Keys
from phalanx.state.store import decoded


@dataclass
class SimOptions:
    mode: str = "gang"  # gang | pod (pod: gangs ignored, as kube-scheduler alone would)
    until: float | None = None
    default_wait: float = 600.0
    gang_retry_backoff: float | None = None  # the scheduler's --gang-retry-backoff; None: its default
    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    progress: bool = False


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


MAX_LATER_INSTANTS = 256  # instants sent ahead with one step (bounded: the unused ones are re-admitted)


@dataclass
class _Instant:
    at: float
    pods: list[PodInfo] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    foreseen: list[str] = field(default_factory=list)  # finishes of pods bound earlier in the same run

    @property
    def releases(self) -> list[str]:
        return self.finished + self.foreseen


@dataclass
class _Due:
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


class Simulation:
    def __init__(
        self,
        workload: Workload,
        queue: QueueClient,
        scheduler: SchedulerClient,
        client: redis.Redis,
        keys: Keys,
        options: SimOptions,
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

    def run(self) -> SimResult:
        wall0 = time.monotonic()
        for obj in self.w.objects:
            self._push(obj.at, "object", obj)
        now = 0.0
        until_reached = False
        last_progress = 0.0
        idle = False  # the queue held nothing and no timer was due after the last step
        deferred: list[str] = []
        while True:
            due = self._collect_due(now)
            due.finished = deferred + due.finished
            if idle and due.only_finishes():
                # Nothing waits for capacity: freeing it can wait until the next step that needs it.
                deferred = due.finished
            else:
                deferred = []
                later = self._gather_later(now, due)
                step = self._step(now, due, later)
                self._put_back(later[step.instants_done :])
                # Send as many instants ahead as recent steps could use: runs grow while the cluster stays
                # quiet, and shrink to one when every instant has to wait (a full cluster).
                if step.instants_done == len(later):
                    self._later_limit = min(MAX_LATER_INSTANTS, max(1, 2 * self._later_limit))
                else:
                    self._later_limit = max(1, 2 * step.instants_done)
                now = max(now, step.now)
                idle = step.queue_pending == 0 and not step.next_wakeup
                for inst in later[: step.instants_done]:
                    self._finished_early.update(inst.foreseen)
                self._read_bindings(now)
                self._read_preemptions(now)
                self._read_gang_reports()
                for inst in later[: step.instants_done]:
                    for key in inst.foreseen:
                        self._note_finished(key, inst.at)
            if self.opt.progress and time.monotonic() - last_progress > 0.5:
                last_progress = time.monotonic()
                self._print_progress(now, wall0)
            if self._events and self._events[0][0] <= now:
                continue  # something became due at this same instant (a zero-length pod, say)
            candidates = []
            if self._events:
                candidates.append(self._events[0][0])
            if step.next_wakeup and step.next_wakeup > now:
                candidates.append(step.next_wakeup)
            if not candidates or self._retrying_in_vain():
                break
            nxt = min(candidates)
            if self.opt.until is not None and nxt > self.opt.until:
                now = self.opt.until
                until_reached = True
                break
            now = nxt
        if self.opt.progress:
            self._print_progress(now, wall0, final=True)
        return self._result(now, time.monotonic() - wall0, until_reached)

    def _retrying_in_vain(self) -> bool:
        """Whether the run is over although gangs still have timers: with no workload event left (nothing
        arrives, nothing finishes), only gangs that retry after their timeouts wake the scheduler, and without
        a bind nothing they do changes the cluster. Once every gang holding a timer has timed out twice since
        the timeline ran dry or the last bind (a full wait and backoff each), the run has come back to where
        it was: nothing more can happen. Read from the gang records in Redis."""
        if self._events:
            self._quiet = None
            return False
        timers = [str(gang) for gang in self.redis.zrange(self.keys.timers, 0, -1)]  # a decoding client's
        if not timers:
            return False
        pipe = self.redis.pipeline(transaction=False)
        for gang in timers:
            pipe.hget(self.keys.gang(gang), "timeouts")
        counts = {gang: int(n or 0) for gang, n in zip(timers, pipe.execute())}
        if self._quiet is None or self._quiet[0] != self.bound_count:
            self._quiet = (self.bound_count, counts)
            return False
        since = self._quiet[1]
        for gang, n in counts.items():
            since.setdefault(gang, n)  # a gang that took a timer since: counted from now
        return all(n >= since[gang] + 2 for gang, n in counts.items())

    # -- applying events -------------------------------------------------------------------------
    def _collect_due(self, now: float) -> "_Due":
        due = _Due()
        gang_objects_added = False
        dirty: dict[str, set[float]] = {}  # PhalanxJobs whose pods changed, and when
        while self._events and self._events[0][0] <= now:
            _, _, kind, payload = heapq.heappop(self._events)
            if kind == "finish":
                if self.pods[payload].preempted_by or self.pods[payload].ended:
                    continue  # it ended when it was preempted, failed or deleted
                self._note_finished(payload, now)
                due.finished.append(payload)
                self._job_changed(payload, now, dirty)
                continue
            if kind == "preempt":  # evicted by the binder: the pod ends now, its capacity frees
                self._note_finished(payload, now)
                due.finished.append(payload)
                self._job_changed(payload, now, dirty)  # a job's pod preempted is lost: recreated
                continue
            if kind == "fail":  # a PhalanxJob's pod failing as its workload planned
                key, incarnation = payload
                track = self.pods[key]
                if track.incarnation != incarnation or track.finished_at is not None:
                    continue  # it ended before its failure was due
                track.ended = "Failed"
                self._note_finished(key, now)
                self._drop_finish(key)
                due.deleted.append(key)  # a loss, not a finish: its gang may fall below its minimum
                self._job_changed(key, now, dirty)
                continue
            if kind == "job":  # one of the job's pods bound or started at `payload[1]`: the controller looks
                dirty.setdefault(payload[0], set()).add(payload[1])
                continue
            if kind == "recreate":  # the job controller's new pod for a place whose pod was lost
                job, body = payload
                job.creating.discard(body["metadata"]["name"])
                pod = self._admit_pod(WorkloadObject("Pod", body, now, f"PhalanxJob {job.key}"), replace=True)
                if pod is not None:
                    due.pods.append(pod)
                self._job_changed(f"{job.namespace}/{body['metadata']['name']}", now, dirty)
                continue
            if kind == "finished":  # noted already, sent back from a run of instants the step did not take
                due.finished.append(payload)
                continue
            if kind == "admitted":  # likewise, a pod admitted already
                due.pods.append(payload)
                continue
            obj: WorkloadObject = payload
            if obj.kind == "Node":
                node = self._intake(obj, lambda o: parse_node(o.obj))
                if node is not None:
                    due.nodes.append(node)
                    self.series.node_added(node.allocatable, node.name)
            elif obj.kind in ("PodGroup", "ConfigMap"):
                if obj.kind == "ConfigMap" and not GangIntake.is_gang_object(obj.obj):
                    continue  # an ordinary ConfigMap
                try:
                    self.intake.add_object(obj.obj, created_at=obj.at)
                except IntakeError as exc:
                    self.errors.append(f"{obj.origin}: {exc}")
                gang_objects_added = True  # valid or not, its waiting pods now resolve differently
            elif obj.kind == "Pod":
                pod = self._admit_pod(obj)
                if pod is not None:
                    (due.bound if pod.node_name else due.pods).append(pod)
                self._job_changed(obj.key, now, dirty)
        if dirty:
            self._run_controller(dirty, now, due)
        if gang_objects_added:
            due.pods.extend(self._reresolve_waiting(due))
        due.gangs = self._specs_to_send(due.pods + due.bound)
        return due

    # -- PhalanxJobs: the controller on the virtual clock -----------------------------------------------
    def _job_changed(self, key: str, at: float, dirty: dict[str, set[float]]) -> None:
        job = self.job_of.get(key)
        if job is not None:
            dirty.setdefault(job.key, set()).add(at)

    def _run_controller(self, dirty: dict[str, set[float]], now: float, due: "_Due") -> None:
        """The controller's reconcile of each job whose pods changed, at each instant they did (binds and
        starts read after a step may be a little before `now`), doing what it plans at `now`: pods it deletes
        end now (their capacity freed in this step), pods it creates arrive at this instant, in the next
        step (after the deletion of the pod they replace)."""
        for key in sorted(dirty):
            job = self._jobs[key]
            for at in sorted(dirty[key]):
                tracks = {k: self.pods[k] for k in job.pods if k in self.pods}
                plan = simjobs.observe(job, tracks, at)
                stage = str(plan.status.get("stage") or "")
                deleted = set()
                for name, uid in plan.delete:
                    track = self.pods.get(f"{job.namespace}/{name}")
                    if track is not None and simjobs.uid(track) == uid and track.deleted_at is None:
                        self._deleted_by_controller(track, now, due, f"job {stage}")
                        deleted.add(name)
                if plan.spec is None or stage in (s.value for s in FINISHED):
                    continue
                # As the controller's _apply: a failed pod deleted now is recreated in the same pass.
                restarts = dict(plan.create) | {
                    str(e["name"]): int(e.get("restarts") or 0)
                    for e in [plan.status["leader"], *plan.status["workers"]]
                    if e["name"] in deleted and e["name"] not in job.creating
                }
                for name in [n for n, _, _ in desired_pods(job.name, plan.spec) if n in restarts]:  # leader first
                    job.creating.add(name)
                    self._push(now, "recreate", (job, simjobs.pod_body(job, name, restarts[name])))

    def _deleted_by_controller(self, track: PodTrack, now: float, due: "_Due", why: str) -> None:
        """The job controller deleted the pod: a running or bound one ends now, a waiting one leaves the queue."""
        track.deleted_at = now
        if track.finished_at is not None or (track.bound_at is None and track.reason):
            return  # over already (succeeded, failed, preempted), or never admitted
        track.ended = "Deleted"
        if track.bound_at is not None:
            track.finished_at = now
            if track.started_at is not None:
                self.running -= 1
            self.series.pod_finished(self.parsed[track.key].requests, now, track.node or "")
            self._drop_finish(track.key)
        else:
            track.reason = f"deleted by phalanx-controller: {why}"
            self._waiting_durations.pop(track.key, None)
        due.deleted.append(track.key)

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

    def _gather_later(self, now: float, due: "_Due") -> list[_Instant]:
        """The instants after `now` at which only pods arrive or finish, for the scheduler to run in
        the same step while the cluster stays quiet (so every pod is bound the instant it arrives).

        A pod without a gang bound at t in such a run finishes at t + its duration: that finish is
        added to the run as a foreseen event (kept only if the run gets that far). The run ends before
        any other kind of event, and before a pod of a gang, whose start is not known yet, could end."""
        horizon = float("inf")
        foreseen: list[tuple[float, str]] = []  # (time, pod) finishes of pods bound in the run

        def foresee(pods: list[PodInfo], at: float) -> None:
            nonlocal horizon
            for p in pods:
                life = self._life(p.key, p.duration)
                if life is None:
                    continue
                if self.pods[p.key].gang:  # starts when its gang is complete: not known in advance
                    horizon = min(horizon, at + life)
                else:
                    heapq.heappush(foreseen, (at + life, p.key))

        foresee(due.pods, now)
        # Pods that arrived before this step and have not started (waiting in the queue, or for their
        # gang) may start at any instant of the run: it must end before the earliest could finish.
        arriving = {p.key for p in due.pods}
        earlier = [d for k, d in self._waiting_durations.items() if k not in arriving]
        if earlier:
            horizon = min(horizon, now + min(earlier))
        out: list[_Instant] = []
        carried = len(due.pods)  # pods (arriving or finishing) the step request carries so far
        while len(out) < self._later_limit and (self._events or foreseen):
            at = min(self._events[0][0] if self._events else float("inf"), foreseen[0][0] if foreseen else float("inf"))
            if at >= horizon or (self.opt.until is not None and at > self.opt.until):
                break
            batch = []
            while self._events and self._events[0][0] == at:
                batch.append(heapq.heappop(self._events))
            if not all(self._simple(kind, payload) for _, _, kind, payload in batch):
                for entry in batch:
                    heapq.heappush(self._events, entry)
                break
            inst = _Instant(at)
            while foreseen and foreseen[0][0] == at:
                inst.foreseen.append(heapq.heappop(foreseen)[1])
            for _, _, kind, payload in batch:
                if kind == "finish":
                    self._note_finished(payload, at)
                    inst.finished.append(payload)
                elif kind == "finished":
                    inst.finished.append(payload)
                elif kind == "admitted":
                    inst.pods.append(payload)
                else:
                    pod = self._admit_pod(payload)
                    if pod is not None:
                        inst.pods.append(pod)
            if (
                self._declares_gang(inst.pods)
                or self._joins_waiting_gang(inst.pods)
                or carried + len(inst.pods) + len(inst.finished) > MAX_ITEMS
            ):
                # Declaring a gang is a cluster event (it retries unschedulable pods): it gets its own step.
                # And one request carries at most MAX_ITEMS pods: the instant waits for the next step.
                self._put_back([inst])
                break
            carried += len(inst.pods) + len(inst.finished)
            foresee(inst.pods, at)
            out.append(inst)
        return out

    def _declares_gang(self, pods: list[PodInfo]) -> bool:
        if self.opt.mode != "gang":
            return False
        for key in {self.pods[p.key].gang for p in pods} - {""}:
            spec = self.intake.gang(key)
            if spec is not None and self.intake.is_new(spec):
                return True
        return False

    def _joins_waiting_gang(self, pods: list[PodInfo]) -> bool:
        """A pod of a gang not started yet may change what gangs hold reserved, which is read as each step
        ends (_read_gang_reports): it gets its own step, so that reading is exact at every instant. Nothing
        else in a run of quiet instants can (the queue holds nothing but each instant's arrivals)."""
        return self.opt.mode == "gang" and any(
            (g := self.pods[p.key].gang) and g not in self.gang_started for p in pods
        )

    def _simple(self, kind: str, payload: Any) -> bool:
        """An event a quiet run of instants can take: a pod arriving unbound, or a pod finishing; not a
        PhalanxJob's pod, to whose changes the job controller reacts at their instant."""
        if kind == "finish":
            return payload not in self.job_of
        if kind in ("finished", "admitted"):
            return True
        if kind != "object":
            return False
        obj: WorkloadObject = payload
        return obj.kind == "Pod" and not (obj.obj.get("spec") or {}).get("nodeName") and obj.key not in self.job_of

    def _put_back(self, instants: list[_Instant]) -> None:
        """Instants the step did not run go back on the timeline, already admitted and noted; their
        foreseen finishes are dropped (those pods' real binds, if any, will schedule them)."""
        for inst in instants:
            for key in inst.finished:
                self._push(inst.at, "finished", key)
            for pod in inst.pods:
                self._push(inst.at, "admitted", pod)

    def _intake(self, obj: WorkloadObject, parse: Callable[[WorkloadObject], Any]) -> Any:
        try:
            return parse(obj)
        except IntakeError as exc:
            self.errors.append(f"{obj.origin}: {exc}")
            return None

    def _admit_pod(self, obj: WorkloadObject, replace: bool = False) -> PodInfo | None:
        """`replace`: a PhalanxJob's pod recreated under the name of the one it replaces (kept in `previous`)."""
        track = PodTrack(
            obj.namespace, obj.name, obj.origin, dict((obj.obj.get("metadata") or {}).get("annotations") or {})
        )
        track.created_at = obj.at
        old = self.pods.get(track.key)
        if old is not None and not replace:
            self.errors.append(f"{obj.origin}: Pod {track.key} appears twice; the later copy is ignored")
            return None
        if old is not None:
            track.previous, old.previous = [*old.previous, old], []
            track.incarnation = old.incarnation + 1
            self.gang_bound[old.gang] = [k for k in self.gang_bound.get(old.gang, []) if k != old.key]
        job = self.job_of.get(track.key)
        if job is not None:
            job.created.append({"pod": obj.name, "at": obj.at})
        self.pods[track.key] = track
        wanted = scheduler_name(obj.obj)
        if wanted != self.opt.scheduler_name:
            track.reason = f"spec.schedulerName is {wanted!r}, not {self.opt.scheduler_name!r}: not Phalanx's pod"
            return None
        try:
            pod = parse_pod(obj.obj, epoch=self.w.epoch)
        except IntakeError as exc:
            track.reason = str(exc)
            self.errors.append(f"{obj.origin}: {exc}")
            return None
        pod.created_at = obj.at
        track.duration = pod.duration
        self.parsed[pod.key] = pod
        resolved = self._resolve(pod, track)
        if resolved is not None or track.waiting_for:  # arrived, queued or parked
            self.series.pod_arrived(pod.requests, track.gang, obj.at)
            life = self._life(track.key, track.duration)
            if life is not None:
                self._waiting_durations[track.key] = life
        return resolved

    def _resolve(self, pod: PodInfo, track: PodTrack) -> PodInfo | None:
        """The pod to hand the scheduler, through the gang intake the cluster feed decides with too; None for a
        pod refused, or parked until its gang's object arrives (resolved again then, in _reresolve_waiting).
        A bound pod waits for nothing, as in the feed."""
        bound = bool(pod.node_name)
        admission = self.intake.admit(pod.key, pod, park=not bound)
        if admission.decision == Decision.REFUSE:
            track.reason = admission.reason
            self.errors.append(f"{track.origin}: {admission.reason}")
            return None
        track.gang = admission.gang
        if admission.gang:
            self.gang_refs.add(admission.gang)
        track.waiting_for = admission.waiting_for
        if admission.spec is None:
            pod.gang_created_at = pod.created_at
        if self.opt.mode == "pod":
            pod.gang = ""  # kube-scheduler alone knows no gangs, nor waits for their objects
            return pod
        return None if admission.decision == Decision.WAIT and not bound else pod

    def _reresolve_waiting(self, due: "_Due") -> list[PodInfo]:
        """Pods parked for a missing PodGroup/ConfigMap: resolve again (every one, whichever gang object
        arrived), resend those that changed."""
        out = []
        for key in self.intake.take_parked():
            track = self.pods[key]
            if track.bound_at is not None:
                continue
            pod = self.parsed[key]
            resolved = self._resolve(pod, track)
            if resolved is None and track.reason:
                due.deleted.append(key)  # its gang object turned out invalid: out of the queue (pod mode) or parking
            elif resolved is not None and not track.waiting_for:
                out.append(resolved)
        return out

    def _specs_to_send(self, pods: list[PodInfo]) -> list[GangSpec]:
        out = []
        for key in sorted({self.pods[p.key].gang for p in pods} - {""}):
            spec = self.intake.gang(key)
            if spec is None:
                continue
            if self.intake.note_sent(spec) and self.opt.mode == "gang":  # pod mode: the scheduler knows no gangs
                out.append(spec)
        return out

    def _call(self, fn: Callable[[SchedulerClient], Any]) -> Any:
        """Calls the scheduler; if it died (a crash test), waits for its replacement and calls again."""
        try:
            return fn(self.scheduler)
        except grpc.RpcError as exc:
            if self.recover_scheduler is None or exc.code() not in (
                grpc.StatusCode.UNAVAILABLE,
                grpc.StatusCode.UNKNOWN,
                grpc.StatusCode.CANCELLED,
            ):
                raise
            self.scheduler = self.recover_scheduler()
            return fn(self.scheduler)

    def _step(self, now: float, due: "_Due", later: list[_Instant]) -> Any:
        self.steps += 1
        events = None
        nodes = due.nodes
        if len(nodes) > MAX_ITEMS:  # a big cluster's nodes arrive in requests of MAX_ITEMS before the step
            self._call(lambda s: s.apply(now, nodes=nodes[:-MAX_ITEMS]))
            due.nodes = nodes[-MAX_ITEMS:]
        if not due.no_events():
            events = SchedulerClient.events(
                now, nodes=due.nodes, gangs=due.gangs, finished=due.finished, deleted=due.deleted, bound=due.bound
            )
        pods = due.pods
        if len(pods) > MAX_ITEMS:
            # One request carries at most MAX_ITEMS pods: the others enter the queue first, at the same
            # instant, which is what the step would have done with them before popping.
            self.queue.add(pods[:-MAX_ITEMS], now)
            pods = pods[-MAX_ITEMS:]
        step = self._call(lambda s: s.step(now, events, pods, [(i.at, i.pods, i.releases) for i in later]))
        self.attempts += step.pods_attempted
        for p in due.bound:
            self._record_bind(p.key, p.node_name, now)
        return step

    # -- bindings and the pods' lives ------------------------------------------------------------------
    def _read_bindings(self, now: float) -> None:
        raw = self.redis.lrange(self.keys.sim_binds, self._bind_cursor, -1)
        self._bind_cursor += len(raw)
        for item in raw:
            b = json.loads(item)
            self._record_bind(b["pod"], b["node"], float(b["at"]))

    def _read_preemptions(self, now: float) -> None:
        """Victims the binder evicted since the last step: each ends at `now` (the kubelet's part), once."""
        raw = self.redis.lrange(self.keys.sim_preempted, self._preempt_cursor, -1)
        self._preempt_cursor += len(raw)
        for item in raw:
            event = json.loads(item)
            track = self.pods.get(event["pod"])
            if track is None or track.preempted_by or (track.finished_at is not None and track.finished_at <= now):
                continue
            track.preempted_by = event["by"]
            if track.finished_at is not None:  # its finish was noted ahead, with a run of later instants
                self.series.pod_finish_moved(self.parsed[track.key].requests, track.finished_at, now, track.node or "")
                track.finished_at = now
                self._push(now, "finished", track.key)  # noted already: only the release is left
            else:
                self._push(now, "preempt", track.key)

    def _read_gang_reports(self) -> None:
        """The gang-level reports the scheduler sent since the last step (the PodGroup status a cluster shows):
        each gang's last word before it bound (why it waits), and, for each gang whose state changed, what it
        holds reserved now, counted from its reserved pods in Redis, from the instant of its last report. That
        is exact: a gang changes only at a step's first instant (see _joins_waiting_gang)."""
        raw = self.redis.lrange(self.keys.sim_events, self._events_cursor, -1)
        self._events_cursor += len(raw)
        changed: dict[str, float] = {}
        for item in raw:
            if "PodGroup/" not in item:  # pod events, most of the list: not parsed
                continue
            event = json.loads(item)
            if not event["object"].startswith("PodGroup/"):
                continue
            gang = event["object"].removeprefix("PodGroup/")
            changed[gang] = float(event["at"])
            if event["reason"] != "Scheduled":  # the phase; once scheduled, the reason it waited stays
                self.gang_messages[gang] = event["message"]
        if not changed:
            return
        pipe = self.redis.pipeline(transaction=False)
        for gang in changed:
            pipe.smembers(self.keys.gang_assumed(gang))
        for (gang, at), members in zip(changed.items(), pipe.execute()):
            held: dict[str, int] = {}
            for key in members:
                pod = self.parsed.get(key)
                for r, v in (pod.requests if pod is not None else {}).items():
                    held[r] = held.get(r, 0) + v
            self.series.gang_reserved(gang, held, at)

    def _record_bind(self, key: str, node: str, at: float) -> None:
        track = self.pods.get(key)
        if track is None or track.bound_at is not None:
            return
        track.node, track.bound_at = node, at
        self.bound_count += 1
        job = self.job_of.get(key)
        if job is not None:
            self._push(at, "job", (job.key, at))
        self.series.pod_bound(self.parsed[key].requests, at, node)  # per node: GPU fragmentation
        if not track.gang:
            self._start(track, at)
            return
        bound = self.gang_bound.setdefault(track.gang, [])
        bound.append(key)
        if track.gang in self.gang_started:
            self._start(track, at)
            return
        spec = self.intake.gang(track.gang)
        if spec is not None and len(bound) >= spec.min_available:
            self.gang_started[track.gang] = at
            self.series.gang_started(track.gang, at)
            for k in bound:
                self._start(self.pods[k], at)

    def _start(self, track: PodTrack, at: float) -> None:
        track.started_at = at
        self._waiting_durations.pop(track.key, None)
        self.running += 1
        if track.duration is not None and track.key not in self._finished_early:
            self._push(at + track.duration, "finish", track.key)
        job = self.job_of.get(track.key)
        if job is not None:
            self._push(at, "job", (job.key, at))
            failures = job.failures.get(track.key)
            if failures:
                self._push(at + failures.pop(0), "fail", (track.key, track.incarnation))

    # -- progress and results --------------------------------------------------------------------------
    def _print_progress(self, now: float, wall0: float, final: bool = False) -> None:
        """One status line rewritten in place. Written by hand on purpose: a progress library (tqdm, rich)
        measures progress against a total, which an open workload does not have, and would be a dependency of
        every install for these few lines; the line's content (virtual time, pods seen and bound) is
        the simulator's own."""
        seen = len(self.pods)
        bound = self.bound_count
        wall = max(time.monotonic() - wall0, 1e-9)
        end = "\n" if final else "\r"
        sys.stderr.write(
            f"\rvirtual {now:10.1f}s  pods seen {seen:6d}  bound {bound:6d}  "
            f"{bound / wall:7.0f} pods/s  wall {wall:6.1f}s{end}"
        )
        sys.stderr.flush()

    def _result(self, end: float, wall: float, until_reached: bool) -> SimResult:
        statuses = self._call(lambda s: s.list_gangs())
        timed_out = {g.key for g in statuses if g.timed_out}
        conditions = decoded(self.redis.hgetall(self.keys.sim_conditions))
        annotations = {k: json.loads(v) for k, v in decoded(self.redis.hgetall(self.keys.sim_annotations)).items()}
        gangs = {k: s for k in sorted(self.gang_refs) if (s := self.intake.gang(k)) is not None}
        return SimResult(
            self.pods,
            gangs,
            set(self.gang_refs),
            self.errors,
            end,
            wall,
            self.steps,
            self.opt.mode,
            timed_out,
            conditions,
            annotations,
            until_reached,
            self.series.report(),
            self.attempts,
            self.gang_messages,
            list(self.w.jobs),
        )
