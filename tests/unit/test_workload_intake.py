"""Kubernetes' own gang API (KEP-4671, the Workload API; scheduling.k8s.io/v1alpha2, alpha in 1.36) as a
declaration form: a pod names a PodGroup in spec.schedulingGroup.podGroupName, and that PodGroup's
spec.schedulingPolicy is either `gang` {minCount} (a gang) or `basic` (no gang)."""

from dataclasses import asdict
from typing import Any

import pytest
from builders import make_pod, make_podgroup

from phalanx.cluster.gang_intake import GangIntake
from phalanx.cluster.sources import collections
from phalanx.intake.errors import IntakeError
from phalanx.intake.gang_objects import object_ref
from phalanx.intake.pods import parse_pod
from phalanx.intake.resolver import GangResolver, Resolution
from phalanx.kube import podgroups
from phalanx.model import keys
from phalanx.model.objects import GangMode, GangSpec, PodInfo
from phalanx.state.codec import pod_from_json, pod_to_json

K8S = "scheduling.k8s.io/v1alpha2"
SOURCE = "podgroup/scheduling.k8s.io"
T0 = "2024-05-01T12:00:00Z"  # 1714564800
EPOCH = 1714564800


def member(name: str = "w0", group: str = "train-workers", namespace: str = "default") -> Any:
    return make_pod(name, namespace).created(T0).set("spec.schedulingGroup", {"podGroupName": group})


def podgroup(name: str = "train-workers", namespace: str = "default", **policy: Any) -> Any:
    """A PodGroup as the API server returns it: made from a Workload's template, defaulted."""
    return (
        make_podgroup(name, namespace, api_version=K8S)
        .created("2024-05-01T12:00:05Z")
        .set(
            "spec",
            {
                "podGroupTemplateRef": {"workload": {"workloadName": "train", "podGroupTemplateName": "workers"}},
                "schedulingPolicy": policy if policy else {"gang": {"minCount": 3}},
                "disruptionMode": "Pod",
            },
        )
        .set("status", {})
    )


def add(resolver: GangResolver, builder: Any) -> str:
    return resolver.add_object(builder.build(), created_at=5.0)


def resolve(resolver: GangResolver, builder: Any) -> Resolution:
    return resolver.resolve(parse_pod(builder.build(), epoch=EPOCH))


def refusal(builder: Any) -> str:
    """The text a malformed PodGroup is refused with (the same text its pods get)."""
    with pytest.raises(IntakeError) as caught:
        GangResolver().add_object(builder.build(), created_at=0.0)
    return str(caught.value)


# --- the pod's link -----------------------------------------------------------------------------------------


def test_the_pod_field_is_read():
    assert parse_pod(member().build()).scheduling_group == "train-workers"
    assert parse_pod(make_pod("p").build()).scheduling_group == ""


def test_the_pod_field_in_snake_case_as_the_client_models_write_it():
    pod = make_pod("p").set("spec.scheduling_group", {"pod_group_name": "g"}).build()
    assert parse_pod(pod).scheduling_group == "g"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("train", "Pod default/p: spec.schedulingGroup: expected a mapping, got str"),
        ({}, "Pod default/p: spec.schedulingGroup.podGroupName: is required when spec.schedulingGroup is set"),
        ({"podGroupName": ""}, "Pod default/p: spec.schedulingGroup.podGroupName: is required when spec.schedulingGroup is set"),
        ({"podGroupName": 7}, "Pod default/p: spec.schedulingGroup.podGroupName: expected a string, got 7"),
    ],
)  # fmt: skip
def test_a_malformed_pod_field_is_refused_by_name(value, message):
    with pytest.raises(IntakeError) as caught:
        parse_pod(make_pod("p").set("spec.schedulingGroup", value).build())
    assert str(caught.value) == message


def test_a_podgroup_name_that_is_no_object_name_is_refused_on_the_pod():
    result = resolve(GangResolver(), member(group="Train_Workers"))
    assert result == Resolution(
        "default/Train_Workers",
        None,
        "",
        'Pod default/w0: spec.schedulingGroup.podGroupName: "Train_Workers" is not a valid gang name (RFC 1123 subdomain)',
    )


# --- the gang --------------------------------------------------------------------------------------------------


