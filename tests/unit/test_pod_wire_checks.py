"""The queue's checks of the pods it is handed (rpc/object_checks.py, rpc/value_checks.py) skip formatting
error paths for a pod that passes; a pod that fails still gets every error, naming the field. And the pod's
placement crosses the wire converted once per distinct placement (rpc/convert.py)."""

import json

import pytest
from builders import make_pod

from phalanx.intake.pods import parse_pod
from phalanx.model.limits import MAX_AMOUNT, MAX_KEY, MAX_VALUE
from phalanx.rpc import convert
from phalanx.rpc.validation import pod_rejection


def worker(i: int = 0):
    raw = make_pod(f"w{i}").cpu("1").toleration("gpu", "Exists", effect="NoSchedule").label("job", "train").build()
    return convert.pod_to_pb(parse_pod(raw))


def test_a_pod_within_every_bound_passes() -> None:
    assert pod_rejection(worker(), 0) == ""


@pytest.mark.parametrize(
    ("spoil", "named"),
    [
        (
            lambda p: setattr(p.placement.tolerations[0], "value", "v" * (MAX_KEY + 1)),
            "pods[4].placement.tolerations[0].value",
        ),
        (
            lambda p: setattr(p.placement.tolerations[0], "effect", "e" * (MAX_KEY + 1)),
            "pods[4].placement.tolerations[0].effect",
        ),
        (lambda p: p.labels.__setitem__("", "x"), "pods[4].labels: key ''"),
        (lambda p: p.labels.__setitem__("job", "x" * (MAX_VALUE + 1)), "pods[4].labels['job']"),
        (lambda p: p.annotations.__setitem__("k" * (MAX_KEY + 1), "x"), "pods[4].annotations: key"),
        (
            lambda p: p.placement.node_selector.__setitem__("zone", "z" * (MAX_VALUE + 1)),
            "pods[4].placement.node_selector['zone']",
        ),
        (lambda p: p.requests.__setitem__("cpu", -1), "pods[4].requests['cpu']: -1 is negative"),
        (lambda p: p.requests.__setitem__("nvidia.com/gpu", MAX_AMOUNT + 1), "pods[4].requests['nvidia.com/gpu']"),
        (lambda p: p.requests.__setitem__("", 1), "pods[4].requests: resource name ''"),
    ],
)
def test_a_pod_past_a_bound_is_refused_naming_the_field(spoil, named: str) -> None:
    pod = worker()
    spoil(pod)
    assert named in pod_rejection(pod, 4)


def test_a_placement_crosses_the_wire_converted_once() -> None:
    first = parse_pod(make_pod("a").toleration("gpu", "Exists").build())
    second = parse_pod(make_pod("b").toleration("gpu", "Exists").build())
    a, b = convert.pod_to_pb(first), convert.pod_to_pb(second)
    assert a.placement == b.placement
    back_a, back_b = convert.pod_from_pb(a), convert.pod_from_pb(b)
    assert back_a.placement is back_b.placement  # one object for pods that send equal placements
    assert back_a.placement == first.placement


def test_a_message_built_from_the_memo_does_not_change_it() -> None:
    pod = parse_pod(make_pod("a").toleration("gpu", "Exists").build())
    sent = convert.pod_to_pb(pod)
    sent.placement.tolerations[0].key = "changed"
    sent.placement.node_selector["zone"] = "a"
    again = convert.pod_to_pb(pod)
    assert [t.key for t in again.placement.tolerations] == ["gpu"] and not again.placement.node_selector
    received = convert.pod_from_pb(again)
    assert received.placement == pod.placement


def test_different_placements_are_told_apart() -> None:
    pods = [parse_pod(make_pod(f"p{i}").node_selector("zone", z).build()) for i, z in enumerate("abca")]
    back = [convert.pod_from_pb(convert.pod_to_pb(p)) for p in pods]
    assert [dict(p.placement.node_selector)["zone"] for p in back] == list("abca")
    assert back[0].placement is back[3].placement and back[0].placement is not back[1].placement


def test_the_pod_in_json_round_trips() -> None:
    raw = make_pod("w").cpu("2").toleration("a", "Equal", "b", "NoExecute").node_selector("k", "v").build()
    pod = parse_pod(json.loads(json.dumps(raw)))
    assert convert.pod_from_pb(convert.pod_to_pb(pod)) == pod
