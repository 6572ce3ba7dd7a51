"""Every refused gang declaration: the message names the object and the field."""

import pytest
from builders import make_configmap, make_pod, make_podgroup

from phalanx.intake.errors import IntakeError
from phalanx.intake.pods import parse_pod
from phalanx.intake.resolver import GangResolver
from phalanx.model import keys

SIGS = "scheduling.sigs.k8s.io/v1alpha1"


def annotation(key):
    return f"metadata.annotations[{key}]"


def koord(**extra):
    builder = make_pod("worker-0").annotation(keys.KOORD_NAME, "train").annotation(keys.KOORD_MIN_AVAILABLE, "2")
    for key, value in extra.items():
        builder.annotation(key, value)
    return builder


K = keys  # short alias for the table below


@pytest.mark.parametrize(
    ("builder", "field", "message"),
    [
        (koord(**{K.KOORD_MIN_AVAILABLE: "abc"}), annotation(K.KOORD_MIN_AVAILABLE), '"abc" is not a positive integer'),
        (koord(**{K.KOORD_MIN_AVAILABLE: "-1"}), annotation(K.KOORD_MIN_AVAILABLE), '"-1" is not a positive integer'),
        (koord(**{K.KOORD_MIN_AVAILABLE: "0"}), annotation(K.KOORD_MIN_AVAILABLE), '"0" is not a positive integer'),
        (koord(**{K.KOORD_MIN_AVAILABLE: "1.5"}), annotation(K.KOORD_MIN_AVAILABLE), '"1.5" is not a positive integer'),
        (koord(**{K.KOORD_MIN_AVAILABLE: ""}), annotation(K.KOORD_MIN_AVAILABLE), '"" is not a positive integer'),
        (make_pod("worker-0").annotation(K.KOORD_NAME, "train"), annotation(K.KOORD_MIN_AVAILABLE), "is required"),
        (koord(**{K.KOORD_TOTAL_NUMBER: "many"}), annotation(K.KOORD_TOTAL_NUMBER), '"many" is not a positive integer'),
        (koord(**{K.KOORD_TOTAL_NUMBER: "1"}), annotation(K.KOORD_TOTAL_NUMBER), "1 is below min-available 2"),
        (
            koord(**{K.KOORD_MODE: "strict"}),
            annotation(K.KOORD_MODE),
            '"strict" is not a gang mode (Strict or NonStrict)',
        ),
        (koord(**{K.KOORD_MODE: "Lenient"}), annotation(K.KOORD_MODE), '"Lenient" is not a gang mode'),
        (koord(**{K.KOORD_WAITING_TIME: "abc"}), annotation(K.KOORD_WAITING_TIME), '"abc" is not a duration'),
        (koord(**{K.KOORD_WAITING_TIME: "-5s"}), annotation(K.KOORD_WAITING_TIME), '"-5s" is negative'),
        (koord(**{K.KOORD_WAITING_TIME: "0s"}), annotation(K.KOORD_WAITING_TIME), '"0s" is not a positive duration'),
        (koord(**{K.KOORD_WAITING_TIME: "5d"}), annotation(K.KOORD_WAITING_TIME), '"5d" is not a duration'),
        (koord(**{K.KOORD_GROUPS: "ns-a/gang-a"}), annotation(K.KOORD_GROUPS), 'is not a list of "namespace/name"'),
        (koord(**{K.KOORD_GROUPS: '{"a": "b"}'}), annotation(K.KOORD_GROUPS), 'is not a list of "namespace/name"'),
        (koord(**{K.KOORD_GROUPS: "[1, 2]"}), annotation(K.KOORD_GROUPS), 'is not a list of "namespace/name"'),
        (koord(**{K.KOORD_GROUPS: '["ns-a/gang-a"'}), annotation(K.KOORD_GROUPS), 'is not a list of "namespace/name"'),
        (koord(**{K.KOORD_GROUPS: '["gang-a"]'}), annotation(K.KOORD_GROUPS), '"gang-a" is not "namespace/name"'),
        (koord(**{K.KOORD_GROUPS: '["ns/Gang_A"]'}), annotation(K.KOORD_GROUPS), '"ns/Gang_A" is not "namespace/name"'),
        (koord(**{K.KOORD_GROUPS: '["a/b/c"]'}), annotation(K.KOORD_GROUPS), '"a/b/c" is not "namespace/name"'),
        (koord(**{K.KOORD_GROUPS: '["a.b/c"]'}), annotation(K.KOORD_GROUPS), '"a.b/c" is not "namespace/name"'),
        (koord(**{K.KOORD_GROUPS: '["ns/"]'}), annotation(K.KOORD_GROUPS), '"ns/" is not "namespace/name"'),
        (koord(**{K.KOORD_MATCH_POLICY: "always"}), annotation(K.KOORD_MATCH_POLICY), '"always" is not a match policy'),
        (koord(**{K.KOORD_NAME: "Train_1"}), annotation(K.KOORD_NAME), '"Train_1" is not a valid gang name (RFC 1123'),
        (koord(**{K.KOORD_NAME: "-train"}), annotation(K.KOORD_NAME), "is not a valid gang name"),
        (koord(**{K.KOORD_NAME: "a" * 254}), annotation(K.KOORD_NAME), "is not a valid gang name"),
        (
            make_pod("worker-0").label(K.LABEL_X_K8S_PODGROUP, "Train"),
            f"metadata.labels[{K.LABEL_X_K8S_PODGROUP}]",
            '"Train" is not a valid gang name',
        ),
        (
            make_pod("worker-0").label(K.LIGHT_NAME, "train").label(K.LIGHT_MIN_AVAILABLE, "abc"),
            f"metadata.labels[{K.LIGHT_MIN_AVAILABLE}]",
            '"abc" is not a positive integer',
        ),
        (make_pod("worker-0").annotation(K.LIGHT_NAME, "train"), annotation(K.LIGHT_MIN_AVAILABLE), "is required"),
        (
            make_pod("worker-0").annotation(K.VOLCANO_GROUP_NAME, "qj").annotation(K.KUBE_BATCH_MIN_MEMBER, "x"),
            annotation(K.KUBE_BATCH_MIN_MEMBER),
            '"x" is not a positive integer',
        ),
        (
            make_pod("worker-0").annotation(K.VOLCANO_GROUP_NAME, "qj").annotation(K.DELAYED_BIND_POD_NUM, "0"),
            annotation(K.DELAYED_BIND_POD_NUM),
            '"0" is not a positive integer',
        ),
        (
            make_pod("worker-0")
            .annotation(K.VOLCANO_GROUP_NAME, "qj")
            .annotation(K.KUBE_BATCH_MIN_MEMBER, "4")
            .annotation(K.DELAYED_BIND_POD_NUM, "3"),
            annotation(K.DELAYED_BIND_POD_NUM),
            "3 is below min-available 4",
        ),
        # A pod linked to an object is checked at once, before the object exists.
        (
            make_pod("worker-0").label(K.LABEL_X_K8S_PODGROUP, "train").annotation(K.KOORD_MODE, "Fast"),
            annotation(K.KOORD_MODE),
            '"Fast" is not a gang mode',
        ),
        (
            make_pod("worker-0").label(K.CONFIGMAP_LABEL, "pg").annotation(K.KOORD_MIN_AVAILABLE, "none"),
            annotation(K.KOORD_MIN_AVAILABLE),
            '"none" is not a positive integer',
        ),
        # Gang sizes travel as protobuf int32: 2^31 used to be accepted, then overflow the field.
        (
            koord(**{K.KOORD_MIN_AVAILABLE: str(2**31)}),
            annotation(K.KOORD_MIN_AVAILABLE),
            '"2147483648" is too large (at most 2147483647)',
        ),
        (koord(**{K.KOORD_MIN_AVAILABLE: 2**31}), annotation(K.KOORD_MIN_AVAILABLE), "is too large"),
        (koord(**{K.KOORD_TOTAL_NUMBER: str(2**40)}), annotation(K.KOORD_TOTAL_NUMBER), "is too large"),
        (koord(**{K.KOORD_MIN_AVAILABLE: "9" * 5000}), annotation(K.KOORD_MIN_AVAILABLE), "not a positive integer"),
        (koord(**{K.KOORD_MIN_AVAILABLE: "\u0663"}), annotation(K.KOORD_MIN_AVAILABLE), "not a positive integer"),
        (
            make_pod("worker-0").annotation(K.VOLCANO_GROUP_NAME, "qj").annotation(K.KUBE_BATCH_MIN_MEMBER, str(2**31)),
            annotation(K.KUBE_BATCH_MIN_MEMBER),
            "is too large",
        ),
        (
            make_pod("worker-0").annotation(K.LIGHT_NAME, "train").annotation(K.LIGHT_MIN_AVAILABLE, str(2**31)),
            annotation(K.LIGHT_MIN_AVAILABLE),
            "is too large",
        ),
        (koord(**{K.KOORD_WAITING_TIME: "9" * 400 + "h"}), annotation(K.KOORD_WAITING_TIME), "too long"),
        (koord(**{K.KOORD_NAME: "a/b"}), annotation(K.KOORD_NAME), "is not a valid gang name"),
        (koord(**{K.KOORD_NAME: "train\n"}), annotation(K.KOORD_NAME), "is not a valid gang name"),
    ],
)
def test_invalid_pod_declaration_names_the_pod_and_field(builder, field, message):
    result = GangResolver().resolve(parse_pod(builder.build()))
    assert result.spec is None and result.waiting_for == ""
    assert result.gang_key.startswith("default/")
    assert result.error.startswith(f"Pod default/worker-0: {field}: ")
    assert message in result.error


