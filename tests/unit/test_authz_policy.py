"""The authorization table covers every method the services serve, and refuses by default."""

from __future__ import annotations

import grpc
import pytest

from phalanx.security import tls
from phalanx.security.authz import POLICY, refusal
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
