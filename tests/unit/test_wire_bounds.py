"""One set of bounds (phalanx.model.limits) for the intake and the wire: at each bound both accept the object;
one past it, the intake refuses it naming the object and the field, so it never reaches a service.

Issue 24's fuzz cases (a PodGroup scheduleTimeoutSeconds of 2^63, a 1 MB annotation, 875,000 labels on one
pod) are among the cases; tests/integration/test_wire_bounds_simulate.py runs them through `phalanx simulate`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from builders import make_node, make_pod, make_podgroup

from phalanx.intake.errors import IntakeError
from phalanx.intake.gang_objects import object_ref, read_gang_object
from phalanx.intake.gangs import build_spec
from phalanx.intake.nodes import parse_node
from phalanx.intake.pods import parse_pod
from phalanx.model import keys
from phalanx.model.limits import INT32_MAX, MAX_ENTRIES, MAX_ID, MAX_KEY, MAX_TIME, MAX_VALUE
from phalanx.rpc.convert import gang_to_pb, node_to_pb, pod_to_pb
from phalanx.rpc.object_checks import gang_errors, node_errors, pod_errors

SPREAD = {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
TIME = int(MAX_TIME)


def pod(**paths: Any) -> dict[str, Any]:
    b = make_pod("p0", "ns").container().cpu("1")
    for path, value in paths.items():
        b = b.set(path.replace("__", "."), value)
    return b.build()


def labels(n: int) -> dict[str, str]:
    return {f"l{i}": "v" for i in range(n)}


def pod_with_requests(n: int) -> dict[str, Any]:
    b = make_pod("p0", "ns").container()
    for i in range(n):
        b = b.request(f"example.com/r{i}", "1")
    return b.build()


def podgroup(timeout: Any) -> dict[str, Any]:
    return make_podgroup("pg", "ns").min_member(1).timeout(timeout).build()


@dataclass(frozen=True)
class Bound:
    """An object at the bound (`make(limit)`) and one past it (`make(over)`), and the field named."""

    name: str
    kind: str  # "Pod", "Node", "PodGroup"
    make: Callable[[Any], dict[str, Any]]
    limit: Any
    over: Any
    field: str


BOUNDS = [
    Bound(
        "annotation value",
        "Pod",
        lambda n: pod(metadata__annotations={"big": "x" * n}),
        MAX_VALUE,
        2**20,
        "metadata.annotations[big]",
    ),
    Bound("labels", "Pod", lambda n: pod(metadata__labels=labels(n)), MAX_ENTRIES, 875_000, "metadata.labels"),
    Bound("label key", "Pod", lambda n: pod(metadata__labels={"k" * n: "v"}), MAX_KEY, MAX_KEY + 1, "metadata.labels"),
    Bound(
        "annotations",
        "Pod",
        lambda n: pod(metadata__annotations=labels(n)),
        MAX_ENTRIES,
        MAX_ENTRIES + 1,
        "metadata.annotations",
    ),
    Bound("uid", "Pod", lambda n: pod(metadata__uid="u" * n), MAX_ID, MAX_ID + 1, "metadata.uid"),
    Bound(
        "node selector",
        "Pod",
        lambda n: pod(spec__nodeSelector=labels(n)),
        MAX_ENTRIES,
        MAX_ENTRIES + 1,
        "spec.nodeSelector",
    ),
    Bound(
        "tolerations",
        "Pod",
        lambda n: pod(spec__tolerations=[{"operator": "Exists"}] * n),
        MAX_ENTRIES,
        MAX_ENTRIES + 1,
        "spec.tolerations",
    ),
    Bound(
        "toleration key",
        "Pod",
        lambda n: pod(spec__tolerations=[{"key": "k" * n, "operator": "Exists"}]),
        MAX_KEY,
        MAX_KEY + 1,
        "spec.tolerations[0].key",
    ),
    Bound(
        "resources",
        "Pod",
        pod_with_requests,
        MAX_ENTRIES - 1,  # with "pods", which every pod takes
        MAX_ENTRIES,
        "spec.containers[*].resources.requests",
    ),
    Bound(
        "simulated duration",
        "Pod",
        lambda n: pod(metadata__annotations={keys.SIM_DURATION: f"{n}s"}),
        TIME,
        TIME + 1,
        f"metadata.annotations[{keys.SIM_DURATION}]",
    ),
    Bound(
        "maxSkew",
        "Pod",
        lambda n: pod(spec__topologySpreadConstraints=[{**SPREAD, "maxSkew": n}]),
        INT32_MAX,
        INT32_MAX + 1,
        "spec.topologySpreadConstraints[0].maxSkew",
    ),
    Bound(
        "spread topologyKey",
        "Pod",
        lambda n: pod(spec__topologySpreadConstraints=[{**SPREAD, "topologyKey": "z" * n}]),
        MAX_KEY,
        MAX_KEY + 1,
        "spec.topologySpreadConstraints[0].topologyKey",
    ),
    Bound(
        "node labels",
        "Node",
        lambda n: make_node("n1").cpu("1").build() | {"metadata": {"name": "n1", "labels": labels(n - 1)}},
        MAX_ENTRIES,  # with kubernetes.io/hostname, which the intake adds
        MAX_ENTRIES + 1,
        "metadata.labels",
    ),
    Bound(
        "taints",
        "Node",
        lambda n: make_node("n1").cpu("1").build() | {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}] * n}},
        MAX_ENTRIES,
        MAX_ENTRIES + 1,
        "spec.taints",
    ),
    Bound(
        "selector values",
        "Pod",
        lambda n: make_pod("p0", "ns").affinity_term({"key": "zone", "operator": "In", "values": ["z"] * n}).build(),
        MAX_ENTRIES,
        MAX_ENTRIES + 1,
        "spec.affinity.nodeAffinity",
    ),
    Bound(
        "selector value",
        "Pod",
        lambda n: make_pod("p0", "ns").affinity_term({"key": "zone", "operator": "In", "values": ["z" * n]}).build(),
        MAX_KEY,
        MAX_KEY + 1,
        "spec.affinity.nodeAffinity",
    ),
    Bound("scheduleTimeoutSeconds", "PodGroup", podgroup, TIME, 2**63, "spec.scheduleTimeoutSeconds"),
    Bound(
        "waiting-time",
        "PodGroup",
        lambda n: make_podgroup("pg", "ns").min_member(1).timeout(f"{n}s").build(),
        TIME,
        TIME + 1,
        "spec.scheduleTimeoutSeconds",
    ),
]


def wire_errors(kind: str, obj: dict[str, Any]) -> list[str]:
    """Read the object as the intake does and check it as the services do; IntakeError when refused."""
    if kind == "Pod":
        return pod_errors(pod_to_pb(parse_pod(obj)), "pod")
    if kind == "Node":
        return node_errors(node_to_pb(parse_node(obj)), "node")
    ref = object_ref(obj)
    params = read_gang_object(obj, ref)
    assert params is not None
    spec = build_spec(ref.namespace, ref.name, params, source=ref.source, created_at=0.0, default_wait_seconds=None)
    return gang_errors(gang_to_pb(spec), "gang")


@pytest.mark.parametrize("bound", BOUNDS, ids=lambda b: b.name)
def test_at_the_bound_the_intake_and_the_wire_both_accept(bound: Bound) -> None:
    assert wire_errors(bound.kind, bound.make(bound.limit)) == []


@pytest.mark.parametrize("bound", BOUNDS, ids=lambda b: b.name)
def test_past_the_bound_the_intake_refuses_naming_object_and_field(bound: Bound) -> None:
    with pytest.raises(IntakeError) as caught:
        wire_errors(bound.kind, bound.make(bound.over))
    exc = caught.value
    assert (exc.kind, exc.name) == (bound.kind, "pg" if bound.kind == "PodGroup" else bound.make(0)["metadata"]["name"])
    assert exc.field.startswith(bound.field), str(exc)
    assert "maximum" in exc.message and len(str(exc)) < 400, str(exc)


def test_the_fuzz_cases_messages() -> None:
    cases = {
        "PodGroup ns/pg: spec.scheduleTimeoutSeconds: 9223372036854775808 is above the maximum 1000000000000 seconds": (
            lambda: wire_errors("PodGroup", podgroup(2**63))
        ),
        "Pod ns/p0: metadata.annotations[big]: 1048576 characters is above the maximum 262144": (
            lambda: parse_pod(pod(metadata__annotations={"big": "x" * 2**20}))
        ),
        "Pod ns/p0: metadata.labels: 875000 entries is above the maximum 4096": (
            lambda: parse_pod(pod(metadata__labels=labels(875_000)))
        ),
    }
    for expected, read in cases.items():
        with pytest.raises(IntakeError) as caught:
            read()
        assert str(caught.value) == expected


def test_generated_bad_inputs_are_refused_by_name_never_sent() -> None:
    """Fuzz-style: random values past random bounds, alone or mixed with good ones; the intake refuses each
    with a one-line error naming the field, or (when every value is within bounds) the wire accepts."""
    rng = random.Random(24)
    for _ in range(60):
        bound = rng.choice(BOUNDS)
        past = rng.random() < 0.7
        value = bound.over if past else bound.limit - rng.randrange(0, 3)
        try:
            errors = wire_errors(bound.kind, bound.make(value))
        except IntakeError as exc:
            assert past, str(exc)
            assert exc.field.startswith(bound.field) and "\n" not in str(exc)
            continue
        assert not past and errors == [], (bound.name, errors)


def test_a_creation_time_before_1970_is_refused_by_name() -> None:
    """The wire takes creation times from 0 on; the cluster feed reads them as Unix times."""
    with pytest.raises(IntakeError) as caught:
        parse_pod(pod(metadata__creationTimestamp="1969-12-31T23:59:59Z"))
    assert caught.value.field == "metadata.creationTimestamp"
    assert pod_errors(pod_to_pb(parse_pod(pod(metadata__creationTimestamp="1970-01-01T00:00:00Z"))), "pod") == []