def test_pod_override_inconsistent_with_its_podgroup_is_refused_naming_both():
    resolver = GangResolver()
    resolver.add_object(
        make_podgroup("train", api_version=SIGS).min_member(2).annotation(keys.KOORD_TOTAL_NUMBER, "5").build(),
        created_at=0,
    )
    pod = make_pod("worker-0").label(keys.LABEL_SIGS_PODGROUP, "train").annotation(keys.KOORD_MIN_AVAILABLE, "8")
    result = resolver.resolve(parse_pod(pod.build()))
    assert result.spec is None
    assert result.error == (
        f"Pod default/worker-0: {annotation(keys.KOORD_MIN_AVAILABLE)}: 8 is above total-number 5"
        " of PodGroup default/train"
    )
    assert resolver.gang("default/train").invalid == result.error


def test_pod_total_below_the_podgroups_minimum_names_the_pod():
    resolver = GangResolver()
    resolver.add_object(make_podgroup("train").min_member(4).build(), created_at=0)
    pod = make_pod("worker-0").label(keys.LABEL_X_K8S_PODGROUP, "train").annotation(keys.KOORD_TOTAL_NUMBER, "3")
    assert resolver.resolve(parse_pod(pod.build())).error == (
        f"Pod default/worker-0: {annotation(keys.KOORD_TOTAL_NUMBER)}: 3 is below min-available 4 of PodGroup "
        "default/train"
    )


