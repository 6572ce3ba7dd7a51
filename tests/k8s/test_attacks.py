"""The attacks of a caller who can reach the services' ports, replayed against a real kube-apiserver with
the services as deployed (mutual TLS, Kubernetes mode). Each one worked before the services authenticated
callers and took cluster state from the API server alone; each is now refused, and the cluster shows it."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest
from conftest import GPU, TLS_DIR, Cluster, Phalanx
from waiting import wait_for

from phalanx.rpc.server import dial
from phalanx.security import tls
from phalanx.security.tls import Security
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


def _secure(address: str, identity: str, peer: str) -> grpc.Channel:
    """As `identity`, without the services' own size limits (the server's are what is tested)."""
    return dial(address, Security.tls(TLS_DIR / identity), peer)


def _callers(address: str, peer: str) -> list[tuple[str, grpc.Channel]]:
    """An anonymous caller, and holders of every certificate of the installation but the scheduler's."""
    out = [("anonymous", grpc.insecure_channel(address))]
    out += [
        (identity, _secure(address, identity, peer))
        for identity in (tls.OPERATOR, tls.SIMULATOR, tls.QUEUE, tls.BINDER)
        if identity != peer
    ]
    return out


def _refused(call) -> grpc.StatusCode:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.RpcError) as err:
        call()
    code = err.value.code()
    assert code in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.FAILED_PRECONDITION,
    ), err.value
    return code  # type: ignore[no-any-return]


def _scheduler_address(phalanx: Phalanx) -> str:
    return str(phalanx.scheduler[0].address)


def _foreign_pod(cluster: Cluster) -> tuple[str, str]:
    ns = cluster.namespace("foreign")
    cluster.pod(ns, "victim", gpus=0, scheduler="default-scheduler")
    return ns, "victim"


def test_a_foreign_pod_cannot_be_bound_through_step(cluster: Cluster, phalanx: Phalanx) -> None:
    node = cluster.node("n1", gpus=8)
    ns, name = _foreign_pod(cluster)
    pod = objects_pb2.Pod(namespace=ns, name=name, created_at=time.time())
    for who, ch in _callers(_scheduler_address(phalanx), tls.SCHEDULER):
        stub = scheduler_pb2_grpc.SchedulerStub(ch)
        code = _refused(lambda: stub.Step(scheduler_pb2.StepRequest(now=time.time(), pods_added=[pod]), timeout=5))
        # Against the API server the simulator's certificate is refused like every other identity's.
        assert code == (grpc.StatusCode.UNAVAILABLE if who == "anonymous" else grpc.StatusCode.PERMISSION_DENIED), who
        ch.close()
    # A gang of Phalanx's own still binds, so the scheduler did run meanwhile; the foreign pod did not move.
    app = cluster.namespace("app")
    names = cluster.koord_pods(app, "g", 2, min_available=2)
    wait_for(lambda: cluster.all_bound(app, names), 30, "Phalanx's own gang binds")
    assert cluster.node_of(ns, name) == ""
    assert node


def test_a_ghost_node_cannot_be_declared(cluster: Cluster, phalanx: Phalanx) -> None:
    real = cluster.node("n1", gpus=8)
    ghost = objects_pb2.Node(name=f"{cluster.tid}-ghost", allocatable={GPU: 64_000, "cpu": 640_000, "pods": 110_000})
    for who, ch in _callers(_scheduler_address(phalanx), tls.SCHEDULER):
        stub = scheduler_pb2_grpc.SchedulerStub(ch)
        _refused(
            lambda: stub.ApplyClusterEvents(
                scheduler_pb2.ClusterEvents(nodes_upserted=[ghost], now=time.time()), timeout=5
            )
        )
        ch.close()
    ns = cluster.namespace()
    names = cluster.koord_pods(ns, "g", 8, min_available=8)
    wait_for(lambda: cluster.all_bound(ns, names), 30, "the gang binds")
    assert set(cluster.all_bound(ns, names).values()) == {real}  # type: ignore[union-attr]


