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

Pods are admitted by the gang intake the cluster feed uses too (phalanx.cluster.gang_intake): queued,
parked until the gang object they name arrives, or refused, as in a cluster; and the scheduler applies the
events with the same handlers (phalanx.scheduling.events) as the feed's. The driver's parts: the intake
(admission.py), the look-ahead of quiet instants (lookahead.py), the pods' lives (lives.py) and the
PhalanxJob controller (job_control.py), over one shared state (state.py).
"""

from __future__ import annotations

import heapq
import json
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

import grpc

from phalanx.cluster.gang_intake import GangIntake
from phalanx.intake.errors import IntakeError
from phalanx.intake.gang_kinds import CONFIGMAP_KIND, GANG_OBJECT_KINDS
from phalanx.intake.nodes import parse_node
from phalanx.model.keys import DEFAULT_SCHEDULER_NAME
from phalanx.model.limits import MAX_ITEMS
from phalanx.rpc.clients import SchedulerClient
from phalanx.sim.job_control import JobControl
from phalanx.sim.lives import PodLives
from phalanx.sim.lookahead import Lookahead
from phalanx.sim.steps import MAX_LATER_INSTANTS, Due, Instant
from phalanx.sim.tracks import SimResult
from phalanx.sim.workload import WorkloadObject
from phalanx.state.store import decoded


@dataclass
class SimOptions:
    mode: str = "gang"  # gang | pod (pod: gangs ignored, as kube-scheduler alone would)
    until: float | None = None
    default_wait: float = 600.0
    gang_retry_backoff: float | None = None  # the scheduler's --gang-retry-backoff; None: its default
    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    progress: bool = False


class Simulation(Lookahead, PodLives, JobControl):
    """The driver, composed of its parts (see the module docstring)."""

    opt: SimOptions  # all of them (the parts read only what state.RunOptions names)

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

    def _collect_due(self, now: float) -> Due:
        due = Due()
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
            elif obj.kind in GANG_OBJECT_KINDS:
                if obj.kind == CONFIGMAP_KIND and not GangIntake.is_gang_object(obj.obj):
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

    def _step(self, now: float, due: Due, later: list[Instant]) -> Any:
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
