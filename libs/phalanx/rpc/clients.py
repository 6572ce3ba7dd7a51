"""gRPC clients of the three services; the queue and binder clients implement the scheduler's ports."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from phalanx.model.binding import Assignment, BindResult, EvictResult, GangReport, PodReport, Victim
from phalanx.model.objects import GangSpec, NodeInfo, PodInfo
from phalanx.queueing.hints import FreedCapacity
from phalanx.queueing.scheduling_queue import Outcome
from phalanx.rpc.convert import (
    assignment_to_pb,
    bind_result_from_pb,
    evict_result_from_pb,
    gang_report_to_pb,
    gang_to_pb,
    node_to_pb,
    pod_from_pb,
    pod_report_to_pb,
    pod_to_pb,
    victim_to_pb,
)
from phalanx.rpc.local import LocalStub
from phalanx.rpc.queue_wire import freed_to_pb, hint_to_pb
from phalanx.rpc.server import channel
from phalanx.rpc.stream_call import StreamCaller
from phalanx.rpc.validation import MAX_BIND_TOTAL, MAX_ITEMS
from phalanx.scheduling.ports import Carry, Popped, PopResult, Verdict
from phalanx.security import tls
from phalanx.security.tls import PLAINTEXT, Security
from phalanx.v1 import (
    binder_pb2,
    binder_pb2_grpc,
    objects_pb2,
    queue_pb2,
    queue_pb2_grpc,
    scheduler_pb2,
    scheduler_pb2_grpc,
)

_OUTCOME_PB = {
    Outcome.ASSUMED: queue_pb2.OUTCOME_ASSUMED,
    Outcome.BOUND: queue_pb2.OUTCOME_BOUND,
    Outcome.UNSCHEDULABLE: queue_pb2.OUTCOME_UNSCHEDULABLE,
    Outcome.BACKOFF: queue_pb2.OUTCOME_BACKOFF,
    Outcome.DROPPED: queue_pb2.OUTCOME_DROPPED,
}

DEFAULT_TIMEOUT = 120.0
RETIRE_SECONDS = 60.0  # a channel replaced after a certificate renewal is closed this long after


class _Client:
    """One service's channel, stub and streams; built again when this process's certificate files change
    (a renewed certificate), so that new connections present the new one. Calls in flight (on another
    thread) finish on the old channel, which is closed a minute later."""

    peer = ""  # the identity of the service called
    stub_class: Any = None  # the generated stub class of the service

    def __init__(
        self, address: str, security: Security, timeout: float = DEFAULT_TIMEOUT, servicer: object | None = None
    ) -> None:
        """`servicer`: the service's servicer in this process (the combined layout): its handlers are called
        directly (phalanx.rpc.local), and `address` only names it."""
        self.address = address
        self.security = PLAINTEXT if servicer is not None else security
        self.timeout = timeout
        self._servicer = servicer
        self._generation = -1
        self._retired: list[tuple[float, grpc.Channel | None, list[StreamCaller]]] = []
        self._connect()

    def _connect(self) -> None:
        files = self.security.files
        self._generation = files.generation if files is not None else 0
        self.channel: grpc.Channel | None = None
        if self._servicer is not None:
            self._open(LocalStub(self._servicer))
            return
        ch = channel(self.address, self.security, self.peer)
        self.channel = ch
        self._open(self.stub_class(ch))

    def _open(self, stub: Any) -> None:
        raise NotImplementedError

    def _streams(self) -> list[StreamCaller]:
        return []

    def _fresh(self) -> None:
        files = self.security.files
        if files is None:
            return
        files.current()  # looks at the files' metadata every few seconds at most
        if files.generation != self._generation:
            self._retired.append((time.monotonic(), self.channel, self._streams()))
            self._connect()
        while self._retired and time.monotonic() - self._retired[0][0] > RETIRE_SECONDS:
            self._close(*self._retired.pop(0)[1:])

    @staticmethod
    def _close(ch: grpc.Channel | None, streams: list[StreamCaller]) -> None:
        for caller in streams:
            caller.close()
        if ch is not None:
            ch.close()

    def close(self) -> None:
        for _, ch, streams in self._retired:
            self._close(ch, streams)
        self._retired = []
        self._close(self.channel, self._streams())


class QueueClient(_Client):
    peer = tls.QUEUE

    stub_class = queue_pb2_grpc.QueueStub

    def __init__(
        self,
        address: str,
        security: Security,
        timeout: float = DEFAULT_TIMEOUT,
        consumer: str = "",
        servicer: object | None = None,
    ) -> None:
        # Pods this client pops are lent to (consumer, incarnation): a new client of the same consumer
        # (a restarted scheduler) gets the old one's pods returned to the queue at once.
        self.consumer = consumer or socket.gethostname()
        self.consumer_incarnation = uuid.uuid4().hex
        super().__init__(address, security, timeout, servicer)
        self.incarnation = ""  # of the queue process last heard from
        self._restart_listeners: list[Callable[[], None]] = []

    def _open(self, stub: Any) -> None:
        self.stub = stub
        self._pop = StreamCaller(self.stub.PopStream, self.timeout)
        self._add = StreamCaller(self.stub.AddStream, self.timeout)

    def _streams(self) -> list[StreamCaller]:
        return [self._pop, self._add]

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
        """Adds `pods`, in requests of at most MAX_ITEMS pods (the queue's limit per call)."""
        self._fresh()
        total = queue_pb2.AddResponse()
        for i in range(0, max(len(pods), 1), MAX_ITEMS):
            req = queue_pb2.AddRequest(
                pods=[pod_to_pb(p) for p in pods[i : i + MAX_ITEMS]], now=now, only_missing=only_missing
            )
            resp = self._add.call(req)
            self._heard(resp.incarnation)
            total.added += resp.added
            total.rejected.extend(resp.rejected)
            total.incarnation = resp.incarnation
        return total

    def pop(self, max_pods: int, now: float, carry: Carry | None = None, wait_seconds: float = 0.0) -> PopResult:
        self._fresh()
        req = queue_pb2.PopRequest(
            max_pods=max_pods,
            now=now,
            wait_seconds=wait_seconds,
            consumer=self.consumer,
            consumer_incarnation=self.consumer_incarnation,
        )
        if carry is not None and not carry.empty():
            req.done.CopyFrom(_done_request(carry.verdicts, carry.activate, carry.failed, now))
            req.done.tenant_shares.update(carry.shares)
            req.done.share_capacity.update(carry.share_capacity)
            req.remove.extend(carry.remove)
            req.add.extend(pod_to_pb(item.pod, item.trace) for item in carry.add)
            req.move_all = carry.move_all
            if not carry.move_all:
                req.freed.extend(freed_to_pb(carry.freed))
        try:  # a long poll (wait_seconds) too: the loop's idle wait is its most frequent call
            resp = self._pop.call(req, self.timeout + wait_seconds)
        except grpc.RpcError:
            # The queue may have popped and lent pods whose answer is lost (a deadline, a broken stream): under
            # a new incarnation the next pop gets them back, as after a restart. Pods this scheduler holds
            # come back too and are answered again with their reservations: a pop's work, never a pod.
            self.consumer_incarnation = uuid.uuid4().hex
            raise
        self._heard(resp.incarnation)
        items = [Popped(pod_from_pb(p), p.trace_parent) for p in resp.pods]
        return PopResult(items, resp.next_ready_at or None, resp.pending)

    def done(self, verdicts: list[Verdict], activate: list[str], failed: list[str], now: float) -> None:
        """In requests of at most MAX_ITEMS of each list (the queue's limit per call): every verdict and
        failure first, the gangs to activate last (an activation never precedes a verdict of the same call,
        as in one request). Should the queue fail between two requests, the call raises and the caller (the
        feed's outbox) sends it all again: the verdicts delivered twice find their pods already settled, and
        activating a gang twice is activating it; a queue that restarted meanwhile is refilled by the feed
        (on_restart). Should the scheduler die between two, its successor starts with release_in_flight."""
        self._fresh()
        if not verdicts and not activate and not failed:
            return
        m = MAX_ITEMS
        for i in range(0, max(len(verdicts), len(failed), 1), m):
            last = i + m >= max(len(verdicts), len(failed))
            head = activate[:m] if last else []
            self.stub.Done(_done_request(verdicts[i : i + m], head, failed[i : i + m], now), timeout=self.timeout)
        for j in range(m, len(activate), m):
            self.stub.Done(_done_request([], activate[j : j + m], [], now), timeout=self.timeout)

    def remove(self, keys: list[str]) -> None:
        """In requests of at most MAX_ITEMS keys (the queue's limit per call); removing twice is harmless."""
        self._fresh()
        for i in range(0, len(keys), MAX_ITEMS):
            self.stub.Remove(queue_pb2.RemoveRequest(pod_keys=keys[i : i + MAX_ITEMS]), timeout=self.timeout)

    def move_all(self, event: str, now: float, freed: FreedCapacity | None = None) -> None:
        """`freed`: the event only freed this capacity (moves only the pods it may help); None: moves all."""
        self._fresh()
        self.stub.MoveAll(
            queue_pb2.MoveAllRequest(event=event, now=now, freed=freed_to_pb(freed)), timeout=self.timeout
        )

    def release_in_flight(self) -> int:
        self._fresh()
        return self.stub.ReleaseInFlight(queue_pb2.ReleaseInFlightRequest(), timeout=self.timeout).released

    def stats(self, now: float) -> queue_pb2.StatsResponse:
        self._fresh()
        return self.stub.Stats(queue_pb2.StatsRequest(now=now), timeout=self.timeout)


_LEAVING = (Outcome.ASSUMED, Outcome.BOUND, Outcome.DROPPED)


def _done_request(verdicts: list[Verdict], activate: list[str], failed: list[str], now: float) -> queue_pb2.DoneRequest:
    results = []
    hint_pb: dict[int, queue_pb2.RetryHint] = {}  # a gang's pods share one hint: encoded once
    for v in verdicts:
        p = v.item.pod
        # A pod leaving the queue is named only; one going back may be new to the queue, so it travels whole.
        pod = (
            objects_pb2.Pod(namespace=p.namespace, name=p.name) if v.outcome in _LEAVING else pod_to_pb(p, v.item.trace)
        )
        res = queue_pb2.PodResult(pod=pod, outcome=_OUTCOME_PB[v.outcome], reason=v.reason)
        if v.hint is not None and v.outcome == Outcome.UNSCHEDULABLE:
            encoded = hint_pb.get(id(v.hint))
            if encoded is None:
                encoded = hint_pb[id(v.hint)] = hint_to_pb(v.hint)
            res.hint.CopyFrom(encoded)
        results.append(res)
    return queue_pb2.DoneRequest(results=results, activate_gangs=activate, failed_gangs=failed, now=now)


class BinderClient(_Client):
    peer = tls.BINDER

    stub_class = binder_pb2_grpc.BinderStub

    def _open(self, stub: Any) -> None:
        self.stub = stub
        self._bind = StreamCaller(self.stub.BindStream, self.timeout)
        self._bind_many = StreamCaller(self.stub.BindManyStream, self.timeout)
        self._report = StreamCaller(self.stub.ReportStream, self.timeout)

    def _streams(self) -> list[StreamCaller]:
        return [self._bind, self._bind_many, self._report]

    def bind(self, assignments: list[Assignment], all_or_nothing: bool, now: float, trace: str) -> list[BindResult]:
        self._fresh()
        req = binder_pb2.BindRequest(
            assignments=[assignment_to_pb(a) for a in assignments],
            all_or_nothing=all_or_nothing,
            now=now,
            trace_parent=trace,
        )
        return [bind_result_from_pb(r) for r in self._bind.call(req).results]

    def bind_many(self, batches: list[tuple[list[Assignment], bool, str]], now: float) -> list[list[BindResult]]:
        """Binds the batches, in as many requests as the binder's limit of assignments per call needs."""
        self._fresh()
        out: list[list[BindResult]] = []
        chunk: list[binder_pb2.BindBatch] = []
        size = 0
        for a, aon, trace in batches:
            if chunk and size + len(a) > MAX_BIND_TOTAL:
                out += self._send_many(chunk, now)
                chunk, size = [], 0
            chunk.append(
                binder_pb2.BindBatch(
                    assignments=[assignment_to_pb(x) for x in a], all_or_nothing=aon, trace_parent=trace
                )
            )
            size += len(a)
        return out + (self._send_many(chunk, now) if chunk else [])

    def _send_many(self, batches: list[binder_pb2.BindBatch], now: float) -> list[list[BindResult]]:
        answer = self._bind_many.call(binder_pb2.BindManyRequest(now=now, batches=batches))
        return [[bind_result_from_pb(r) for r in batch.results] for batch in answer.batches]

    def report(self, pods: list[PodReport], gangs: list[GangReport], now: float) -> None:
        self._fresh()
        req = binder_pb2.ReportRequest(
            pods=[pod_report_to_pb(p) for p in pods], gangs=[gang_report_to_pb(g) for g in gangs], now=now
        )
        self._report.call(req)

    def evict(self, victims: list[Victim], now: float) -> list[EvictResult]:
        self._fresh()
        req = binder_pb2.EvictRequest(victims=[victim_to_pb(v) for v in victims], now=now)
        return [evict_result_from_pb(r) for r in self.stub.Evict(req, timeout=self.timeout).results]


class SchedulerClient(_Client):
    peer = tls.SCHEDULER

    stub_class = scheduler_pb2_grpc.SchedulerStub

    def _open(self, stub: Any) -> None:
        self.stub = stub
        # No deadline: a step of a large replay runs as long as its work (the simulator waits for it).
        self._step = StreamCaller(self.stub.StepStream)

    def _streams(self) -> list[StreamCaller]:
        return [self._step]

    @staticmethod
    def events(
        now: float,
        *,
        nodes: Sequence[NodeInfo] = (),
        nodes_removed: Sequence[str] = (),
        gangs: Sequence[GangSpec] = (),
        gangs_removed: Sequence[str] = (),
        finished: Sequence[str] = (),
        deleted: Sequence[str] = (),
        bound: Sequence[PodInfo] = (),
    ) -> scheduler_pb2.ClusterEvents:
        return scheduler_pb2.ClusterEvents(
            nodes_upserted=[node_to_pb(n) for n in nodes],
            nodes_removed=list(nodes_removed),
            gangs_upserted=[gang_to_pb(g) for g in gangs],
            gangs_removed=list(gangs_removed),
            pods_finished=list(finished),
            pods_deleted=list(deleted),
            pods_bound=[pod_to_pb(p) for p in bound],
            now=now,
        )

    def apply(
        self,
        now: float,
        *,
        nodes: Sequence[NodeInfo] = (),
        nodes_removed: Sequence[str] = (),
        gangs: Sequence[GangSpec] = (),
        gangs_removed: Sequence[str] = (),
        finished: Sequence[str] = (),
        deleted: Sequence[str] = (),
        bound: Sequence[PodInfo] = (),
    ) -> None:
        self._fresh()
        nodes = list(nodes)
        while len(nodes) > MAX_ITEMS:  # the scheduler's limit per call
            self.stub.ApplyClusterEvents(self.events(now, nodes=nodes[:MAX_ITEMS]), timeout=self.timeout)
            nodes = nodes[MAX_ITEMS:]
        ev = self.events(
            now,
            nodes=nodes,
            nodes_removed=nodes_removed,
            gangs=gangs,
            gangs_removed=gangs_removed,
            finished=finished,
            deleted=deleted,
            bound=bound,
        )
        self.stub.ApplyClusterEvents(ev, timeout=self.timeout)

    def step(
        self,
        now: float,
        events: scheduler_pb2.ClusterEvents | None = None,
        pods: Sequence[PodInfo] = (),
        later: Sequence[tuple[float, list[PodInfo], list[str]]] = (),
    ) -> scheduler_pb2.StepResponse:
        self._fresh()
        req = scheduler_pb2.StepRequest(
            now=now,
            pods_added=[pod_to_pb(p) for p in pods],
            later=[
                scheduler_pb2.Instant(now=t, pods_added=[pod_to_pb(p) for p in ps], pods_finished=fin)
                for t, ps, fin in later
            ],
        )
        if events is not None:
            req.events.CopyFrom(events)
        return self._step.call(req)

    def list_gangs(self) -> list[scheduler_pb2.GangStatus]:
        self._fresh()
        return list(self.stub.ListGangs(scheduler_pb2.ListGangsRequest(), timeout=self.timeout).gangs)