def test_running_pods_cannot_be_reported_finished_to_overcommit_a_node(cluster: Cluster, phalanx: Phalanx) -> None:
    cluster.node("n1", gpus=8)
    ns = cluster.namespace()
    first = cluster.koord_pods(ns, "a", 8, min_available=8)
    wait_for(lambda: cluster.all_bound(ns, first), 30, "the first gang binds")
    finished = [f"{ns}/{n}" for n in first]
    for _, ch in _callers(_scheduler_address(phalanx), tls.SCHEDULER):
        stub = scheduler_pb2_grpc.SchedulerStub(ch)
        _refused(
            lambda: stub.ApplyClusterEvents(
                scheduler_pb2.ClusterEvents(pods_finished=finished, now=time.time()), timeout=5
            )
        )
        ch.close()
    second = cluster.koord_pods(ns, "b", 8, min_available=8)
    wait_for(lambda: cluster.judged(ns, second), 30, "the scheduler's verdict on each pod of the second gang")
    assert cluster.all_bound(ns, second) is None
    assert sum(cluster.gpus_by_node(ns, first + second).values()) == 8  # 8 GPUs on an 8-GPU node, not 16


def test_reports_cannot_write_on_a_foreign_pod(cluster: Cluster, phalanx: Phalanx) -> None:
    ns, name = _foreign_pod(cluster)
    before = cluster.read_pod(ns, name)
    report = binder_pb2.ReportRequest(
        now=time.time(),
        pods=[
            binder_pb2.PodReport(
                pod_key=f"{ns}/{name}",
                annotations={"gang.scheduling.koordinator.sh/timeout": "true", "evil": "1"},
                unschedulable_message="pwned",
                event_reason="FailedScheduling",
                event_message="pwned",
            )
        ],
    )
    for _, ch in _callers(phalanx.binder.address, tls.BINDER):
        stub = binder_pb2_grpc.BinderStub(ch)
        _refused(lambda: stub.Report(report, timeout=5))
        _refused(lambda: list(stub.ReportStream(iter([report]), timeout=5)))
        ch.close()
    # The binder's report writer has run since: a pod of Phalanx's own that fits nowhere is told so.
    app = cluster.namespace("app")
    cluster.pod(app, "unplaceable", gpus=1)
    wait_for(lambda: "FailedScheduling" in cluster.reasons(app, "unplaceable"), 30, "a report written on our own pod")
    after = cluster.read_pod(ns, name)
    assert after["metadata"].get("annotations") == before["metadata"].get("annotations")
    assert after.get("status", {}).get("conditions") == before.get("status", {}).get("conditions")
    assert cluster.events(ns, name) == []


def test_a_foreign_pod_cannot_be_bound_through_the_binder(cluster: Cluster, phalanx: Phalanx) -> None:
    node = cluster.node("n1", gpus=8)
    ns, name = _foreign_pod(cluster)
    request = binder_pb2.BindRequest(
        assignments=[binder_pb2.Assignment(pod_key=f"{ns}/{name}", node=node)], now=time.time()
    )
    for _, ch in _callers(phalanx.binder.address, tls.BINDER):
        stub = binder_pb2_grpc.BinderStub(ch)
        _refused(lambda: stub.Bind(request, timeout=5))
        ch.close()
    assert cluster.node_of(ns, name) == ""


def test_pods_cannot_be_taken_out_of_the_queue(cluster: Cluster, phalanx: Phalanx) -> None:
    cluster.node("n1", gpus=8)
    stop = time.monotonic() + 4
    stealers = _callers(phalanx.queue.address, tls.QUEUE)
    ns = cluster.namespace()
    names = cluster.koord_pods(ns, "g", 4, min_available=4)
    while time.monotonic() < stop:  # keep trying to pop while the gang arrives
        for _, ch in stealers:
            stub = queue_pb2_grpc.QueueStub(ch)
            _refused(lambda: stub.Pop(queue_pb2.PopRequest(max_pods=100, now=time.time(), consumer="thief"), timeout=5))
        time.sleep(0.2)
    for _, ch in stealers:
        ch.close()
    wait_for(lambda: cluster.all_bound(ns, names), 30, "the gang binds, none of its pods stolen")


