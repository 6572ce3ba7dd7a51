"""gRPC servicer of the scheduler: cluster events and steps, serialised onto one GangScheduler."""

from __future__ import annotations

import logging
import threading

from collections.abc import Iterator

import grpc

from phalanx.clock import Clock
from phalanx.rpc.stream_call import serve_stream
from phalanx.queueing.scheduling_queue import Outcome
from phalanx.rpc.convert import gang_from_pb, node_from_pb, pod_from_pb
from phalanx.scheduling.ports import Carry, Popped, QueuePort, Verdict
from phalanx.scheduling.scheduler import GangScheduler
from phalanx.v1 import scheduler_pb2, scheduler_pb2_grpc

log = logging.getLogger(__name__)


class SchedulerServicer(scheduler_pb2_grpc.SchedulerServicer):
    def __init__(self, scheduler: GangScheduler, queue: QueuePort, clock: Clock) -> None:
        self.scheduler = scheduler
        self.queue = queue
        self.clock = clock
        self.lock = threading.Lock()  # the scheduler's memory is single-threaded by design

    def ApplyClusterEvents(self, request: scheduler_pb2.ClusterEvents,
                           context: grpc.ServicerContext) -> scheduler_pb2.ApplyClusterEventsResponse:
        self._validate(request, context, "")
        with self.lock:
            carry = self._apply(request, self.clock.now(request.now))
            if carry.verdicts:
                self.queue.done(carry.verdicts, [], [], self.clock.now(request.now))
            if carry.remove:
                self.queue.remove(carry.remove)
            if carry.move_all:
                self.queue.move_all("cluster-changed", self.clock.now(request.now))
        return scheduler_pb2.ApplyClusterEventsResponse()

    def Step(self, request: scheduler_pb2.StepRequest, context: grpc.ServicerContext) -> scheduler_pb2.StepResponse:
        self._validate(request.events, context, "events.")
        for i, p in enumerate(request.pods_added):
            if not p.name or not p.namespace:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"pods_added[{i}]: namespace and name are required")
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

    @staticmethod
    def _validate(ev: scheduler_pb2.ClusterEvents, context: grpc.ServicerContext, prefix: str) -> None:
        for i, n in enumerate(ev.nodes_upserted):
            if not n.name:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{prefix}nodes_upserted[{i}].name: required")
        for i, g in enumerate(ev.gangs_upserted):
            if not g.name or not g.namespace:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"{prefix}gangs_upserted[{i}]: namespace and name are required")
            if g.min_available < 1:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"{prefix}gangs_upserted[{i}] {g.namespace}/{g.name}: min_available must be at least 1")

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
            s.upsert_gangs([gang_from_pb(g) for g in ev.gangs_upserted])
            carry.move_all = True
        if ev.gangs_removed:
            s.remove_gangs(list(ev.gangs_removed))
        gone = list(ev.pods_finished) + list(ev.pods_deleted)
        if gone and s.release_pods(gone):
            carry.move_all = True
        carry.remove += list(ev.pods_deleted)
        if ev.pods_bound:
            s.add_bound_pods([pod_from_pb(p) for p in ev.pods_bound])
        return carry

    def ListGangs(self, request: scheduler_pb2.ListGangsRequest,
                  context: grpc.ServicerContext) -> scheduler_pb2.ListGangsResponse:
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

    def run_forever(self, stop: threading.Event, idle_wait: float = 0.2) -> None:
        """Real-clock mode: step continuously; when idle, long-poll the queue for the next pod (gang
        timers still fire: the wait is short)."""
        prefetched = None
        while not stop.is_set():
            try:
                with self.lock:
                    r = self.scheduler.step(self.clock.now(), prefetched=prefetched)
                prefetched = None
                if r.attempted == 0:
                    # Outside the lock: cluster events must not wait behind an idle poll.
                    prefetched = self.scheduler.wait_for_work(self.clock.now(), idle_wait)
            except Exception:  # keep serving: a failed step is retried, its state is in Redis
                log.exception("scheduling step failed")
                prefetched = None
                stop.wait(1.0)
