"""gRPC servicer of the scheduler: requests checked and converted, then handed to the library (the
cluster-event handlers of phalanx.scheduling.events, one GangScheduler, and its scheduling loop), serialised
by the loop's lock."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import grpc

from phalanx.clock import Clock
from phalanx.cluster.loop import SchedulingLoop
from phalanx.rpc import validation
from phalanx.rpc.convert import gang_from_pb, node_from_pb, pod_from_pb
from phalanx.rpc.stream_call import serve_stream
from phalanx.scheduling.events import SCHEDULER_API, ClusterChange, ClusterEvents, deliver
from phalanx.scheduling.lookahead import Instant, Lookahead
from phalanx.scheduling.ports import Carry, Popped
from phalanx.scheduling.scheduler import GangScheduler
from phalanx.v1 import scheduler_pb2, scheduler_pb2_grpc


class SchedulerServicer(scheduler_pb2_grpc.SchedulerServicer):
    def __init__(self, scheduler: GangScheduler, loop: SchedulingLoop, clock: Clock, *, simulated: bool) -> None:
        """`loop`: the scheduling loop (phalanx.cluster.loop), whose lock every call that touches the
        scheduler's memory takes."""
        self.scheduler = scheduler
        # False (Kubernetes mode): cluster state comes from the API server's watch alone, so the calls that
        # would feed it (ApplyClusterEvents, Step with its pods and events) are refused.
        self.simulated = simulated
        # Why this replica does not schedule ("" when it does): set by leader election.
        self.standby: Callable[[], str] = lambda: ""
        self.clock = clock
        self.loop = loop
        self.lock: threading.Lock = loop.lock  # the scheduler's memory is single-threaded by design
        self.events = ClusterEvents(scheduler, SCHEDULER_API)

    def ApplyClusterEvents(
        self, request: scheduler_pb2.ClusterEvents, context: grpc.ServicerContext
    ) -> scheduler_pb2.ApplyClusterEventsResponse:
        self._refuse_unless_simulated(context, "ApplyClusterEvents")
        validation.abort_if_invalid(context, validation.cluster_events(request, ""))
        with self.lock:
            now = self.clock.now(request.now)
            deliver(
                self.events.apply(change_of(request), now), self.scheduler.queue, now
            )  # no step follows to carry it
        return scheduler_pb2.ApplyClusterEventsResponse()

    def Step(self, request: scheduler_pb2.StepRequest, context: grpc.ServicerContext) -> scheduler_pb2.StepResponse:
        self._refuse_unless_simulated(context, "Step")
        validation.abort_if_invalid(context, validation.step_request(request))
        now = self.clock.now(request.now)
        with self.lock:
            carry = self.events.apply(change_of(request.events), now) if request.HasField("events") else Carry()
            carry.add = [Popped(pod_from_pb(p), p.trace_parent) for p in request.pods_added]
            later = Lookahead(
                Instant(
                    self.clock.now(i.now),
                    [Popped(pod_from_pb(p), p.trace_parent) for p in i.pods_added],
                    list(i.pods_finished),
                )
                for i in request.later
            )
            r = self.scheduler.step(now, carry, lookahead=later)
        return scheduler_pb2.StepResponse(
            pods_attempted=r.attempted,
            pods_bound=r.bound,
            next_wakeup=r.next_wakeup if r.next_wakeup is not None else 0.0,
            queue_pending=r.queue_pending,
            instants_done=r.instants_done,
            now=r.now,
        )

    def StepStream(
        self, requests: Iterator[scheduler_pb2.StepRequest], context: grpc.ServicerContext
    ) -> Iterator[scheduler_pb2.StepResponse]:
        return serve_stream(self.Step)(requests, context)

    def _refuse_unless_simulated(self, context: grpc.ServicerContext, method: str) -> None:
        if not self.simulated:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{method}: this scheduler runs against the Kubernetes API server (--backend kubernetes), "
                "the only source of its cluster state; the calls that feed cluster state are served "
                "to the simulator (--backend simulated) only",
            )

    def ListGangs(
        self, request: scheduler_pb2.ListGangsRequest, context: grpc.ServicerContext
    ) -> scheduler_pb2.ListGangsResponse:
        standby = self.standby()
        if standby:  # its memory is empty: an empty list would read as "no gangs"
            context.abort(grpc.StatusCode.UNAVAILABLE, standby)
        with self.lock:
            statuses = self.scheduler.gang_statuses()
        out = [
            scheduler_pb2.GangStatus(
                key=g.key,
                min_available=g.min_available or 0,
                assumed=g.assumed,
                bound=g.bound,
                satisfied=g.satisfied,
                timed_out=g.timed_out,
                first_wait_at=g.first_wait_at if g.first_wait_at is not None else -1.0,
                satisfied_at=g.satisfied_at if g.satisfied_at is not None else -1.0,
            )
            for g in statuses
        ]
        return scheduler_pb2.ListGangsResponse(gangs=out)


def change_of(ev: scheduler_pb2.ClusterEvents) -> ClusterChange:
    """The Scheduler API's cluster events in the model's terms: a deleted pod also leaves the queue."""
    return ClusterChange(
        nodes=[node_from_pb(n) for n in ev.nodes_upserted],
        nodes_removed=list(ev.nodes_removed),
        gangs=[gang_from_pb(g) for g in ev.gangs_upserted],
        gangs_removed=list(ev.gangs_removed),
        released=list(ev.pods_finished) + list(ev.pods_deleted),
        succeeded=list(ev.pods_finished),  # completed their run (the scheduler knows its own evictions apart)
        unqueued=list(ev.pods_deleted),
        bound=[pod_from_pb(p) for p in ev.pods_bound],
    )