def test_the_pod_waits_for_its_podgroup_then_joins_its_gang():
    resolver = GangResolver()
    assert resolve(resolver, member()) == Resolution(
        "default/train-workers", None, "PodGroup default/train-workers (scheduling.k8s.io) does not exist yet", ""
    )
    assert add(resolver, podgroup()) == "default/train-workers"
    assert resolve(resolver, member()) == Resolution(
        "default/train-workers",
        GangSpec(
            namespace="default",
            name="train-workers",
            min_available=3,
            total_number=3,  # the form has no total: the minimum
            mode=GangMode.STRICT,
            wait_seconds=None,  # nor a timeout: the scheduler's default
            created_at=5.0,
            source=SOURCE,
        ),
        "",
        "",
    )


def test_every_member_joins_the_same_gang_in_its_namespace():
    resolver = GangResolver()
    add(resolver, podgroup())
    add(resolver, podgroup(namespace="other", gang={"minCount": 2}))
    keys_ = {resolve(resolver, member(f"w{i}")).gang_key for i in range(3)}
    assert keys_ == {"default/train-workers"}
    other = resolve(resolver, member("w0", namespace="other"))
    assert other.spec is not None and (other.gang_key, other.spec.min_available) == ("other/train-workers", 2)


def test_a_basic_podgroup_declares_no_gang():
    """kube-scheduler schedules the pods of a basic PodGroup one by one; they still wait for it to exist."""
    resolver = GangResolver()
    assert resolve(resolver, member()).waiting_for
    assert add(resolver, podgroup(basic={})) == "default/train-workers"
    assert resolve(resolver, member()) == Resolution("", None, "", "")
    assert resolver.gang("default/train-workers") is None
    assert not resolver.has_object("default/train-workers")


def test_a_basic_podgroup_parked_pods_are_released_as_ordinary_pods():
    intake = GangIntake(retry_refused=True)
    pod = parse_pod(member().build())
    assert intake.resolve("default/w0", pod).waiting_for
    assert intake.parked("default/train-workers") == ["default/w0"]
    intake.add_object(podgroup(basic={}).build(), created_at=0.0)
    assert intake.resolve("default/w0", pod, parked_under="default/train-workers") == Resolution("", None, "", "")
    assert intake.parked("default/train-workers") == []


def test_the_podgroups_annotations_set_what_the_form_lacks():
    resolver = GangResolver()
    add(resolver, podgroup().annotation(keys.KOORD_TOTAL_NUMBER, "4").annotation(keys.KOORD_MODE, "NonStrict"))
    spec = resolve(resolver, member()).spec
    assert spec is not None and (spec.min_available, spec.total_number, spec.mode) == (3, 4, GangMode.NON_STRICT)


def test_the_pods_own_annotations_override_as_for_every_form():
    resolver = GangResolver()
    add(resolver, podgroup())
    spec = resolve(resolver, member().annotation(keys.KOORD_WAITING_TIME, "90s")).spec
    assert spec is not None and spec.wait_seconds == 90.0


def test_deleting_the_podgroup_sends_its_pods_back_to_waiting():
    resolver = GangResolver()
    add(resolver, podgroup())
    assert resolve(resolver, member()).spec is not None
    assert resolver.remove_object("PodGroup.scheduling.k8s.io", "default", "train-workers") == "default/train-workers"
    assert resolve(resolver, member()).waiting_for.endswith("does not exist yet")


def test_another_groups_podgroup_of_the_same_name_does_not_satisfy_the_link():
    resolver = GangResolver()
    add(resolver, make_podgroup("train-workers").min_member(2))  # scheduling.x-k8s.io
    assert resolve(resolver, member()).waiting_for == (
        "PodGroup default/train-workers (scheduling.k8s.io) does not exist yet"
    )


def test_an_older_link_on_the_same_pod_wins():
    """The newest form comes last: a pod that carried a PodGroup label keeps the gang it always had."""
    resolver = GangResolver()
    add(resolver, make_podgroup("legacy").min_member(2))
    add(resolver, podgroup())
    result = resolve(resolver, member().label(keys.LABEL_X_K8S_PODGROUP, "legacy"))
    assert result.spec is not None and (result.gang_key, result.spec.source) == (
        "default/legacy",
        "podgroup/scheduling.x-k8s.io",
    )


