"""Mutual TLS and per-method authorization on real gRPC servers: who gets in, who may call what,
certificate rotation without a restart, and plaintext only on loopback."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from phalanx.model.binding import Assignment, BindStatus
from phalanx.rpc.clients import BinderClient, QueueClient
from phalanx.rpc.server import ServiceServer, dial
from phalanx.security import certs, tls
from phalanx.security.cli import make_tree
from phalanx.security.tls import PLAINTEXT, Security
from phalanx.testing.redis_server import RedisServer
from phalanx.v1 import binder_pb2, binder_pb2_grpc, objects_pb2, queue_pb2, queue_pb2_grpc

pytestmark = pytest.mark.integration

QUEUE_POP = "/phalanx.v1.Queue/Pop"


@pytest.fixture
def tls_dir(tmp_path: Path) -> Path:
    make_tree(tmp_path / "tls", list(tls.ALL_IDENTITIES), [], ["127.0.0.1"], days=1)
    return tmp_path / "tls"


def _start_queue(tls_dir: Path, backend: str) -> ServiceServer:
    from phalanx_queue import __main__ as queue_main

    return queue_main.build(
        queue_main.parser().parse_args(
            [
                "--listen",
                "127.0.0.1:0",
                "--health-listen",
                "127.0.0.1:0",
                "--tls-dir",
                str(tls_dir / tls.QUEUE),
                "--clock",
                "virtual",
                "--backend",
                backend,
            ]
        )
    ).start()


@pytest.fixture
def queue(tls_dir: Path) -> Iterator[ServiceServer]:
    server = _start_queue(tls_dir, "simulated")
    yield server
    server.stop(0)


def _channel(address: str, tls_dir: Path, identity: str, peer: str = tls.QUEUE) -> grpc.Channel:
    """As `identity`, without the services' own size limits (the server's are what is tested)."""
    return dial(address, Security.tls(tls_dir / identity), peer)


def _pop(ch: grpc.Channel) -> queue_pb2.PopResponse:
    return queue_pb2_grpc.QueueStub(ch).Pop(queue_pb2.PopRequest(max_pods=10, now=1.0, consumer="x"), timeout=5)


def _add_one(ch: grpc.Channel) -> queue_pb2.AddResponse:
    pod = objects_pb2.Pod(namespace="ns", name="p", priority=0, created_at=1.0)
    return queue_pb2_grpc.QueueStub(ch).Add(queue_pb2.AddRequest(pods=[pod], now=1.0), timeout=5)


def _code(call) -> grpc.StatusCode:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value.code()  # type: ignore[no-any-return]


def test_a_caller_without_a_certificate_of_the_ca_never_reaches_a_method(
    queue: ServiceServer, tls_dir: Path, tmp_path: Path
) -> None:
    with _channel(queue.address, tls_dir, tls.SCHEDULER) as ch:
        assert _add_one(ch).added == 1
    # Plaintext, TLS without a client certificate, and a certificate of another CA naming the scheduler:
    # the TLS handshake fails, which gRPC reports to the caller as UNAVAILABLE.
    with grpc.insecure_channel(queue.address) as ch:
        assert _code(lambda: _pop(ch)) == grpc.StatusCode.UNAVAILABLE
    ca = (tls_dir / tls.SCHEDULER / "ca.crt").read_bytes()
    with grpc.secure_channel(
        queue.address, grpc.ssl_channel_credentials(ca), options=[("grpc.ssl_target_name_override", tls.QUEUE)]
    ) as ch:
        assert _code(lambda: _pop(ch)) == grpc.StatusCode.UNAVAILABLE
    forged = certs.issue(certs.new_ca(), tls.SCHEDULER)
    with grpc.secure_channel(
        queue.address,
        grpc.ssl_channel_credentials(ca, forged.key_pem, forged.cert_pem),
        options=[("grpc.ssl_target_name_override", tls.QUEUE)],
    ) as ch:
        assert _code(lambda: _pop(ch)) == grpc.StatusCode.UNAVAILABLE
    # None of them took the pod out.
    with _channel(queue.address, tls_dir, tls.SCHEDULER) as ch:
        assert [p.name for p in _pop(ch).pods] == ["p"]


def test_only_the_scheduler_may_take_pods_out_of_the_queue(queue: ServiceServer, tls_dir: Path) -> None:
    with _channel(queue.address, tls_dir, tls.SCHEDULER) as ch:
        _add_one(ch)
    for identity in (tls.OPERATOR, tls.BINDER, tls.SIMULATOR):
        with _channel(queue.address, tls_dir, identity) as ch:
            with pytest.raises(grpc.RpcError) as err:
                _pop(ch)
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert identity in (err.value.details() or "") and "Pop" in (err.value.details() or "")
    with _channel(queue.address, tls_dir, tls.BINDER) as ch:
        assert _code(lambda: _add_one(ch)) == grpc.StatusCode.PERMISSION_DENIED
    with _channel(queue.address, tls_dir, tls.OPERATOR) as ch:  # reading is allowed
        stats = queue_pb2_grpc.QueueStub(ch).Stats(queue_pb2.StatsRequest(now=1.0), timeout=5)
        assert stats.active == 1
    with _channel(queue.address, tls_dir, tls.SCHEDULER) as ch:
        assert [p.name for p in _pop(ch).pods] == ["p"]


def test_only_the_scheduler_may_bind(tls_dir: Path) -> None:
    from phalanx_binder import __main__ as binder_main

    redis = RedisServer().start()
    server = binder_main.build(
        binder_main.parser().parse_args(
            [
                "--listen",
                "127.0.0.1:0",
                "--health-listen",
                "127.0.0.1:0",
                "--tls-dir",
                str(tls_dir / tls.BINDER),
                "--clock",
                "virtual",
                "--backend",
                "simulated",
                "--redis-url",
                redis.url,
            ]
        )
    ).start()
    request = binder_pb2.BindRequest(assignments=[binder_pb2.Assignment(pod_key="ns/p", node="n1")], now=1.0)
    try:
        for identity in (tls.OPERATOR, tls.QUEUE, tls.SIMULATOR):
            with _channel(server.address, tls_dir, identity, tls.BINDER) as ch:
                stub = binder_pb2_grpc.BinderStub(ch)
                assert _code(lambda: stub.Bind(request, timeout=5)) == grpc.StatusCode.PERMISSION_DENIED
                report = binder_pb2.ReportRequest(pods=[binder_pb2.PodReport(pod_key="ns/p", annotations={"a": "b"})])
                assert _code(lambda: stub.Report(report, timeout=5)) == grpc.StatusCode.PERMISSION_DENIED
                stream = lambda: list(stub.ReportStream(iter([report]), timeout=5))  # noqa: E731
                assert _code(stream) == grpc.StatusCode.PERMISSION_DENIED
        # The scheduler's own client gets through (the pod has no reservation: FAILED, not refused).
        client = BinderClient(server.address, Security.tls(tls_dir / tls.SCHEDULER), timeout=5)
        results = client.bind([Assignment(pod_key="ns/p", uid="", node="n1")], False, 1.0, "")
        assert results[0].status == BindStatus.FAILED
        client.close()
    finally:
        server.stop(0)
        redis.stop()


def test_kubelet_probes_reach_health_alone_in_plaintext(queue: ServiceServer) -> None:
    with grpc.insecure_channel(queue.health_address) as ch:
        resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service="readiness"), timeout=5)
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
        assert _code(lambda: _pop(ch)) == grpc.StatusCode.UNIMPLEMENTED


def test_renewed_certificates_are_used_without_a_restart(
    queue: ServiceServer, tls_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tls, "RECHECK_SECONDS", 0.0)
    scheduler = QueueClient(queue.address, Security.tls(tls_dir / tls.SCHEDULER), timeout=5)
    scheduler.stats(1.0)
    old = tmp_path / "old"
    shutil.copytree(tls_dir, old)
    # Everything renewed under a new CA, as when cert-manager's CA is rotated: files replaced in place.
    renewed = tmp_path / "renewed"
    make_tree(renewed, list(tls.ALL_IDENTITIES), [], ["127.0.0.1"], days=1)
    for identity in tls.ALL_IDENTITIES:
        for name in ("ca.crt", "tls.crt", "tls.key"):
            shutil.copy(renewed / identity / name, tls_dir / identity / name)
    # The running server and the running client pick the new files up; a client of the old CA is out.
    with _channel(queue.address, renewed, tls.SCHEDULER) as ch:
        assert _pop(ch).pending == 0
    assert scheduler.stats(2.0).active == 0
    with _channel(queue.address, old, tls.SCHEDULER) as ch:
        assert _code(lambda: _pop(ch)) == grpc.StatusCode.UNAVAILABLE
    scheduler.close()


def test_plaintext_is_served_on_loopback_only() -> None:
    with pytest.raises(ValueError, match="loopback"):
        ServiceServer("queue", "0.0.0.0:0", lambda s: None, security=PLAINTEXT)
    from phalanx_queue import __main__ as queue_main

    with pytest.raises(SystemExit, match="--plaintext is allowed on loopback addresses only"):
        queue_main.build(queue_main.parser().parse_args(["--listen", "0.0.0.0:0", "--plaintext"]))


def test_missing_certificates_stop_the_service_with_the_file_named(tmp_path: Path) -> None:
    from phalanx_queue import __main__ as queue_main

    with pytest.raises(SystemExit, match=r"--tls-dir: TLS file .*nowhere/ca\.crt"):
        queue_main.build(
            queue_main.parser().parse_args(["--listen", "127.0.0.1:0", "--tls-dir", str(tmp_path / "nowhere")])
        )


def test_an_oversized_request_is_refused_before_it_is_read(queue: ServiceServer, tls_dir: Path) -> None:
    pod = objects_pb2.Pod(namespace="ns", name="big", annotations={"x": "y" * (17 * 1024 * 1024)})
    with _channel(queue.address, tls_dir, tls.SCHEDULER) as ch:
        stub = queue_pb2_grpc.QueueStub(ch)
        code = _code(lambda: stub.Add(queue_pb2.AddRequest(pods=[pod], now=1.0), timeout=10))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert _pop(ch).pending == 0


@pytest.mark.parametrize("backend", ["kubernetes", "simulated"])
def test_only_the_scheduler_adds_pods_to_a_queue_serving_the_api_server(tls_dir: Path, backend: str) -> None:
    # Issue 23: the simulator's certificate re-added a pending GPU gang asking for no GPU, and it was bound.
    server = _start_queue(tls_dir, backend)
    try:
        with _channel(server.address, tls_dir, tls.SIMULATOR) as ch:
            if backend == "kubernetes":
                with pytest.raises(grpc.RpcError) as err:
                    _add_one(ch)
                assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
                assert "when running against the Kubernetes API server" in (err.value.details() or "")
            else:
                _add_one(ch)  # the embedded cluster's simulator feeds its own pods
        with _channel(server.address, tls_dir, tls.SCHEDULER) as ch:
            _add_one(ch)
    finally:
        server.stop(0)


def test_the_simulator_identity_is_issued_only_for_the_simulated_backend(tmp_path: Path) -> None:
    from phalanx.cli.main import main

    def certs(*argv: str) -> object:
        with pytest.raises(SystemExit) as done:
            main(["certs", *argv])
        return done.value.code

    assert certs("--out", str(tmp_path / "k8s")) == 0
    assert not (tmp_path / "k8s" / tls.SIMULATOR).exists()
    assert (tmp_path / "k8s" / tls.SCHEDULER / "tls.crt").exists() and (tmp_path / "k8s" / tls.OPERATOR).exists()
    assert certs("--out", str(tmp_path / "sim"), "--backend", "simulated") == 0
    assert (tmp_path / "sim" / tls.SIMULATOR / "tls.crt").exists()
