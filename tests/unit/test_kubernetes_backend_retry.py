"""KubernetesBackend.bind's handling of API answers, with the API faked: retries with backoff for transient
errors, a 409 resolved by reading the pod back, no retry for a refusal."""

from __future__ import annotations

import json
from typing import Any

import urllib3

from phalanx.backends.kubernetes import KubernetesBackend, RetryPolicy
from phalanx.kube.errors import ApiError
from phalanx.model.binding import Assignment
from phalanx.state.txn import Txn


class Resp:
    """urllib3's answer as the client hands it over with _preload_content=False."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.data = json.dumps(body).encode()
        self.released = False

    def read(self) -> bytes:
        return self.data

    def release_conn(self) -> None:
        self.released = True


class FakeCore:
    pipeline = None  # the per-pod path (a pipeline's first attempts are tested in test_kube_pipeline.py)

    def __init__(self, bind_answers: list[Exception | None], pod: dict[str, Any] | None = None) -> None:
        self.bind_answers = bind_answers
        self.pod = pod
        self.binds = 0
        self.events: list[dict[str, Any]] = []

    def create_namespaced_pod_binding(self, name: str, namespace: str, body: Any, **kw: Any) -> Resp:
        self.binds += 1
        answer = self.bind_answers.pop(0) if self.bind_answers else None
        if answer is not None:
            raise answer
        return Resp({"status": "Success"})

    def read_namespaced_pod(self, name: str, namespace: str, **kw: Any) -> Resp:
        if self.pod is None:
            raise ApiError(status=404, reason="Not Found")
        return Resp(self.pod)

    def create_namespaced_event(self, namespace: str, body: dict[str, Any], **kw: Any) -> Resp:
        self.events.append(body)
        return Resp(body)


def bind(core: FakeCore) -> dict[str, Any]:
    backend = KubernetesBackend(None, retry=RetryPolicy(attempts=4, initial_delay=0.001, max_delay=0.002))
    backend.core = backend.bind_api = core  # type: ignore[assignment]
    try:
        return backend.bind([Assignment(pod_key="ns/p", uid="u1", node="n1")], 0.0, Txn())
    finally:
        backend.close()


def test_transient_errors_are_retried() -> None:
    core = FakeCore(
        [
            ApiError(status=500, reason="boom"),
            ApiError(status=429, reason="slow down"),
            urllib3.exceptions.ProtocolError("reset"),
        ]
    )
    assert bind(core) == {}
    assert core.binds == 4
    assert [e["reason"] for e in core.events] == ["Scheduled"]
    assert core.events[0]["message"] == "Successfully assigned ns/p to n1"


def test_retries_are_bounded() -> None:
    core = FakeCore([ApiError(status=503, reason="unavailable")] * 10)
    failures = bind(core)
    assert core.binds == 4 and "after 4 attempts" in failures["ns/p"].message and not failures["ns/p"].gone
    assert core.events == []


def test_conflict_resolved_by_reading_the_pod() -> None:
    mine = {"metadata": {"uid": "u1"}, "spec": {"nodeName": "n1"}}
    assert bind(FakeCore([ApiError(status=409, reason="Conflict")], mine)) == {}  # our earlier bind did it
    elsewhere = {"metadata": {"uid": "u1"}, "spec": {"nodeName": "n2"}}
    failure = bind(FakeCore([ApiError(status=409, reason="Conflict")], elsewhere))["ns/p"]
    assert "already bound to n2" in failure.message and not failure.gone
    recreated = {"metadata": {"uid": "u2"}, "spec": {}}
    assert bind(FakeCore([ApiError(status=409, reason="Conflict")], recreated))["ns/p"].gone
    assert bind(FakeCore([ApiError(status=404, reason="Not Found")]))["ns/p"].gone


def test_refusals_are_not_retried() -> None:
    core = FakeCore([ApiError(status=403, reason="Forbidden")])
    failure = bind(core)["ns/p"]
    assert core.binds == 1 and "403" in failure.message
