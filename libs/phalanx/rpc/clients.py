"""gRPC clients of the three services; the queue and binder clients implement the scheduler's ports."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable

from phalanx.model.objects import GangSpec, NodeInfo, PodInfo
from phalanx.queueing.scheduling_queue import Outcome
from phalanx.rpc.convert import gang_to_pb, node_to_pb, pod_from_pb, pod_to_pb
from phalanx.rpc.server import channel
from phalanx.rpc.stream_call import StreamCaller
from phalanx.scheduling.ports import Carry, Popped, PopResult, Verdict
from phalanx.v1 import objects_pb2, binder_pb2, binder_pb2_grpc, queue_pb2, queue_pb2_grpc, scheduler_pb2, scheduler_pb2_grpc

_OUTCOME_PB = {
    Outcome.ASSUMED: queue_pb2.OUTCOME_ASSUMED,
    Outcome.BOUND: queue_pb2.OUTCOME_BOUND,
    Outcome.UNSCHEDULABLE: queue_pb2.OUTCOME_UNSCHEDULABLE,
    Outcome.BACKOFF: queue_pb2.OUTCOME_BACKOFF,
    Outcome.DROPPED: queue_pb2.OUTCOME_DROPPED,
}

DEFAULT_TIMEOUT = 120.0


class QueueClient:
    def __init__(self, address: str, timeout: float = DEFAULT_TIMEOUT, consumer: str = "") -> None:
        self.address = address
        # Pods this client pops are lent to (consumer, incarnation): a new client of the same consumer
        # (a restarted scheduler) gets the old one's pods returned to the queue at once.
        self.consumer = consumer or socket.gethostname()
        self.consumer_incarnation = uuid.uuid4().hex
        self.channel = channel(address)
        self.stub = queue_pb2_grpc.QueueStub(self.channel)
        self.timeout = timeout
        self._pop = StreamCaller(self.stub.PopStream)
        self.incarnation = ""  # of the queue process last heard from
        self._restart_listeners: list[Callable[[], None]] = []

    def on_restart(self, listener: Callable[[], None]) -> None:
        """Calls `listener` (on the calling thread of add or pop) when the queue answers with a new
        incarnation: it restarted, and lost what it held."""
        self._restart_listeners.append(listener)

    def _heard(self, incarnation: str) -> None:
        if not incarnation or incarnation == self.incarnation:
            return
        restarted, self.incarnation = bool(self.incarnation), incarnation
        if restarted:
            for listener in self._restart_listeners:
                listener()

    def add(self, pods: list[PodInfo], now: float, only_missing: bool = False) -> queue_pb2.AddResponse:
        resp = self.stub.Add(queue_pb2.AddRequest(pods=[pod_to_pb(p) for p in pods], now=now, only_missing=only_missing),
                             timeout=self.timeout)
        self._heard(resp.incarnation)
        return resp

    def pop(self, max_pods: int, now: float, carry: Carry | None = None, wait_seconds: float = 0.0) -> PopResult:
        req = queue_pb2.PopRequest(max_pods=max_pods, now=now, wait_seconds=wait_seconds, consumer=self.consumer,
                                   consumer_incarnation=self.consumer_incarnation)
        if carry is not None and not carry.empty():
            req.done.CopyFrom(_done_request(carry.verdicts, carry.activate, carry.failed, now))
            req.remove.extend(carry.remove)
            req.add.extend(pod_to_pb(item.pod, item.trace) for item in carry.add)
            req.move_all = carry.move_all
        resp = self.stub.Pop(req, timeout=self.timeout + wait_seconds) if wait_seconds else self._pop.call(req)
        self._heard(resp.incarnation)
        items = [Popped(pod_from_pb(p), p.trace_parent) for p in resp.pods]
        return PopResult(items, resp.next_ready_at or None, resp.pending)

    def done(self, verdicts: list[Verdict], activate: list[str], failed: list[str], now: float) -> None:
        if not verdicts and not activate and not failed:
            return
        self.stub.Done(_done_request(verdicts, activate, failed, now), timeout=self.timeout)

    def remove(self, keys: list[str]) -> None:
        if keys:
            self.stub.Remove(queue_pb2.RemoveRequest(pod_keys=keys), timeout=self.timeout)

    def move_all(self, event: str, now: float) -> None:
        self.stub.MoveAll(queue_pb2.MoveAllRequest(event=event, now=now), timeout=self.timeout)

    def release_in_flight(self) -> int:
        return self.stub.ReleaseInFlight(queue_pb2.ReleaseInFlightRequest(), timeout=self.timeout).released

    def stats(self, now: float) -> queue_pb2.StatsResponse:
        return self.stub.Stats(queue_pb2.StatsRequest(now=now), timeout=self.timeout)

    def close(self) -> None:
        for attr in ("_pop", "_bind", "_bind_many", "_step"):
            caller = getattr(self, attr, None)
            if caller is not None:
                caller.close()
        self.channel.close()


_LEAVING = (Outcome.ASSUMED, Outcome.BOUND, Outcome.DROPPED)


def _done_request(verdicts: list[Verdict], activate: list[str], failed: list[str], now: float) -> queue_pb2.DoneRequest:
    results = []
    for v in verdicts:
        p = v.item.pod
        # A pod leaving the queue is named only; one going back may be new to the queue, so it travels whole.
        pod = objects_pb2.Pod(namespace=p.namespace, name=p.name) if v.outcome in _LEAVING else pod_to_pb(p, v.item.trace)
        results.append(queue_pb2.PodResult(pod=pod, outcome=_OUTCOME_PB[v.outcome], reason=v.reason))
    return queue_pb2.DoneRequest(results=results, activate_gangs=activate, failed_gangs=failed, now=now)


class BinderClient:
    def __init__(self, address: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.address = address
        self.channel = channel(address)
        self.stub = binder_pb2_grpc.BinderStub(self.channel)
        self.timeout = timeout
        self._bind = StreamCaller(self.stub.BindStream)
        self._bind_many = StreamCaller(self.stub.BindManyStream)

    def bind(self, assignments: list[binder_pb2.Assignment], all_or_nothing: bool, now: float,
             trace: str) -> list[binder_pb2.BindResult]:
        req = binder_pb2.BindRequest(assignments=assignments, all_or_nothing=all_or_nothing, now=now,
                                     trace_parent=trace)
        return list(self._bind.call(req).results)

    def bind_many(self, batches: list[tuple[list[binder_pb2.Assignment], bool, str]],
                  now: float) -> list[list[binder_pb2.BindResult]]:
        req = binder_pb2.BindManyRequest(now=now, batches=[
            binder_pb2.BindBatch(assignments=a, all_or_nothing=aon, trace_parent=trace) for a, aon, trace in batches])
        return [list(r.results) for r in self._bind_many.call(req).batches]

    def report(self, pods: list[binder_pb2.PodReport], gangs: list[binder_pb2.GangReport], now: float) -> None:
        self.stub.Report(binder_pb2.ReportRequest(pods=pods, gangs=gangs, now=now), timeout=self.timeout)

    def close(self) -> None:
        for attr in ("_pop", "_bind", "_bind_many", "_step"):
            caller = getattr(self, attr, None)
            if caller is not None:
                caller.close()
        self.channel.close()


class SchedulerClient:
    def __init__(self, address: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.address = address
        self.channel = channel(address)
        self.stub = scheduler_pb2_grpc.SchedulerStub(self.channel)
        self.timeout = timeout
        self._step = StreamCaller(self.stub.StepStream)

    @staticmethod
    def events(now: float, *, nodes: list[NodeInfo] = (), nodes_removed: list[str] = (),  # type: ignore[assignment]
               gangs: list[GangSpec] = (), gangs_removed: list[str] = (),  # type: ignore[assignment]
               finished: list[str] = (), deleted: list[str] = (),  # type: ignore[assignment]
               bound: list[PodInfo] = ()) -> scheduler_pb2.ClusterEvents:  # type: ignore[assignment]
        return scheduler_pb2.ClusterEvents(
            nodes_upserted=[node_to_pb(n) for n in nodes], nodes_removed=list(nodes_removed),
            gangs_upserted=[gang_to_pb(g) for g in gangs], gangs_removed=list(gangs_removed),
            pods_finished=list(finished), pods_deleted=list(deleted), pods_bound=[pod_to_pb(p) for p in bound],
            now=now)

    def apply(self, now: float, *, nodes: list[NodeInfo] = (), nodes_removed: list[str] = (),  # type: ignore[assignment]
              gangs: list[GangSpec] = (), gangs_removed: list[str] = (),  # type: ignore[assignment]
              finished: list[str] = (), deleted: list[str] = (), bound: list[PodInfo] = ()) -> None:  # type: ignore[assignment]
        ev = self.events(now, nodes=nodes, nodes_removed=nodes_removed, gangs=gangs, gangs_removed=gangs_removed,
                         finished=finished, deleted=deleted, bound=bound)
        self.stub.ApplyClusterEvents(ev, timeout=self.timeout)

    def step(self, now: float, events: scheduler_pb2.ClusterEvents | None = None,
             pods: list[PodInfo] = (),  # type: ignore[assignment]
             later: list[tuple[float, list[PodInfo], list[str]]] = ()  # type: ignore[assignment]
             ) -> scheduler_pb2.StepResponse:
        req = scheduler_pb2.StepRequest(now=now, pods_added=[pod_to_pb(p) for p in pods],
                                        later=[scheduler_pb2.Instant(now=t, pods_added=[pod_to_pb(p) for p in ps],
                                                                     pods_finished=fin)
                                               for t, ps, fin in later])
        if events is not None:
            req.events.CopyFrom(events)
        return self._step.call(req)

    def list_gangs(self) -> list[scheduler_pb2.GangStatus]:
        return list(self.stub.ListGangs(scheduler_pb2.ListGangsRequest(), timeout=self.timeout).gangs)

    def close(self) -> None:
        for attr in ("_pop", "_bind", "_bind_many", "_step"):
            caller = getattr(self, attr, None)
            if caller is not None:
                caller.close()
        self.channel.close()
