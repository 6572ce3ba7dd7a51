"""The authorization table covers every method the services serve, and refuses by default."""

from __future__ import annotations

import grpc
import pytest

from phalanx.security import tls
from phalanx.security.authz import POLICY, policy_for, refusal
from phalanx.v1 import binder_pb2, queue_pb2, scheduler_pb2


def _methods() -> list[str]:
    out = []
    for module in (queue_pb2, binder_pb2, scheduler_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            out += [f"/{service.full_name}/{m.name}" for m in service.methods]
    return out


@pytest.mark.parametrize("method", _methods())
def test_every_method_has_an_entry(method: str) -> None:
    # A new RPC without a line in the table would be refused to everyone: decide who may call it.
    assert method in POLICY


def test_binding_and_popping_belong_to_the_scheduler_alone() -> None:
    for method in (
        "/phalanx.v1.Binder/Bind",
        "/phalanx.v1.Binder/BindStream",
        "/phalanx.v1.Binder/BindManyStream",
        "/phalanx.v1.Binder/Report",
        "/phalanx.v1.Binder/ReportStream",
        "/phalanx.v1.Queue/Pop",
        "/phalanx.v1.Queue/PopStream",
        "/phalanx.v1.Queue/Done",
    ):
        assert POLICY[method] == {tls.SCHEDULER}, method


def test_refusals() -> None:
    assert refusal("/phalanx.v1.Queue/Pop", tls.SCHEDULER) is None
    assert refusal("/phalanx.v1.Queue/Pop", "")[0] == grpc.StatusCode.UNAUTHENTICATED  # type: ignore[index]
    assert refusal("/phalanx.v1.Queue/Pop", tls.OPERATOR)[0] == grpc.StatusCode.PERMISSION_DENIED  # type: ignore[index]
    assert refusal("/grpc.reflection.v1.ServerReflection/X", tls.SCHEDULER)[0] == grpc.StatusCode.PERMISSION_DENIED  # type: ignore[index]
    assert refusal("/grpc.health.v1.Health/Check", tls.OPERATOR) is None


def test_against_the_api_server_the_simulator_identity_may_call_nothing_but_health() -> None:
    # Issue 23: with the simulator's certificate, Queue.Add took a forged copy of a pending GPU gang.
    kube = policy_for(kubernetes=True)
    assert kube["/phalanx.v1.Queue/Add"] == kube["/phalanx.v1.Queue/AddStream"] == {tls.SCHEDULER}
    for method, allowed in kube.items():
        if not method.startswith("/grpc.health"):
            assert tls.SIMULATOR not in allowed, method
    for method in ("/phalanx.v1.Queue/Add", "/phalanx.v1.Queue/AddStream"):
        code, text = refusal(method, tls.SIMULATOR, kube)  # type: ignore[misc]
        assert code == grpc.StatusCode.PERMISSION_DENIED
        assert "'phalanx-simulator' may not call this method when running against the Kubernetes API server" in text
    assert refusal("/grpc.health.v1.Health/Check", tls.SIMULATOR, kube) is None
    # The embedded cluster's simulator still feeds its pods.
    assert refusal("/phalanx.v1.Queue/Add", tls.SIMULATOR, policy_for(kubernetes=False)) is None