# --- malformed PodGroups ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"gang": {"minCount": 0}}, 'spec.schedulingPolicy.gang.minCount: "0" is not a positive integer'),
        ({"gang": {"minCount": -2}}, 'spec.schedulingPolicy.gang.minCount: "-2" is not a positive integer'),
        ({"gang": {"minCount": "three"}}, 'spec.schedulingPolicy.gang.minCount: "three" is not a positive integer'),
        ({"gang": {"minCount": 2**31}}, 'spec.schedulingPolicy.gang.minCount: "2147483648" is too large (at most 2147483647)'),
        ({"gang": {}}, "spec.schedulingPolicy.gang.minCount: is required"),
        ({"gang": 3}, "spec.schedulingPolicy.gang: expected a mapping, got int"),
        ({"basic": "yes"}, "spec.schedulingPolicy.basic: expected a mapping, got str"),
        ({"gang": {"minCount": 2}, "basic": {}}, "spec.schedulingPolicy: sets both basic and gang; exactly one is allowed"),
        ({"other": {}}, "spec.schedulingPolicy: is required: exactly one of basic and gang"),
    ],
)  # fmt: skip
def test_a_malformed_policy_is_refused_naming_the_podgroup_and_the_field(policy, message):
    assert refusal(podgroup(**policy)) == f"PodGroup default/train-workers: {message}"


def test_a_podgroup_without_a_policy_or_spec_is_refused():
    assert refusal(podgroup().set("spec", {})) == (
        "PodGroup default/train-workers: spec.schedulingPolicy: is required: exactly one of basic and gang"
    )
    assert refusal(podgroup().set("spec", None)) == (
        "PodGroup default/train-workers: spec.schedulingPolicy: is required: exactly one of basic and gang"
    )
    assert refusal(podgroup().set("spec", {"schedulingPolicy": ["gang"]})) == (
        "PodGroup default/train-workers: spec.schedulingPolicy: expected a mapping, got list"
    )


def test_a_bad_annotation_on_the_podgroup_is_refused_by_name():
    assert refusal(podgroup().annotation(keys.KOORD_TOTAL_NUMBER, "2")) == (
        f"PodGroup default/train-workers: metadata.annotations[{keys.KOORD_TOTAL_NUMBER}]: 2 is below min-available 3"
    )


def test_the_pods_of_a_malformed_podgroup_are_refused_with_its_text_and_other_gangs_go_on():
    resolver = GangResolver()
    with pytest.raises(IntakeError):
        add(resolver, podgroup("broken", gang={"minCount": 0}))
    add(resolver, podgroup())
    assert resolve(resolver, member(group="broken")) == Resolution(
        "default/broken",
        None,
        "",
        'PodGroup default/broken: spec.schedulingPolicy.gang.minCount: "0" is not a positive integer',
    )
    assert resolve(resolver, member()).spec is not None
    # Fixed in place (a new version of the object): its pods resolve.
    add(resolver, podgroup("broken", gang={"minCount": 1}))
    fixed = resolve(resolver, member(group="broken"))
    assert fixed.spec is not None and fixed.spec.min_available == 1


def test_only_the_known_version_is_read():
    old = make_podgroup("g", api_version="scheduling.k8s.io/v1alpha1").build()
    assert not GangResolver.is_gang_object(old)
    assert GangResolver.is_gang_object(podgroup().build())
    with pytest.raises(IntakeError) as caught:
        object_ref(old)
    assert "scheduling.k8s.io/v1alpha2" in str(caught.value)


# --- watching and reporting ---------------------------------------------------------------------------------------


def test_the_feed_watches_the_workload_apis_podgroups():
    watched = {c.name: (c.kind, c.api_version, c.args) for c in collections(None)}
    assert watched["podgroups.scheduling.k8s.io"] == ("PodGroup", K8S, ("scheduling.k8s.io", "v1alpha2", "podgroups"))


def test_no_status_is_written_to_the_workload_apis_podgroups():
    """Its status is kube-scheduler's PodGroupScheduled condition: not the counters the CRDs get."""
    assert podgroups.group_of(SOURCE) is None
    assert podgroups.group_of("podgroup/scheduling.x-k8s.io") == "scheduling.x-k8s.io"


def test_the_field_is_kept_in_the_stored_pod():
    pod = parse_pod(member().build())
    assert pod_to_json(pod) == {**asdict(pod), "pod_affinity": None}
    assert pod_from_json(pod_to_json(pod)) == pod
    assert pod_from_json({k: v for k, v in pod_to_json(PodInfo("ns", "p")).items() if k != "scheduling_group"}) == (
        PodInfo("ns", "p")
    )
