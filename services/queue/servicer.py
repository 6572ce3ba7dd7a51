"""gRPC servicer of the queue: validates requests and delegates to SchedulingQueue."""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Iterator

import grpc

from phalanx.clock import Clock
from phalanx.model.policies import job_ordering
from phalanx.queueing.scheduling_queue import SchedulingQueue
from phalanx.queueing.verdicts import apply_verdicts
from phalanx.rpc import validation
from phalanx.rpc.queue_wire import HintDecoder, freed_from_pb, verdict_from_pb
from phalanx.rpc.stream_call import serve_stream
from phalanx.telemetry.tracing import start_root
from phalanx.v1 import queue_pb2, queue_pb2_grpc

MAX_GANG_TRACES = 100_000


class QueueServicer(queue_pb2_grpc.QueueServicer):
    def __init__(self, queue: SchedulingQueue, clock: Clock) -> None:
        self.queue = queue
        self.clock = clock
        # The queue's contents are in memory; callers compare this to notice a restart and re-add their pods.
        self.incarnation = uuid.uuid4().hex
        # Bounded: a long-running queue sees gangs without end; a gang evicted here only starts a new trace.
        self._gang_traces: OrderedDict[str, str] = OrderedDict()

    def _trace_for(self, pod: "queue_pb2.objects__pb2.Pod") -> str:  # type: ignore[name-defined]
        """One trace per gang, opened when its first pod is enqueued; one per pod without a gang."""
        if pod.trace_parent:
            return pod.trace_parent
        if not pod.gang:
            return start_root("phalanx.queue.enqueue", {"phalanx.pod": f"{pod.namespace}/{pod.name}"})
        parent = self._gang_traces.get(pod.gang)
        if parent is None:
            parent = start_root("phalanx.queue.enqueue", {"phalanx.gang": pod.gang})
            self._gang_traces[pod.gang] = parent
            if len(self._gang_traces) > MAX_GANG_TRACES:
                self._gang_traces.popitem(last=False)
        return parent

    def Add(self, request: queue_pb2.AddRequest, context: grpc.ServicerContext) -> queue_pb2.AddResponse:
        validation.abort_if_invalid(context, validation.add_request(request))
        now = self.clock.now(request.now)
        added, rejected = 0, []
        for i, pod in enumerate(request.pods):
            problem = validation.pod_rejection(pod, i)
            if problem:
                rejected.append(problem)
                continue
            pod.trace_parent = self._trace_for(pod)
            tenant, policy = job_ordering(pod)
            added += self.queue.add(
                f"{pod.namespace}/{pod.name}",
                priority=pod.priority,
                created_at=pod.created_at,
                gang=pod.gang,
                gang_created_at=pod.gang_created_at,
                payload=pod,
                now=now,
                only_missing=request.only_missing,
                tenant=tenant,
                queue_policy=policy,
            )
        return queue_pb2.AddResponse(added=added, rejected=rejected, incarnation=self.incarnation)

    def Pop(self, request: queue_pb2.PopRequest, context: grpc.ServicerContext) -> queue_pb2.PopResponse:
        if request.wait_seconds > 0:
            context.add_callback(self.queue.wake)  # a long poll's caller gone: its wait ends
        return self._pop(request, context)

    def _pop(self, request: queue_pb2.PopRequest, context: grpc.ServicerContext) -> queue_pb2.PopResponse:
        validation.abort_if_invalid(context, validation.pop_request(request))
        now = self.clock.now(request.now)
        if request.HasField("done"):
            self._done(request.done, now, context)
        if request.remove:
            self.queue.remove(list(request.remove))
        rejected: list[str] = []
        if request.add:
            rejected = list(self.Add(queue_pb2.AddRequest(pods=request.add, now=request.now), context).rejected)
        if request.move_all:
            self.queue.move_all(now)
        elif request.freed:
            self.queue.move_all(now, freed_from_pb(request.freed))
        entries = self.queue.pop(
            request.max_pods or 256,
            now,
            wait_seconds=min(request.wait_seconds, 30.0),
            consumer=request.consumer,
            incarnation=request.consumer_incarnation,
            still_wanted=context.is_active,
        )
        nxt = self.queue.next_ready_at()
        return queue_pb2.PopResponse(
            pods=[e.payload for e in entries],
            next_ready_at=nxt if nxt is not None else 0.0,
            pending=len(self.queue),
            rejected=rejected,
            incarnation=self.incarnation,
        )

    def PopStream(
        self, requests: Iterator[queue_pb2.PopRequest], context: grpc.ServicerContext
    ) -> Iterator[queue_pb2.PopResponse]:
        context.add_callback(self.queue.wake)  # once per stream: its end ends a long poll on it
        return serve_stream(self._pop)(requests, context)

    def AddStream(
        self, requests: Iterator[queue_pb2.AddRequest], context: grpc.ServicerContext
    ) -> Iterator[queue_pb2.AddResponse]:
        return serve_stream(self.Add)(requests, context)

    def Done(self, request: queue_pb2.DoneRequest, context: grpc.ServicerContext) -> queue_pb2.DoneResponse:
        self._done(request, self.clock.now(request.now), context)
        return queue_pb2.DoneResponse()

    def _done(self, request: queue_pb2.DoneRequest, now: float, context: grpc.ServicerContext) -> None:
        # Validate the whole request first: a refused request must change nothing.
        validation.abort_if_invalid(context, validation.done_request(request))
        if request.tenant_shares or request.share_capacity:
            self.queue.set_shares(request.tenant_shares, request.share_capacity)
        hint_of = HintDecoder()
        apply_verdicts(
            self.queue,
            (verdict_from_pb(res, hint_of) for res in request.results),
            request.activate_gangs,
            request.failed_gangs,
            now,
        )

    def Remove(self, request: queue_pb2.RemoveRequest, context: grpc.ServicerContext) -> queue_pb2.RemoveResponse:
        validation.abort_if_invalid(context, validation.remove_request(request))
        return queue_pb2.RemoveResponse(removed=self.queue.remove(list(request.pod_keys)))

    def MoveAll(self, request: queue_pb2.MoveAllRequest, context: grpc.ServicerContext) -> queue_pb2.MoveAllResponse:
        validation.abort_if_invalid(context, validation.move_all_request(request))
        return queue_pb2.MoveAllResponse(
            moved=self.queue.move_all(self.clock.now(request.now), freed_from_pb(request.freed) or None)
        )

    def ReleaseInFlight(
        self, request: queue_pb2.ReleaseInFlightRequest, context: grpc.ServicerContext
    ) -> queue_pb2.ReleaseInFlightResponse:
        return queue_pb2.ReleaseInFlightResponse(released=self.queue.release_in_flight(self.clock.now()))

    def Stats(self, request: queue_pb2.StatsRequest, context: grpc.ServicerContext) -> queue_pb2.StatsResponse:
        validation.abort_if_invalid(context, validation.stats_request(request))
        s = self.queue.stats(self.clock.now(request.now))
        return queue_pb2.StatsResponse(
            active=s.active,
            backoff=s.backoff,
            unschedulable=s.unschedulable,
            in_flight=s.in_flight,
            next_ready_at=s.next_ready_at or 0.0,
        )
