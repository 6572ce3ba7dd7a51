"""gRPC servicer of the scheduler: cluster events and steps, serialised onto one GangScheduler."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import grpc

from phalanx.clock import Clock
from phalanx.config import redis_unreachable
from phalanx.queueing.scheduling_queue import Outcome
from phalanx.rpc import validation
from phalanx.rpc.convert import gang_from_pb, node_from_pb, pod_from_pb
from phalanx.rpc.health import Heartbeat
from phalanx.rpc.server import FailureLog, rpc_failure
from phalanx.rpc.stream_call import serve_stream
from phalanx.scheduling.ports import Carry, Popped, QueuePort, Verdict
from phalanx.scheduling.scheduler import GangScheduler
from phalanx.state.store import FencedOut
from phalanx.v1 import scheduler_pb2, scheduler_pb2_grpc

log = logging.getLogger(__name__)


class SchedulerServicer(scheduler_pb2_grpc.SchedulerServicer):
    def __init__(self, scheduler: GangScheduler, queue: QueuePort, clock: Clock, *, simulated: bool) -> None:
        self.scheduler = scheduler
        # False (Kubernetes mode): cluster state comes from the API server's watch alone, so the calls that
        # would feed it (ApplyClusterEvents, Step with its pods and events) are refused.
        self.simulated = simulated
        # Why this replica does not schedule ("" when it does): set by leader election.
        self.standby: Callable[[], str] = lambda: ""
        self.queue = queue
        self.clock = clock
        self.lock = threading.Lock()  # the scheduler's memory is single-threaded by design
        self.failing_since: float | None = None  # monotonic time of the first of the failing steps
        self.last_error = ""
        self._failures = FailureLog(log)

    def ApplyClusterEvents(self, request: scheduler_pb2.ClusterEvents,
                           context: grpc.ServicerContext) -> scheduler_pb2.ApplyClusterEventsResponse:
        self._refuse_unless_simulated(context, "ApplyClusterEvents")
        self._validate(request, context, "")
        with self.lock:
            carry = self._apply(request, self.clock.now(request.now))
            if carry.verdicts or carry.activate:
                self.queue.done(carry.verdicts, carry.activate, [], self.clock.now(request.now))
            if carry.remove:
                self.queue.remove(carry.remove)
            if carry.move_all:
                self.queue.move_all("cluster-changed", self.clock.now(request.now))
            elif carry.freed:
                self.queue.move_all("capacity-freed", self.clock.now(request.now), carry.freed)
        return scheduler_pb2.ApplyClusterEventsResponse()

    def Step(self, request: scheduler_pb2.StepRequest, context: grpc.ServicerContext) -> scheduler_pb2.StepResponse:
        self._refuse_unless_simulated(context, "Step")
        validation.abort_if_invalid(context, validation.step_request(request))
        now = self.clock.now(request.now)
        with self.lock:
            carry = self._apply(request.events, now) if request.HasField("events") else Carry()
            carry.add = [Popped(pod_from_pb(p), p.trace_parent) for p in request.pods_added]
            later = [(self.clock.now(i.now), [Popped(pod_from_pb(p), p.trace_parent) for p in i.pods_added],
                      list(i.pods_finished)) for i in request.later]
            r = self.scheduler.step(now, carry, later=later)
        return scheduler_pb2.StepResponse(pods_attempted=r.attempted, pods_bound=r.bound,
                                          next_wakeup=r.next_wakeup if r.next_wakeup is not None else 0.0,
                                          queue_pending=r.queue_pending, instants_done=r.instants_done, now=r.now)

    def StepStream(self, requests: Iterator[scheduler_pb2.StepRequest],
                   context: grpc.ServicerContext) -> Iterator[scheduler_pb2.StepResponse]:
        return serve_stream(self.Step)(requests, context)

    def _refuse_unless_simulated(self, context: grpc.ServicerContext, method: str) -> None:
        if not self.simulated:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"{method}: this scheduler runs against the Kubernetes API server (--backend kubernetes), "
                          "the only source of its cluster state; the calls that feed cluster state are served "
                          "to the simulator (--backend simulated) only")

    @staticmethod
    def _validate(ev: scheduler_pb2.ClusterEvents, context: grpc.ServicerContext, prefix: str) -> None:
        validation.abort_if_invalid(context, validation.cluster_events(ev, prefix))

    def _apply(self, ev: scheduler_pb2.ClusterEvents, now: float) -> Carry:
        """Applies cluster events to the scheduler; returns what the queue must hear about them."""
        s = self.scheduler
        carry = Carry()
        if ev.nodes_upserted:
            s.upsert_nodes([node_from_pb(n) for n in ev.nodes_upserted])
            carry.move_all = True
        if ev.nodes_removed:
            victims = s.remove_nodes(list(ev.nodes_removed), now)
            carry.verdicts += [Verdict(Popped(r.pod), Outcome.BACKOFF, f"node {r.node} was removed")
                               for r in victims if r.state == "assumed"]
        if ev.gangs_upserted:
            specs = [gang_from_pb(g) for g in ev.gangs_upserted]
            s.upsert_gangs(specs)
            carry.activate += [g.key for g in specs]  # a gang declared or changed: its own pods get another try
        if ev.gangs_removed:
            s.remove_gangs(list(ev.gangs_removed))
        gone = list(ev.pods_finished) + list(ev.pods_deleted)
        if gone:
            s.release_pods(gone, carry.freed)  # the pods that capacity may help get another try
        carry.remove += list(ev.pods_deleted)
        if ev.pods_bound:
            s.add_bound_pods([pod_from_pb(p) for p in ev.pods_bound])
        return carry

    def ListGangs(self, request: scheduler_pb2.ListGangsRequest,
                  context: grpc.ServicerContext) -> scheduler_pb2.ListGangsResponse:
        standby = self.standby()
        if standby:  # its memory is empty: an empty list would read as "no gangs"
            context.abort(grpc.StatusCode.UNAVAILABLE, standby)
        with self.lock:
            statuses = self.scheduler.gang_statuses()
        out = []
        for g in statuses:
            out.append(scheduler_pb2.GangStatus(
                key=str(g["key"]), min_available=int(g["min_available"]) if isinstance(g["min_available"], int) else 0,
                assumed=int(g["assumed"]), bound=int(g["bound"]), satisfied=bool(g["satisfied"]),  # type: ignore[call-overload]
                timed_out=bool(g["timed_out"]),
                first_wait_at=float(g["first_wait_at"]) if g["first_wait_at"] is not None else -1.0,  # type: ignore[arg-type]
                satisfied_at=float(g["satisfied_at"]) if g["satisfied_at"] is not None else -1.0))  # type: ignore[arg-type]
        return scheduler_pb2.ListGangsResponse(gangs=out)

    def run_forever(self, stop: threading.Event, idle_wait: float = 0.2, beat: Heartbeat | None = None) -> None:
        """Real-clock mode: step continuously; when idle, long-poll the queue for the next pod (gang
        timers still fire: the wait is short). `beat` is beaten at every iteration (liveness); a step that
        keeps failing is reported through `step_error` (readiness)."""
        prefetched = None
        while not stop.is_set():
            if beat is not None:
                beat.beat()
            try:
                with self.lock:
                    r = self.scheduler.step(self.clock.now(), prefetched=prefetched)
                self.failing_since = None
                self._failures.cleared("scheduling")
                prefetched = None
                if r.attempted == 0:
                    # Outside the lock: cluster events must not wait behind an idle poll.
                    prefetched = self.scheduler.wait_for_work(self.clock.now(), idle_wait)
            except FencedOut as exc:  # another replica leads (leader election): never retried
                log.error("scheduling stopped: %s", exc)
                self.last_error = f"FencedOut: {exc}"
                stop.set()
                return
            except Exception as exc:  # keep serving: the step's pods went back to the queue; it is retried
                unreachable = self.unreachable(exc)
                if unreachable:  # a dependency is down: one line naming it, not a traceback every second
                    self._failures.failed(f"scheduling step failed: {unreachable}; retrying every second")
                    self.last_error = unreachable
                else:
                    log.exception("scheduling step failed")
                    self.last_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
                if self.failing_since is None:
                    self.failing_since = time.monotonic()
                prefetched = None
                stop.wait(1.0)

    def unreachable(self, exc: Exception) -> str:
        """One line naming the dependency a failed step could not reach ("" for any other failure). The
        step's gRPC calls go to the queue (the binder's are answered inside it: a bind that fails is kept
        and sent again)."""
        if isinstance(exc, grpc.RpcError) and exc.code() in (grpc.StatusCode.UNAVAILABLE,  # type: ignore[attr-defined]
                                                             grpc.StatusCode.DEADLINE_EXCEEDED):
            return f"the queue at {getattr(self.queue, 'address', '?')} did not answer: {rpc_failure(exc)}"
        store = getattr(self.scheduler, "store", None)
        return redis_unreachable(exc, store.redis) if store is not None else ""

    def step_error(self, grace: float = 10.0) -> str:
        """Readiness: why scheduling has been failing for longer than `grace` seconds, or ""."""
        since = self.failing_since
        if since is None or time.monotonic() - since < grace:
            return ""
        return f"every scheduling step for {time.monotonic() - since:.0f}s failed, last: {self.last_error}"