@pytest.mark.parametrize(
    ("obj", "subject", "field", "message"),
    [
        (
            make_podgroup("train").min_member("abc"),
            "PodGroup default/train",
            "spec.minMember",
            '"abc" is not a positive integer',
        ),
        (
            make_podgroup("train").min_member(-1),
            "PodGroup default/train",
            "spec.minMember",
            '"-1" is not a positive integer',
        ),
        (make_podgroup("train").min_member(0), "PodGroup default/train", "spec.minMember", "not a positive integer"),
        (make_podgroup("train").min_member(True), "PodGroup default/train", "spec.minMember", "not a positive integer"),
        (make_podgroup("train"), "PodGroup default/train", "spec.minMember", "is required"),
        (
            make_podgroup("train").min_member(2).timeout("abc"),
            "PodGroup default/train",
            "spec.scheduleTimeoutSeconds",
            '"abc" is not a duration',
        ),
        (
            make_podgroup("train").min_member(2).timeout(-5),
            "PodGroup default/train",
            "spec.scheduleTimeoutSeconds",
            "-5",
        ),
        (
            make_podgroup("train").min_member(2).min_resource("cpu", "five"),
            "PodGroup default/train",
            "spec.minResources.cpu",
            "not a quantity",
        ),
        (
            make_podgroup("train", "ml", api_version=SIGS).min_member(4).annotation(keys.KOORD_TOTAL_NUMBER, "3"),
            "PodGroup ml/train",
            annotation(keys.KOORD_TOTAL_NUMBER),
            "3 is below min-available 4",
        ),
        (
            make_podgroup("train", api_version=SIGS).min_member(2).annotation(keys.KOORD_MODE, "Hard"),
            "PodGroup default/train",
            annotation(keys.KOORD_MODE),
            '"Hard" is not a gang mode',
        ),
        (
            make_podgroup("train", api_version=SIGS).min_member(2).annotation(keys.KOORD_GROUPS, "[a]"),
            "PodGroup default/train",
            annotation(keys.KOORD_GROUPS),
            '"a" is not "namespace/name"',
        ),
        (
            make_podgroup("train", api_version="v1alpha1").min_member(2),
            "PodGroup default/train",
            "apiVersion",
            '"v1alpha1" is not a PodGroup API we read',
        ),
        (make_podgroup("Train").min_member(2), "PodGroup default/Train", "metadata.name", "is not a valid gang name"),
        (make_configmap("pg"), "ConfigMap default/pg", "data.minAvailable", "is required"),
        (
            make_configmap("pg").data("minAvailable", "abc"),
            "ConfigMap default/pg",
            "data.minAvailable",
            '"abc" is not a positive integer',
        ),
        (
            make_configmap("pg").data("minAvailable", "5").data("scheduleTimeoutSeconds", "soon"),
            "ConfigMap default/pg",
            "data.scheduleTimeoutSeconds",
            '"soon" is not a duration',
        ),
        (make_configmap("pg").set("data", ["minAvailable"]), "ConfigMap default/pg", "data", "expected a mapping"),
        (
            make_podgroup("train").min_member(2**31),
            "PodGroup default/train",
            "spec.minMember",
            '"2147483648" is too large (at most 2147483647)',
        ),
        (
            make_podgroup("train").min_member(10**5000),
            "PodGroup default/train",
            "spec.minMember",
            "a 16610-bit integer is too large",
        ),
        (
            make_configmap("pg").data("minAvailable", str(2**31)),
            "ConfigMap default/pg",
            "data.minAvailable",
            "is too large",
        ),
        (
            make_podgroup("train").min_member(2).timeout(float("inf")),
            "PodGroup default/train",
            "spec.scheduleTimeoutSeconds",
            "not a non-negative duration",
        ),
        (
            make_podgroup("train").min_member(2).timeout("9" * 400),
            "PodGroup default/train",
            "spec.scheduleTimeoutSeconds",
            "too long",
        ),
        (
            make_podgroup("train").min_member(2).min_resource("cpu", "1e999999"),
            "PodGroup default/train",
            "spec.minResources.cpu",
            "too large",
        ),
        (
            make_podgroup("train", "team/a").min_member(2),
            "PodGroup team/a/train",
            "metadata.namespace",
            "DNS-1123 label",
        ),
        (
            make_configmap("a/b").data("minAvailable", "2"),
            "ConfigMap default/a/b",
            "metadata.name",
            "is not a valid gang name",
        ),
    ],
)
def test_invalid_object_names_the_object_and_field(obj, subject, field, message):
    with pytest.raises(IntakeError) as caught:
        GangResolver().add_object(obj.build(), created_at=0)
    assert str(caught.value).startswith(f"{subject}: {field}: ")
    assert message in caught.value.message


