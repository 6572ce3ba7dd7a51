"""Fast paths on every pending pod's intake keep the results they replaced: a pod's copy is the same pod, and a
declaration layer that says nothing changes nothing."""

from __future__ import annotations

from dataclasses import MISSING, Field, fields, replace

import pytest

from phalanx.intake.errors import IntakeError, Subject
from phalanx.intake.gang_params import POD_OVERRIDE_KEYS, koordinator_params
from phalanx.intake.gang_shapes import NOTHING_SAID, Declared, GangParams
from phalanx.model import keys
from phalanx.model.objects import Placement, PodInfo
from phalanx.model.pod_affinity import PodAffinitySpec


def a_pod_with_every_field_set() -> PodInfo:
    return PodInfo(
        namespace="ns",
        name="w0",
        uid="u",
        priority=7,
        created_at=1.5,
        requests={"cpu": 100},
        placement=Placement(node_selector=(("zone", "a"),)),
        gang="ns/g",
        gang_created_at=2.5,
        node_name="n1",
        annotations={"a": "1"},
        labels={"l": "2"},
        duration=3.0,
        invalid="why",
        pod_affinity=PodAffinitySpec(),
        preemption_policy="Never",
        scheduling_group="pg",
    )


def _default(f: Field[object]) -> object:
    return f.default_factory() if f.default_factory is not MISSING else f.default


def test_a_pods_copy_is_replaces_copy() -> None:
    pod = a_pod_with_every_field_set()
    assert all(getattr(pod, f.name) != _default(f) for f in fields(PodInfo))  # every field is under test
    copy = pod.copy()
    assert copy == pod == replace(pod) and copy is not pod
    copy.gang = "ns/other"  # the intake resolves the copy: the parsed pod stays as it was
    assert pod.gang == "ns/g"
    assert copy.annotations is pod.annotations  # shallow, as replace's


def test_a_pod_that_overrides_nothing_gets_the_one_empty_layer_which_changes_nothing() -> None:
    subject = Subject("Pod", "ns", "w0")
    params = GangParams(min_available=Declared(3, subject, "spec.minMember"))
    said = koordinator_params({"unrelated": "x"}, subject, POD_OVERRIDE_KEYS)
    assert said is NOTHING_SAID and said == GangParams()
    assert params.overridden_by(said) is params
    mode = koordinator_params({keys.KOORD_MODE: "NonStrict"}, subject, POD_OVERRIDE_KEYS)
    assert mode is not NOTHING_SAID and params.overridden_by(mode).mode == mode.mode
    with pytest.raises(IntakeError, match="gang.scheduling.koordinator.sh/mode"):
        koordinator_params({keys.KOORD_MODE: "Sometimes"}, subject, POD_OVERRIDE_KEYS)
