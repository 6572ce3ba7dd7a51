"""A pod's inter-pod affinity and spread across the gRPC hops: every field survives, and a request whose
spec intake could not have made is refused naming the field."""

from __future__ import annotations

import pytest

from phalanx.model.objects import PodInfo
from phalanx.model.pod_affinity import (
    LabelRequirement,
    LabelSelector,
    PodAffinitySpec,
    PodAffinityTerm,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
)
from phalanx.rpc import validation
from phalanx.rpc.convert import pod_from_pb, pod_to_pb

SPEC = PodAffinitySpec(
    required_affinity=(PodAffinityTerm("zone", LabelSelector((("app", "db"),)), ("data",)),),
    preferred_affinity=(WeightedPodAffinityTerm(40, PodAffinityTerm("host", LabelSelector(), (), LabelSelector())),),
    required_anti_affinity=(
        PodAffinityTerm("host", LabelSelector((), (LabelRequirement("job", "In", ("a", "b")),))),
        PodAffinityTerm("host"),  # no selector: matches nothing, and must not come back as "matches all"
    ),
    preferred_anti_affinity=(WeightedPodAffinityTerm(1, PodAffinityTerm("rack", LabelSelector((("x", "y"),)))),),
    spread=(
        TopologySpreadConstraint(2, "zone", "DoNotSchedule", LabelSelector((("job", "a"),)), 3, ("rev",), "Ignore"),
        TopologySpreadConstraint(1, "host", "ScheduleAnyway"),
    ),
)


def test_every_field_survives_the_wire() -> None:
    pod = PodInfo("ns", "p", labels={"job": "a"}, pod_affinity=SPEC)
    back = pod_from_pb(pod_to_pb(pod))
    assert back.pod_affinity == SPEC and back.labels == {"job": "a"}
    assert pod_from_pb(pod_to_pb(PodInfo("ns", "q"))).pod_affinity is None


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda m: setattr(m.spread[0], "max_skew", 0), "pods[0].pod_affinity.spread[0].max_skew: 0 is below 1"),
        (
            lambda m: setattr(m.spread[1], "when_unsatisfiable", "Sometimes"),
            "pods[0].pod_affinity.spread[1].when_unsatisfiable: 'Sometimes' is not DoNotSchedule or ScheduleAnyway",
        ),
        (
            lambda m: setattr(m.preferred_affinity[0], "weight", 101),
            "pods[0].pod_affinity.preferred_affinity[0].weight: 101 is not from 1 to 100",
        ),
        (
            lambda m: setattr(m.required_anti_affinity[0].label_selector.match_expressions[0], "operator", "Gt"),
            "pods[0].pod_affinity.required_anti_affinity[0].label_selector.match_expressions[0].operator: 'Gt' is not",
        ),
        (
            lambda m: setattr(m.required_affinity[0], "topology_key", ""),
            "pods[0].pod_affinity.required_affinity[0].topology_key: must have 1 to",
        ),
    ],
)
def test_a_spec_intake_could_not_have_made_is_refused_naming_the_field(change, error) -> None:  # type: ignore[no-untyped-def]
    m = pod_to_pb(PodInfo("ns", "p", pod_affinity=SPEC))
    assert validation.pod_rejection(m, 0) == ""
    change(m.pod_affinity)
    assert error in validation.pod_rejection(m, 0)