def test_objects_that_declare_no_gang_are_refused():
    resolver = GangResolver()
    with pytest.raises(IntakeError, match=r'Deployment default/web: kind: "Deployment"'):
        resolver.add_object({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}, created_at=0)
    with pytest.raises(IntakeError, match="metadata.name: is required"):
        resolver.add_object({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}, created_at=0)


@pytest.mark.parametrize(
    ("obj", "pod"),
    [
        (make_podgroup("train").min_member("abc"), make_pod("w0").label(keys.LABEL_X_K8S_PODGROUP, "train")),
        (make_configmap("train"), make_pod("w0").label(keys.CONFIGMAP_LABEL, "train")),
    ],
)
def test_pods_of_an_invalid_object_are_refused_with_its_reason(obj, pod):
    resolver = GangResolver()
    with pytest.raises(IntakeError) as caught:
        resolver.add_object(obj.build(), created_at=3.0)
    result = resolver.resolve(parse_pod(pod.build()))
    assert (result.gang_key, result.spec, result.waiting_for) == ("default/train", None, "")
    assert result.error == str(caught.value)
    gang = resolver.gang("default/train")
    assert gang.invalid == str(caught.value) and gang.created_at == 3.0


def test_fixing_an_invalid_object_makes_its_pods_schedulable():
    resolver = GangResolver()
    with pytest.raises(IntakeError):
        resolver.add_object(make_podgroup("train").min_member(0).build(), created_at=0)
    resolver.add_object(make_podgroup("train").min_member(2).build(), created_at=0)
    result = resolver.resolve(parse_pod(make_pod("w0").label(keys.LABEL_X_K8S_PODGROUP, "train").build()))
    assert result.error == "" and result.spec.min_available == 2