def test_floods_are_refused(phalanx: Phalanx) -> None:
    with _secure(phalanx.queue.address, tls.SCHEDULER, tls.QUEUE) as ch:  # even with the scheduler's certificate
        stub = queue_pb2_grpc.QueueStub(ch)
        junk = [objects_pb2.Pod(namespace="junk", name=f"p{i}", created_at=1.0) for i in range(20_000)]
        with pytest.raises(grpc.RpcError) as err:
            stub.Add(queue_pb2.AddRequest(pods=junk, now=time.time()), timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "pods: 20000 items is too many (at most 10000)" in (err.value.details() or "")
        huge = objects_pb2.Pod(namespace="junk", name="big", annotations={"x": "y" * (20 * 1024 * 1024)})
        with pytest.raises(grpc.RpcError) as err:
            stub.Add(queue_pb2.AddRequest(pods=[huge], now=time.time()), timeout=10)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        stats = stub.Stats(queue_pb2.StatsRequest(now=time.time()), timeout=5)
        assert stats.active + stats.backoff + stats.unschedulable == 0


def test_the_services_listen_with_tls_only(phalanx: Phalanx) -> None:
    for server in (phalanx.queue, phalanx.binder, phalanx.scheduler[0]):
        assert server.health_address and server.health_address != server.address
    assert Path(TLS_DIR / tls.SCHEDULER / "tls.key").stat().st_mode & 0o077 == 0


# -- issue 23: a forged copy of a pending pod handed to the queue ----------------------------------------------


def _forged(ns: str, names: list[str], uids: dict[str, str]) -> list[objects_pb2.Pod]:
    """The pods of a pending 1-GPU gang as an attacker re-adds them: asking a tenth of a core and no GPU,
    with the gang's name left off (so they would be placed one by one)."""
    return [
        objects_pb2.Pod(namespace=ns, name=n, uid=uids.get(n, ""), created_at=1.0, requests={"cpu": 100, "pods": 1000})
        for n in names
    ]


@pytest.mark.parametrize("with_uids", [True, False], ids=["with-uids", "without-uids"])
def test_a_forged_pod_spec_handed_to_the_queue_over_commits_nothing(
    cluster: Cluster, phalanx: Phalanx, with_uids: bool
) -> None:
    # Two 8-GPU nodes, all 16 GPUs held by running gangs; a gang of 8 one-GPU pods waits for room.
    cluster.node("n1", gpus=8)
    cluster.node("n2", gpus=8)
    ns = cluster.namespace()
    held = cluster.koord_pods(ns, "a", 8, min_available=8) + cluster.koord_pods(ns, "b", 8, min_available=8)
    wait_for(lambda: cluster.all_bound(ns, held), 30, "the cluster's 16 GPUs held")
    waiting = cluster.koord_pods(ns, "gc", 8, min_available=8, wait="600s")
    wait_for(lambda: cluster.judged(ns, waiting), 30, "the scheduler's verdict on the waiting gang")
    uids = {n: cluster.read_pod(ns, n)["metadata"]["uid"] for n in waiting} if with_uids else {}
    forged = queue_pb2.AddRequest(pods=_forged(ns, waiting, uids), now=time.time())
    # The simulator's certificate (issued by `phalanx certs --backend simulated` only) is refused outright.
    with _secure(phalanx.queue.address, tls.SIMULATOR, tls.QUEUE) as ch:
        with pytest.raises(grpc.RpcError) as err:
            queue_pb2_grpc.QueueStub(ch).Add(forged, timeout=5)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        with pytest.raises(grpc.RpcError) as err:
            list(queue_pb2_grpc.QueueStub(ch).AddStream(iter([forged]), timeout=5))
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    # The scheduler's own certificate gets the forged copies into the queue, where they are popped: the
    # scheduler places each pod as the API server has it (a GPU, in its gang), so nothing fits.
    with _secure(phalanx.queue.address, tls.SCHEDULER, tls.QUEUE) as ch:
        queue_pb2_grpc.QueueStub(ch).Add(forged, timeout=5)
    time.sleep(1.0)  # several scheduling rounds
    cluster.canary()
    assert cluster.all_bound(ns, waiting) is None
    assert not any(cluster.node_of(ns, n) for n in waiting)
    assert max(cluster.gpus_by_node(ns, held + waiting).values()) == 8  # 8 GPUs on each 8-GPU node, not 12
    # Room made: the gang binds whole, as its pods ask.
    for name in held[:8]:
        cluster.delete_pod(ns, name)
    wait_for(lambda: cluster.all_bound(ns, waiting), 30, "the real gang binds once there is room")
    assert max(cluster.gpus_by_node(ns, held[8:] + waiting).values()) == 8
