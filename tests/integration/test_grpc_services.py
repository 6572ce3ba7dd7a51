"""The three services as real processes on loopback ports, checked with plain gRPC stubs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from phalanx.model.objects import PodInfo
from phalanx.security.tls import PLAINTEXT
from phalanx.sim.services import Stack
from phalanx.testing.services import ServiceProcess
from phalanx.v1 import (
    binder_pb2,
    binder_pb2_grpc,
    objects_pb2,
    queue_pb2,
    queue_pb2_grpc,
    scheduler_pb2,
    scheduler_pb2_grpc,
)

pytestmark = pytest.mark.integration

TIMEOUT = 10.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack.launch(log_dir=tmp_path_factory.mktemp("grpc-services"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def channels(stack: Stack) -> Iterator[dict[str, grpc.Channel]]:
    chans = {svc.name: grpc.insecure_channel(svc.address) for svc in (stack.queue, stack.binder, stack.scheduler)}
    yield chans
    for ch in chans.values():
        ch.close()


@pytest.fixture
def queue(channels: dict[str, grpc.Channel]) -> queue_pb2_grpc.QueueStub:
    return queue_pb2_grpc.QueueStub(channels["queue"])


@pytest.fixture
def binder(channels: dict[str, grpc.Channel]) -> binder_pb2_grpc.BinderStub:
    return binder_pb2_grpc.BinderStub(channels["binder"])


@pytest.fixture
def scheduler(channels: dict[str, grpc.Channel]) -> scheduler_pb2_grpc.SchedulerStub:
    return scheduler_pb2_grpc.SchedulerStub(channels["scheduler"])


def invalid(call: grpc.UnaryUnaryMultiCallable, request: object) -> str:
    with pytest.raises(grpc.RpcError) as exc:
        call(request, timeout=TIMEOUT)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT, exc.value
    return exc.value.details()


# -- health -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, service",
    [("queue", "phalanx.v1.Queue"), ("binder", "phalanx.v1.Binder"), ("scheduler", "phalanx.v1.Scheduler")],
)
def test_health_reports_serving(channels: dict[str, grpc.Channel], name: str, service: str) -> None:
    stub = health_pb2_grpc.HealthStub(channels[name])
    for svc in ("", service):
        resp = stub.Check(health_pb2.HealthCheckRequest(service=svc), timeout=TIMEOUT)
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
    with pytest.raises(grpc.RpcError) as exc:
        stub.Check(health_pb2.HealthCheckRequest(service="phalanx.v1.Nope"), timeout=TIMEOUT)
    assert exc.value.code() == grpc.StatusCode.NOT_FOUND


# -- the binder -------------------------------------------------------------------------------------


def assignment(pod_key: str, node: str = "n1") -> binder_pb2.Assignment:
    return binder_pb2.Assignment(pod_key=pod_key, node=node)


@pytest.mark.parametrize(
    "assignments, field, detail",
    [
        ([assignment("nonsense")], "assignments[0]", "pod_key='nonsense'"),
        ([assignment("a/b/c")], "assignments[0]", "pod_key='a/b/c'"),
        ([assignment("ns/ok"), assignment("ns/p", node="")], "assignments[1]", "node=''"),
        (
            [assignment("ns/p"), assignment("ns/q"), assignment("ns/p", node="n2")],
            "assignments[2]",
            "pod ns/p appears twice",
        ),
    ],
)
def test_binder_rejects_bad_assignments(
    binder: binder_pb2_grpc.BinderStub, assignments: list, field: str, detail: str
) -> None:
    message = invalid(binder.Bind, binder_pb2.BindRequest(assignments=assignments, now=1.0))
    assert message.startswith(f"{field}:") and detail in message
    # Still serving: a valid call goes through (a pod never reserved fails, to be placed again: only the
    # cluster says a pod is gone).
    resp = binder.Bind(binder_pb2.BindRequest(assignments=[assignment("ns/never-reserved")], now=1.0), timeout=TIMEOUT)
    assert [r.status for r in resp.results] == [binder_pb2.BIND_STATUS_FAILED]
    assert resp.fence >= 1


# -- the queue --------------------------------------------------------------------------------------


def test_queue_add_reports_pods_without_a_name(queue: queue_pb2_grpc.QueueStub) -> None:
    before = queue.Stats(queue_pb2.StatsRequest(now=1.0), timeout=TIMEOUT)
    resp = queue.Add(
        queue_pb2.AddRequest(
            pods=[
                objects_pb2.Pod(namespace="add", name="ok"),
                objects_pb2.Pod(namespace="add"),
                objects_pb2.Pod(name="no-namespace"),
                objects_pb2.Pod(namespace="add", name="bad-gang", gang="nogang"),
            ],
            now=1.0,
        ),
        timeout=TIMEOUT,
    )
    assert resp.added == 1
    assert len(resp.rejected) == 3
    assert resp.rejected[0].startswith("pods[1]:") and "name" in resp.rejected[0]
    assert resp.rejected[1].startswith("pods[2]:") and "namespace" in resp.rejected[1]
    assert resp.rejected[2].startswith("pods[3] add/bad-gang:") and "'nogang'" in resp.rejected[2]
    after = queue.Stats(queue_pb2.StatsRequest(now=1.0), timeout=TIMEOUT)
    assert after.active == before.active + 1


def test_queue_done_with_an_unknown_outcome_changes_nothing(queue: queue_pb2_grpc.QueueStub) -> None:
    queue.Add(queue_pb2.AddRequest(pods=[objects_pb2.Pod(namespace="done", name="p")], now=2.0), timeout=TIMEOUT)
    popped = queue.Pop(queue_pb2.PopRequest(max_pods=1000, now=2.0), timeout=TIMEOUT)
    assert "done/p" in {f"{p.namespace}/{p.name}" for p in popped.pods}
    in_flight = queue.Stats(queue_pb2.StatsRequest(now=2.0), timeout=TIMEOUT).in_flight
    assert in_flight >= 1
    ok = queue_pb2.PodResult(pod=objects_pb2.Pod(namespace="done", name="p"), outcome=queue_pb2.OUTCOME_ASSUMED)
    for bad, field in (
        (queue_pb2.PodResult(pod=objects_pb2.Pod(namespace="done", name="x"), outcome=42), "results[1].outcome"),
        (queue_pb2.PodResult(pod=objects_pb2.Pod(namespace="done", name="x")), "results[1].outcome"),
        (
            queue_pb2.PodResult(pod=objects_pb2.Pod(namespace="done"), outcome=queue_pb2.OUTCOME_BACKOFF),
            "results[1].pod",
        ),
    ):
        message = invalid(queue.Done, queue_pb2.DoneRequest(results=[ok, bad], now=2.0))
        assert message.startswith(f"{field}:")
        # The refused request applied nothing, not even its valid first result.
        assert queue.Stats(queue_pb2.StatsRequest(now=2.0), timeout=TIMEOUT).in_flight == in_flight
    queue.Done(queue_pb2.DoneRequest(results=[ok], now=2.0), timeout=TIMEOUT)
    assert queue.Stats(queue_pb2.StatsRequest(now=2.0), timeout=TIMEOUT).in_flight == in_flight - 1


def test_queue_pop_hands_out_whole_gangs(queue: queue_pb2_grpc.QueueStub) -> None:
    queue.Pop(queue_pb2.PopRequest(max_pods=10_000, now=3.0), timeout=TIMEOUT)  # drain other tests' pods
    pods = [
        objects_pb2.Pod(namespace="pop", name=f"w{i}", gang="pop/g", created_at=3.0, gang_created_at=3.0)
        for i in range(4)
    ]
    queue.Add(queue_pb2.AddRequest(pods=pods, now=3.0), timeout=TIMEOUT)
    resp = queue.Pop(queue_pb2.PopRequest(max_pods=1, now=3.0), timeout=TIMEOUT)
    assert [p.name for p in resp.pods] == ["w0", "w1", "w2", "w3"]


# -- the scheduler ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "events, field",
    [
        (
            scheduler_pb2.ClusterEvents(nodes_upserted=[objects_pb2.Node(name="n1"), objects_pb2.Node()]),
            "nodes_upserted[1].name",
        ),
        (
            scheduler_pb2.ClusterEvents(gangs_upserted=[objects_pb2.Gang(namespace="ns", name="g", min_available=0)]),
            "gangs_upserted[0] ns/g: min_available",
        ),
        (
            scheduler_pb2.ClusterEvents(gangs_upserted=[objects_pb2.Gang(name="g", min_available=1)]),
            "gangs_upserted[0]: namespace and name",
        ),
    ],
)
def test_scheduler_rejects_bad_cluster_events(
    scheduler: scheduler_pb2_grpc.SchedulerStub, events: scheduler_pb2.ClusterEvents, field: str
) -> None:
    message = invalid(scheduler.ApplyClusterEvents, events)
    assert message.startswith(field)
    # Nothing of the refused request was applied: n1 of the first case is unknown to the scheduler.
    scheduler.ApplyClusterEvents(
        scheduler_pb2.ClusterEvents(
            gangs_upserted=[objects_pb2.Gang(namespace="ok", name="g", min_available=2, total_number=2)], now=1.0
        ),
        timeout=TIMEOUT,
    )
    assert "ok/g" in {g.key for g in scheduler.ListGangs(scheduler_pb2.ListGangsRequest(), timeout=TIMEOUT).gangs}


def test_scheduler_step_binds_a_gang_end_to_end(
    scheduler: scheduler_pb2_grpc.SchedulerStub, queue: queue_pb2_grpc.QueueStub
) -> None:
    queue.Pop(queue_pb2.PopRequest(max_pods=10_000, now=10.0), timeout=TIMEOUT)  # other tests' pods stay aside
    node = objects_pb2.Node(name="e2e-node", allocatable={"cpu": 8000, "pods": 110_000})
    gang = objects_pb2.Gang(namespace="e2e", name="g", min_available=2, total_number=2, wait_seconds=30)
    pods = [
        objects_pb2.Pod(namespace="e2e", name=f"w{i}", gang="e2e/g", requests={"cpu": 1000, "pods": 1000}, duration=-1)
        for i in range(2)
    ]
    resp = scheduler.Step(
        scheduler_pb2.StepRequest(
            now=10.0,
            events=scheduler_pb2.ClusterEvents(nodes_upserted=[node], gangs_upserted=[gang], now=10.0),
            pods_added=pods,
        ),
        timeout=30,
    )
    assert resp.pods_bound == 2
    status = {g.key: g for g in scheduler.ListGangs(scheduler_pb2.ListGangsRequest(), timeout=TIMEOUT).gangs}
    assert status["e2e/g"].satisfied and status["e2e/g"].bound == 2


# -- shutdown ---------------------------------------------------------------------------------------


def test_sigterm_stops_each_service_gracefully(tmp_path: Path) -> None:
    s = Stack.launch(log_dir=tmp_path)
    try:
        # A long-poll in progress when the queue gets SIGTERM still gets its answer.
        outcome: list[object] = []
        with grpc.insecure_channel(s.queue.address) as ch:
            stub = queue_pb2_grpc.QueueStub(ch)
            stub.Stats(queue_pb2.StatsRequest(), timeout=TIMEOUT)  # connected
            poll = threading.Thread(target=lambda: outcome.append(_pop_or_error(stub)))
            poll.start()
            time.sleep(1.0)  # the poll must be at the server (in its 3 s wait) when SIGTERM comes, even under load
            for svc in (s.scheduler, s.binder, s.queue):
                assert _terminate(svc) == 0, svc.log_tail()
            poll.join(timeout=10)
        assert len(outcome) == 1 and isinstance(outcome[0], queue_pb2.PopResponse), outcome
    finally:
        s.stop()


def _pop_or_error(stub: queue_pb2_grpc.QueueStub) -> object:
    try:
        return stub.Pop(queue_pb2.PopRequest(max_pods=1, now=1.0, wait_seconds=3.0), timeout=TIMEOUT)
    except grpc.RpcError as exc:
        return exc


def _terminate(svc: ServiceProcess) -> int:
    assert svc.proc is not None and svc.proc.poll() is None
    started = time.monotonic()
    svc.proc.send_signal(signal.SIGTERM)
    code = svc.proc.wait(timeout=8)
    assert time.monotonic() - started < 8
    return code


@pytest.mark.parametrize("module", ["phalanx_queue", "phalanx_binder", "phalanx_scheduler"])
def test_service_help(module: str) -> None:
    out = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"usage: phalanx-{module.split('_')[1]}")
    assert "--listen" in out.stdout and "--clock" in out.stdout


def _started_by_a_killed_parent(code: str) -> list[int]:
    """Runs `code` in a child Python that prints pids of processes it started, then kills that child
    (SIGKILL: no cleanup of its own); returns the pids."""
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    pids = [int(x) for x in parent.stdout.readline().split()]
    parent.kill()
    parent.wait()
    return pids


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "\nState:\tZ" not in f.read()
    except FileNotFoundError:
        return False


def _still_running_after(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while any(_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [p for p in pids if _running(p)]
    for pid in left:  # no stray server for the rest of the suite
        os.kill(pid, signal.SIGKILL)
    return left


def test_services_and_redis_end_with_an_interrupted_parent() -> None:
    """A simulation killed mid-run (Ctrl-C twice, a CI timeout) leaves no servers behind."""
    pids = _started_by_a_killed_parent(
        "from phalanx.sim.services import Stack; s = Stack.launch(); "
        "print(s.queue.proc.pid, s.binder.proc.pid, s.scheduler.proc.pid, s.redis.proc.pid, flush=True); "
        "import time; time.sleep(120)"
    )
    assert len(pids) == 4
    names = dict(zip(pids, ("queue", "binder", "scheduler", "redis-server")))
    left = {names[p]: p for p in _still_running_after(pids, 15)}
    assert left == {}, f"still running 15 s after their parent was killed: {left}"


def test_a_wrapped_binary_ends_with_its_parent() -> None:
    """Non-Python children (redis-server, the peer kube-scheduler) get the parent-death signal from the
    exec wrapper, which execs the program in its place (the pid the parent knows is the program's)."""
    pids = _started_by_a_killed_parent(
        "import subprocess, sys, time; from phalanx.testing.children import exit_with_parent_argv; "
        "p = subprocess.Popen(exit_with_parent_argv(['sleep', '300'])); "
        "deadline = time.monotonic() + 10\n"
        "while time.monotonic() < deadline and open(f'/proc/{p.pid}/cmdline', 'rb').read()[:5] != b'sleep':\n"
        "    time.sleep(0.02)\n"
        "print(p.pid, open(f'/proc/{p.pid}/cmdline', 'rb').read().split(b'\\0')[1].decode(), flush=True); "
        "time.sleep(120)"
    )
    assert len(pids) == 2 and pids[1] == 300  # the program itself, with its own argument
    assert _still_running_after(pids[:1], 10) == []


def test_open_streams_leave_room_for_unary_calls() -> None:
    """Each open stream holds a server thread for its life: ten schedulers' clients (a pop and an add stream
    each, as a leader and the replicas that led before keep them) must not leave a unary call waiting."""
    from phalanx.rpc.clients import QueueClient
    from phalanx_queue import __main__ as queue_main

    server = queue_main.build(
        queue_main.parser().parse_args(["--listen", "127.0.0.1:0", "--plaintext", "--clock", "virtual"])
    ).start()
    clients = [QueueClient(server.address, PLAINTEXT, timeout=TIMEOUT, consumer=f"s{i}") for i in range(10)]
    try:
        for client in clients:
            client.add([], 0.0)
            client.pop(1, 0.0)
        stats = clients[0].stub.Stats(queue_pb2.StatsRequest(now=0.0), timeout=5)
        assert stats.active == 0 and stats.in_flight == 0
    finally:
        for client in clients:
            client.close()
        server.stop(0)


def test_a_stream_call_past_its_deadline_is_cancelled_and_the_next_call_works(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call on an open stream has a deadline as a unary call has: here a long poll that would wait 5 s,
    given 1 s. Without it a hung server (or one with no thread left for the stream) blocks the caller."""
    from phalanx.rpc import stream_call
    from phalanx.rpc.clients import QueueClient
    from phalanx_queue import __main__ as queue_main

    monkeypatch.setattr(stream_call._Deadlines, "TICK", 0.1)
    server = queue_main.build(
        queue_main.parser().parse_args(["--listen", "127.0.0.1:0", "--plaintext", "--clock", "virtual"])
    ).start()
    client = QueueClient(server.address, PLAINTEXT, timeout=TIMEOUT)
    try:
        client.pop(1, 0.0)  # the stream open, and the deadline thread started
        request = queue_pb2.PopRequest(max_pods=1, wait_seconds=5, consumer="c", consumer_incarnation="i")
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as err:
            client._pop.call(request, 1.0)
        assert err.value.code() == grpc.StatusCode.CANCELLED
        assert 0.9 < time.monotonic() - started < 3.0
        assert client.pop(1, 0.0).items == []  # a new stream
    finally:
        client.close()
        server.stop(0)


@pytest.mark.parametrize("over", ["unary", "stream"])
def test_a_long_poll_whose_caller_went_away_pops_nothing(over: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long poll cut off by its caller (a deadline, a closed channel) must not pop: the pods would be lent to
    a call nobody reads and stay in flight for as long as that scheduler keeps popping. Here the pod that
    arrives after the caller left stays active for the next pop."""
    from phalanx.rpc import stream_call
    from phalanx.rpc.clients import QueueClient
    from phalanx_queue import __main__ as queue_main

    monkeypatch.setattr(stream_call._Deadlines, "TICK", 0.1)
    server = queue_main.build(
        queue_main.parser().parse_args(["--listen", "127.0.0.1:0", "--plaintext", "--clock", "virtual"])
    ).start()
    poller = QueueClient(server.address, PLAINTEXT, timeout=TIMEOUT, consumer="s")
    feeder = QueueClient(server.address, PLAINTEXT, timeout=TIMEOUT, consumer="other")
    request = queue_pb2.PopRequest(max_pods=1, wait_seconds=20, consumer="s", consumer_incarnation="i")
    try:
        if over == "unary":
            with grpc.insecure_channel(server.address) as ch:  # a bare stub: its future does not block
                poll = queue_pb2_grpc.QueueStub(ch).Pop.future(request, timeout=60)
                time.sleep(0.5)
                assert not poll.done()  # waiting in the server
                poll.cancel()
        else:  # the stream's deadline cancels it, as it would a poll to a server that stopped answering
            with pytest.raises(grpc.RpcError) as err:
                poller._pop.call(request, 1.0)
            assert err.value.code() == grpc.StatusCode.CANCELLED
        time.sleep(0.3)  # the server hears of the cancellation
        feeder.add([PodInfo("d", "p", created_at=1.0)], 1.0)
        time.sleep(0.3)
        stats = feeder.stub.Stats(queue_pb2.StatsRequest(now=1.0), timeout=5)
        assert (stats.active, stats.in_flight) == (1, 0)
        assert [i.pod.name for i in feeder.pop(1, 1.0).items] == ["p"]
    finally:
        poller.close()
        feeder.close()
        server.stop(0)


def test_pods_whose_pop_answer_was_lost_come_back_to_the_next_pop(monkeypatch: pytest.MonkeyPatch) -> None:
    """The queue popped and lent a pod, and the answer never reached the scheduler (here its deadline ran out
    first). The queue cannot tell; the scheduler, whose call failed, pops next under a new incarnation, and
    the pod lent to the old one comes back. Before, it stayed in flight for as long as that scheduler popped."""
    from phalanx.rpc import stream_call
    from phalanx.rpc.clients import QueueClient
    from phalanx_queue import __main__ as queue_main
    from phalanx_queue.servicer import QueueServicer

    monkeypatch.setattr(stream_call._Deadlines, "TICK", 0.1)
    answered = QueueServicer._pop
    slow = threading.Event()

    def late(
        self: QueueServicer, request: queue_pb2.PopRequest, context: grpc.ServicerContext
    ) -> queue_pb2.PopResponse:
        resp = answered(self, request, context)
        if slow.is_set():
            slow.clear()
            time.sleep(2.0)  # popped and lent: the caller's deadline runs out before the answer
        return resp

    monkeypatch.setattr(QueueServicer, "_pop", late)
    server = queue_main.build(
        queue_main.parser().parse_args(["--listen", "127.0.0.1:0", "--plaintext", "--clock", "virtual"])
    ).start()
    scheduler = QueueClient(server.address, PLAINTEXT, timeout=1.0, consumer="s")
    try:
        scheduler.add([PodInfo("d", "p", created_at=1.0)], 1.0)
        slow.set()
        with pytest.raises(grpc.RpcError):
            scheduler.pop(1, 1.0)
        time.sleep(1.5)  # the server's handler ends
        assert [i.pod.name for i in scheduler.pop(1, 1.0).items] == ["p"]
    finally:
        scheduler.close()
        server.stop(0)


def test_queue_client_notices_a_restarted_queue() -> None:
    """The queue holds pods in memory only; its clients learn of a restart from the incarnation it answers
    with, so that whoever handed it pods (the cluster feed) can hand them again."""
    from phalanx.rpc.clients import QueueClient
    from phalanx_queue import __main__ as queue_main

    def start(listen: str):  # type: ignore[no-untyped-def]
        return queue_main.build(
            queue_main.parser().parse_args(["--listen", listen, "--plaintext", "--clock", "virtual"])
        ).start()

    server = start("127.0.0.1:0")
    client = QueueClient(server.address, PLAINTEXT, timeout=TIMEOUT)
    restarts: list[str] = []
    client.on_restart(lambda: restarts.append(client.incarnation))
    try:
        client.add([], 0.0)
        client.pop(10, 0.0)
        first = client.incarnation
        assert first and restarts == []  # the first answer sets what "the same queue" means
        server.stop(0)
        server = start(server.address)
        time.sleep(0.3)  # the client's channel hears that the old process ended its streams
        # The pop and add streams were open to the old process: each is opened again before its request
        # goes out, so a restart between two calls fails neither.
        client.pop(10, 0.0)
        client.add([], 0.0)
        assert restarts == [client.incarnation] and client.incarnation != first  # once, not per call
    finally:
        client.close()
        server.stop(0)


def test_waiting_for_a_service_notices_it_soon_after_it_starts() -> None:
    """Launching a stack waits for each service; gRPC's default reconnect backoff (1 s, then 1.6 s, ...) after
    the first refused connection would add a second or more to every simulation and test start."""
    from phalanx.rpc.server import wait_healthy
    from phalanx.testing.ports import free_port
    from phalanx_queue import __main__ as queue_main

    address = f"127.0.0.1:{free_port()}"
    done: list[float] = []
    waiter = threading.Thread(target=lambda: (wait_healthy(address, timeout=20), done.append(time.monotonic())))
    waiter.start()
    time.sleep(1.2)  # several refused connections first
    started = time.monotonic()
    server = queue_main.build(
        queue_main.parser().parse_args(["--listen", address, "--plaintext", "--clock", "virtual"])
    ).start()
    try:
        waiter.join(timeout=20)
        assert done, "wait_healthy never returned"
        assert done[0] - started < 0.8
    finally:
        server.stop(0)


def test_a_restarted_queue_orders_by_the_shares_the_next_pop_carries() -> None:
    """DRF shares live in the queue's memory only. A queue that restarts (and is handed its pods again)
    orders them by the shares that come with the scheduler's next pop, which carries them every time."""
    from phalanx.model.keys import QUEUE_NAME
    from phalanx.rpc.clients import QueueClient
    from phalanx.scheduling.ports import Carry
    from phalanx_queue import __main__ as queue_main

    def start(listen: str):  # type: ignore[no-untyped-def]
        argv = ["--listen", listen, "--plaintext", "--clock", "virtual", "--job-queue-policy", "DRF"]
        return queue_main.build(queue_main.parser().parse_args(argv)).start()

    pods = [
        PodInfo("ns", "rich-job", created_at=0.0, requests={"nvidia.com/gpu": 1000}, annotations={QUEUE_NAME: "rich"}),
        PodInfo("ns", "poor-job", created_at=5.0, requests={"nvidia.com/gpu": 1000}, annotations={QUEUE_NAME: "poor"}),
    ]
    carry = Carry(shares={"rich": 0.9, "poor": 0.1}, share_capacity={"cpu": 0, "memory": 0, "gpu": 8000})
    server = start("127.0.0.1:0")
    client = QueueClient(server.address, PLAINTEXT, timeout=TIMEOUT)
    try:
        client.add(pods, 0.0)
        assert [p.pod.name for p in client.pop(1, 0.0, carry).items] == ["poor-job"]
        server.stop(0)
        server = start(server.address)
        time.sleep(0.3)  # the client hears that the old process ended its streams, reopened at the next call
        client.add(pods, 0.0)  # what the cluster feed does on noticing the restart
        assert [p.pod.name for p in client.pop(1, 0.0, carry).items] == ["poor-job"]
        # Without shares the older job would come first: the order above is the shares' doing.
        server.stop(0)
        server = start(server.address)
        time.sleep(0.3)
        client.add(pods, 0.0)
        assert [p.pod.name for p in client.pop(1, 0.0).items] == ["rich-job"]
    finally:
        client.close()
        server.stop(0)


def test_queue_client_sends_more_than_one_requests_worth_of_gangs_and_removals() -> None:
    """A rebuild of 10,000 PodGroups activates more gangs than the queue takes in one call (MAX_ITEMS): the
    client splits Done and Remove, the activations after every verdict, and the queue accepts each part
    (bench-restart's 30,000 bound pods were refused as one request, forever, before)."""
    from phalanx.rpc.clients import QueueClient
    from phalanx.rpc.validation import MAX_ITEMS
    from phalanx_queue import __main__ as queue_main

    args = queue_main.parser().parse_args(["--listen", "127.0.0.1:0", "--plaintext", "--clock", "virtual"])
    server = queue_main.build(args).start()
    client = QueueClient(server.address, PLAINTEXT, timeout=TIMEOUT)
    sent: list[tuple[int, int]] = []
    done = client.stub.Done

    def counting(req, timeout):  # type: ignore[no-untyped-def]
        sent.append((len(req.results), len(req.activate_gangs)))
        return done(req, timeout=timeout)

    client.stub.Done = counting
    try:
        gangs = [f"ns/g{i}" for i in range(2 * MAX_ITEMS + 1)]
        client.done([], gangs, [], 0.0)
        assert sent == [(0, MAX_ITEMS), (0, MAX_ITEMS), (0, 1)]
        client.remove([f"ns/p{i}" for i in range(MAX_ITEMS + 1)])
    finally:
        client.close()
        server.stop(0)
