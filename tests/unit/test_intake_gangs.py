"""Every gang declaration form, the precedence between forms and parameters, and the defaults."""

import pytest
import yaml
from builders import make_configmap, make_pod, make_podgroup

from phalanx.intake.errors import IntakeError
from phalanx.intake.pods import parse_pod
from phalanx.intake.resolver import GangResolver, Resolution
from phalanx.model import keys
from phalanx.model.objects import GangMode, GangSpec

X_K8S = "scheduling.x-k8s.io/v1alpha1"
SIGS = "scheduling.sigs.k8s.io/v1alpha1"
VOLCANO = "scheduling.volcano.sh/v1beta1"
T0 = "2024-05-01T12:00:00Z"  # 1714564800


def koord(name="w0", gang="train", minimum=2, namespace="default"):
    return (
        make_pod(name, namespace)
        .created(T0)
        .annotation(keys.KOORD_NAME, gang)
        .annotation(keys.KOORD_MIN_AVAILABLE, str(minimum))
    )


def resolve(builder, resolver=None):
    return (resolver or GangResolver()).resolve(parse_pod(builder.build(), epoch=1714564800))


# --- Koordinator annotation way -----------------------------------------------------------------------


def test_koordinator_annotations_with_every_parameter():
    builder = (
        koord(minimum=5)
        .annotation(keys.KOORD_WAITING_TIME, "3600s")
        .annotation(keys.KOORD_TOTAL_NUMBER, "6")
        .annotation(keys.KOORD_MODE, "NonStrict")
        .annotation(keys.KOORD_MATCH_POLICY, "waiting-and-running")
        .annotation(keys.KOORD_GROUPS, '["default/train","ns-b/eval"]')
    )
    assert resolve(builder) == Resolution(
        "default/train",
        GangSpec(
            namespace="default",
            name="train",
            min_available=5,
            total_number=6,
            mode=GangMode.NON_STRICT,
            groups=("default/train", "ns-b/eval"),
            wait_seconds=3600.0,
            created_at=0.0,
            source="koordinator-annotations",
            match_policy="waiting-and-running",
        ),
        "",
        "",
    )


@pytest.mark.parametrize("default_wait", [None, 42.0])
def test_koordinator_defaults(default_wait):
    spec = GangResolver(default_wait_seconds=default_wait).resolve(parse_pod(koord(minimum=3).build())).spec
    assert (spec.min_available, spec.total_number, spec.mode, spec.groups, spec.wait_seconds, spec.match_policy) == (
        3,
        3,
        GangMode.STRICT,
        (),
        default_wait,
        "once-satisfied",
    )
    assert spec.group_keys == ("default/train",)


def test_koordinator_documentation_example_as_written_in_yaml():
    # Unquoted numbers and an unquoted list, exactly as the Koordinator docs show them.
    metadata = yaml.safe_load("""
name: pod-a
namespace: namespaceA
annotations:
  gang.scheduling.koordinator.sh/name: gang-a
  gang.scheduling.koordinator.sh/waiting-time: 3600s
  gang.scheduling.koordinator.sh/min-available: 5
  gang.scheduling.koordinator.sh/total-number: 5
  gang.scheduling.koordinator.sh/mode: Strict
  gang.scheduling.koordinator.sh/groups: ["namespaceA/gang-a", "namespaceB/gang-b"]
""")
    # Upper-case namespaces are not RFC 1123: the example itself is refused, first for the pod's own namespace.
    with pytest.raises(IntakeError) as exc:
        parse_pod({"metadata": metadata, "spec": {"containers": []}})
    assert str(exc.value).startswith("Pod namespaceA/pod-a: metadata.namespace: ")
    metadata["namespace"] = "namespace-a"
    result = GangResolver().resolve(parse_pod({"metadata": metadata, "spec": {"containers": []}}))
    assert result.error.startswith(f"Pod namespace-a/pod-a: metadata.annotations[{keys.KOORD_GROUPS}]: ")
    metadata["annotations"][keys.KOORD_GROUPS] = ["namespace-a/gang-a", "namespace-b/gang-b"]
    spec = GangResolver().resolve(parse_pod({"metadata": metadata})).spec
    assert (spec.key, spec.min_available, spec.total_number, spec.wait_seconds, spec.groups) == (
        "namespace-a/gang-a",
        5,
        5,
        3600.0,
        ("namespace-a/gang-a", "namespace-b/gang-b"),
    )


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        ('["ns-a/gang-a","ns-b/gang-b"]', ("ns-a/gang-a", "ns-b/gang-b")),
        ('[ "ns-a/gang-a" , "ns-b/gang-b" ]', ("ns-a/gang-a", "ns-b/gang-b")),
        ("[ns-a/gang-a, ns-b/gang-b]", ("ns-a/gang-a", "ns-b/gang-b")),
        ("['ns-a/gang-a', 'ns-b/gang-b']", ("ns-a/gang-a", "ns-b/gang-b")),
        ('["ns-a/gang-a","ns-a/gang-a"]', ("ns-a/gang-a",)),
        ('["ns-a/a.b-c"]', ("ns-a/a.b-c",)),
        ("", ()),
        ("   ", ()),
        ("[]", ()),
    ],
)
def test_groups_forms(groups, expected):
    assert resolve(koord().annotation(keys.KOORD_GROUPS, groups)).spec.groups == expected


def test_self_contained_gang_key_is_in_the_pods_namespace():
    resolver = GangResolver()
    a = resolver.resolve(parse_pod(koord(namespace="ns-a").build()))
    b = resolver.resolve(parse_pod(koord(namespace="ns-b").build()))
    assert (a.gang_key, b.gang_key) == ("ns-a/train", "ns-b/train")
    assert resolver.gang("ns-a/train").namespace == "ns-a"


def test_self_contained_gang_created_at_is_the_first_pod_seen():
    resolver = GangResolver()
    first = resolver.resolve(parse_pod(koord("w0").created("2024-05-01T12:00:10Z").build(), epoch=1714564800))
    second = resolver.resolve(parse_pod(koord("w1").created("2024-05-01T12:00:05Z").build(), epoch=1714564800))
    assert first.spec.created_at == second.spec.created_at == 10.0
    assert resolver.gang("default/train").created_at == 10.0


def test_the_first_valid_pod_defines_the_gang():
    resolver = GangResolver()
    resolver.resolve(parse_pod(koord("w0", minimum=2).build()))
    later = resolver.resolve(parse_pod(koord("w1", minimum=4).annotation(keys.KOORD_MODE, "NonStrict").build()))
    assert (later.spec.min_available, later.spec.mode) == (2, GangMode.STRICT)


def test_an_invalid_pod_does_not_define_the_gang():
    resolver = GangResolver()
    bad = resolver.resolve(parse_pod(koord("w0").annotation(keys.KOORD_MIN_AVAILABLE, "abc").build()))
    good = resolver.resolve(parse_pod(koord("w1", minimum=3).created("2024-05-01T12:00:07Z").build(), epoch=1714564800))
    assert bad.error and bad.spec is None
    assert (good.spec.min_available, good.spec.created_at) == (3, 7.0)


def test_a_pod_without_a_gang():
    pod = make_pod("w0").label("app", "web").annotation(keys.KOORD_MIN_AVAILABLE, "3")
    assert resolve(pod) == Resolution("", None, "", "")


@pytest.mark.parametrize("key", [keys.KOORD_NAME, keys.LIGHT_NAME, keys.VOLCANO_GROUP_NAME])
def test_an_empty_link_value_is_no_link(key):
    assert resolve(make_pod("w0").annotation(key, "")).gang_key == ""


# --- PodGroups ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "api_version", "group"),
    [
        (keys.LABEL_X_K8S_PODGROUP, X_K8S, "scheduling.x-k8s.io"),
        (keys.LABEL_SIGS_PODGROUP, SIGS, "scheduling.sigs.k8s.io"),
    ],
)
def test_podgroup_label_waits_for_its_podgroup_then_reads_it(label, api_version, group):
    resolver = GangResolver(default_wait_seconds=60)
    pod = parse_pod(make_pod("w0").label(label, "train").build())
    assert resolver.resolve(pod) == Resolution(
        "default/train", None, f"PodGroup default/train ({group}) does not exist yet", ""
    )
    podgroup = (
        make_podgroup("train", api_version=api_version)
        .min_member(4)
        .min_resource("cpu", "5")
        .min_resource("memory", "2048Mi")
        .timeout(600)
        .build()
    )
    assert resolver.add_object(podgroup, created_at=12.5) == "default/train"
    assert resolver.resolve(pod) == Resolution(
        "default/train",
        GangSpec(
            namespace="default",
            name="train",
            min_available=4,
            total_number=4,
            wait_seconds=600.0,
            min_resources={"cpu": 5000, "memory": 2048 * 2**20 * 1000},
            created_at=12.5,
            source=f"podgroup/{group}",
        ),
        "",
        "",
    )


def test_a_podgroup_of_another_api_group_does_not_satisfy_the_link():
    resolver = GangResolver()
    resolver.add_object(make_podgroup("train", api_version=SIGS).min_member(2).build(), created_at=0)
    result = resolver.resolve(parse_pod(make_pod("w0").label(keys.LABEL_X_K8S_PODGROUP, "train").build()))
    assert result.waiting_for == "PodGroup default/train (scheduling.x-k8s.io) does not exist yet"


def test_podgroup_in_another_namespace_does_not_satisfy_the_link():
    resolver = GangResolver()
    resolver.add_object(make_podgroup("train", "other").min_member(2).build(), created_at=0)
    result = resolver.resolve(parse_pod(make_pod("w0").label(keys.LABEL_X_K8S_PODGROUP, "train").build()))
    assert result.waiting_for and result.spec is None


def test_koordinator_podgroup_annotations_as_in_its_documentation():
    podgroup = yaml.safe_load("""
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: PodGroup
metadata:
  creationTimestamp: "2022-07-11T18:26:33Z"
  name: gang-a
  namespace: namespace-a
  annotations:
    gang.scheduling.koordinator.sh/total-number: 6
    gang.scheduling.koordinator.sh/mode: NonStrict
    gang.scheduling.koordinator.sh/groups: ["namespace-a/gang-a", "namespace-b/gang-b"]
spec:
  minMember: 5
  minResources:
    cpu: "5"
    memory: "2048Mi"
  scheduleTimeoutSeconds: 600
""")
    resolver = GangResolver()
    resolver.add_object(podgroup, created_at=3.0)
    pod = make_pod("a-0", "namespace-a").label(keys.LABEL_SIGS_PODGROUP, "gang-a")
    spec = resolver.resolve(parse_pod(pod.build())).spec
    assert (spec.min_available, spec.total_number, spec.mode, spec.groups, spec.wait_seconds, spec.created_at) == (
        5,
        6,
        GangMode.NON_STRICT,
        ("namespace-a/gang-a", "namespace-b/gang-b"),
        600.0,
        3.0,
    )
    assert spec.source == "podgroup/scheduling.sigs.k8s.io"


def test_pod_annotations_override_the_podgroup():
    resolver = GangResolver(default_wait_seconds=5)
    resolver.add_object(
        make_podgroup("train", api_version=SIGS)
        .min_member(4)
        .timeout(600)
        .annotation(keys.KOORD_TOTAL_NUMBER, "8")
        .annotation(keys.KOORD_MODE, "Strict")
        .annotation(keys.KOORD_GROUPS, '["default/train","default/other"]')
        .build(),
        created_at=1.0,
    )
    pod = (
        make_pod("w0")
        .label(keys.LABEL_SIGS_PODGROUP, "train")
        .annotation(keys.KOORD_MIN_AVAILABLE, "6")
        .annotation(keys.KOORD_TOTAL_NUMBER, "10")
        .annotation(keys.KOORD_MODE, "NonStrict")
        .annotation(keys.KOORD_WAITING_TIME, "90s")
        .annotation(keys.KOORD_GROUPS, "")
    )
    spec = resolver.resolve(parse_pod(pod.build())).spec
    assert (spec.min_available, spec.total_number, spec.mode, spec.wait_seconds, spec.groups) == (
        6,
        10,
        GangMode.NON_STRICT,
        90.0,
        (),
    )
    assert (spec.source, spec.created_at) == ("podgroup/scheduling.sigs.k8s.io", 1.0)


def test_pod_overrides_apply_to_every_object_form():
    resolver = GangResolver()
    resolver.add_object(make_configmap("pg").data("minAvailable", "2").build(), created_at=0)
    pod = make_pod("w0").label(keys.CONFIGMAP_LABEL, "pg").annotation(keys.KOORD_MODE, "NonStrict")
    assert resolver.resolve(parse_pod(pod.build())).spec.mode == GangMode.NON_STRICT


@pytest.mark.parametrize(
    ("timeout", "waiting_time", "default", "expected"),
    [
        (600, "90s", 5.0, 90.0),  # the pod's waiting-time first
        (600, None, 5.0, 600.0),  # then the object's scheduleTimeoutSeconds
        (None, None, 5.0, 5.0),  # then the scheduler's default
        (None, None, None, None),
        (0, None, 5.0, 5.0),  # 0 means "not set", as in coscheduling
        ("120", None, None, 120.0),
    ],
)
def test_wait_precedence(timeout, waiting_time, default, expected):
    resolver = GangResolver(default_wait_seconds=default)
    podgroup = make_podgroup("train").min_member(2)
    if timeout is not None:
        podgroup.timeout(timeout)
    resolver.add_object(podgroup.build(), created_at=0)
    pod = make_pod("w0").label(keys.LABEL_X_K8S_PODGROUP, "train")
    if waiting_time is not None:
        pod.annotation(keys.KOORD_WAITING_TIME, waiting_time)
    assert resolver.resolve(parse_pod(pod.build())).spec.wait_seconds == expected


def test_volcano_group_name_waits_for_a_volcano_podgroup():
    resolver = GangResolver()
    pod = parse_pod(make_pod("w0").annotation(keys.VOLCANO_GROUP_NAME, "job-1").build())
    assert resolver.resolve(pod).waiting_for == "PodGroup default/job-1 (scheduling.volcano.sh) does not exist yet"
    podgroup = make_podgroup("job-1", api_version=VOLCANO).min_member(3).min_resource("nvidia.com/gpu", 3)
    podgroup.set("spec.queue", "default").set("spec.minTaskMember", {"worker": 3})
    resolver.add_object(podgroup.build(), created_at=9.0)
    spec = resolver.resolve(pod).spec
    assert (spec.min_available, spec.min_resources, spec.source, spec.created_at) == (
        3,
        {"nvidia.com/gpu": 3000},
        "podgroup/scheduling.volcano.sh",
        9.0,
    )


# --- self-contained community forms -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("builder", "minimum"),
    [
        (make_pod("w0").annotation(keys.LIGHT_NAME, "train").annotation(keys.LIGHT_MIN_AVAILABLE, "3"), 3),
        (make_pod("w0").label(keys.LIGHT_NAME, "train").label(keys.LIGHT_MIN_AVAILABLE, "4"), 4),
        (make_pod("w0").label(keys.LIGHT_NAME, "train").annotation(keys.LIGHT_MIN_AVAILABLE, "5"), 5),
        (
            make_pod("w0")
            .annotation(keys.LIGHT_NAME, "train")
            .annotation(keys.LIGHT_MIN_AVAILABLE, "2")
            .label(keys.LIGHT_MIN_AVAILABLE, "9"),
            2,
        ),
        # Koordinator's min-available overrides the lightweight one, and can stand in for it.
        (
            make_pod("w0")
            .label(keys.LIGHT_NAME, "train")
            .label(keys.LIGHT_MIN_AVAILABLE, "4")
            .annotation(keys.KOORD_MIN_AVAILABLE, "6"),
            6,
        ),
        (make_pod("w0").label(keys.LIGHT_NAME, "train").annotation(keys.KOORD_MIN_AVAILABLE, "7"), 7),
    ],
)
def test_lightweight_coscheduling_form(builder, minimum):
    result = resolve(builder, GangResolver(default_wait_seconds=30))
    assert result.gang_key == "default/train"
    assert (result.spec.min_available, result.spec.total_number, result.spec.wait_seconds) == (minimum, minimum, 30)
    assert result.spec.source == "lightweight-coscheduling"


@pytest.mark.parametrize(
    ("annotations", "minimum", "total", "source"),
    [
        ({keys.DELAYED_BIND_POD_NUM: "3"}, 3, 3, "delayed-binding-annotations"),
        ({keys.KUBE_BATCH_MIN_MEMBER: "2"}, 2, 2, "kube-batch-annotations"),
        ({keys.KUBE_BATCH_MIN_MEMBER: "2", keys.DELAYED_BIND_POD_NUM: "5"}, 2, 5, "kube-batch-annotations"),
        ({keys.DELAYED_BIND_POD_NUM: 4}, 4, 4, "delayed-binding-annotations"),
    ],
)
def test_group_name_with_counts_is_self_contained(annotations, minimum, total, source):
    builder = make_pod("w0").annotation(keys.VOLCANO_GROUP_NAME, "qj-1")
    for key, value in annotations.items():
        builder.annotation(key, value)
    result = resolve(builder)
    assert (result.gang_key, result.waiting_for, result.error) == ("default/qj-1", "", "")
    assert (result.spec.min_available, result.spec.total_number, result.spec.source) == (minimum, total, source)


# --- ConfigMap (seed 003) -----------------------------------------------------------------------------


def test_configmap_form_as_in_seed_003():
    configmap = yaml.safe_load("""
apiVersion: v1
kind: ConfigMap
metadata:
  name: gpu-pg
  namespace: sw-mpi-operator
data:
  minAvailable: "5"
  scheduleTimeoutSeconds: "20"
""")
    resolver = GangResolver(default_wait_seconds=300)
    pod = parse_pod(
        make_pod("simple-train-worker-0", "sw-mpi-operator")
        .label(keys.CONFIGMAP_LABEL, "gpu-pg")
        .scheduler("gang-scheduler")
        .gpu(1)
        .toleration("gpu", "Exists", effect="NoSchedule")
        .build()
    )
    assert resolver.resolve(pod) == Resolution(
        "sw-mpi-operator/gpu-pg", None, "ConfigMap sw-mpi-operator/gpu-pg does not exist yet", ""
    )
    assert GangResolver.is_gang_object(configmap)
    assert resolver.add_object(configmap, created_at=2.0) == "sw-mpi-operator/gpu-pg"
    spec = resolver.resolve(pod).spec
    assert (spec.min_available, spec.total_number, spec.wait_seconds, spec.source, spec.created_at) == (
        5,
        5,
        20.0,
        "configmap",
        2.0,
    )


@pytest.mark.parametrize(
    ("timeout", "expected"), [(None, 300.0), ("20s", 20.0), ("1m", 60.0), (15, 15.0), ("0", 300.0)]
)
def test_configmap_timeout_forms(timeout, expected):
    configmap = make_configmap("pg").data("minAvailable", "2")
    if timeout is not None:
        configmap.data("scheduleTimeoutSeconds", timeout)
    resolver = GangResolver(default_wait_seconds=300)
    resolver.add_object(configmap.build(), created_at=0)
    assert resolver.gang("default/pg").wait_seconds == expected


# --- precedence between links -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("builder", "key", "source_or_wait"),
    [
        (
            make_pod("w0")
            .annotation(keys.KOORD_NAME, "koord")
            .annotation(keys.KOORD_MIN_AVAILABLE, "1")
            .label(keys.LABEL_SIGS_PODGROUP, "sigs")
            .label(keys.LABEL_X_K8S_PODGROUP, "xk8s")
            .annotation(keys.LIGHT_NAME, "light")
            .annotation(keys.VOLCANO_GROUP_NAME, "volcano")
            .label(keys.CONFIGMAP_LABEL, "cm"),
            "default/koord",
            "koordinator-annotations",
        ),
        (
            make_pod("w0")
            .label(keys.LABEL_SIGS_PODGROUP, "sigs")
            .label(keys.LABEL_X_K8S_PODGROUP, "xk8s")
            .annotation(keys.LIGHT_NAME, "light")
            .annotation(keys.VOLCANO_GROUP_NAME, "volcano")
            .label(keys.CONFIGMAP_LABEL, "cm"),
            "default/sigs",
            "PodGroup default/sigs (scheduling.sigs.k8s.io)",
        ),
        (
            make_pod("w0")
            .label(keys.LABEL_X_K8S_PODGROUP, "xk8s")
            .annotation(keys.LIGHT_NAME, "light")
            .annotation(keys.VOLCANO_GROUP_NAME, "volcano")
            .label(keys.CONFIGMAP_LABEL, "cm"),
            "default/xk8s",
            "PodGroup default/xk8s (scheduling.x-k8s.io)",
        ),
        (
            make_pod("w0")
            .annotation(keys.LIGHT_NAME, "light")
            .annotation(keys.LIGHT_MIN_AVAILABLE, "1")
            .annotation(keys.VOLCANO_GROUP_NAME, "volcano")
            .label(keys.CONFIGMAP_LABEL, "cm"),
            "default/light",
            "lightweight-coscheduling",
        ),
        (
            make_pod("w0").annotation(keys.VOLCANO_GROUP_NAME, "volcano").label(keys.CONFIGMAP_LABEL, "cm"),
            "default/volcano",
            "PodGroup default/volcano (scheduling.volcano.sh)",
        ),
        (make_pod("w0").label(keys.CONFIGMAP_LABEL, "cm"), "default/cm", "ConfigMap default/cm"),
    ],
)
def test_link_precedence(builder, key, source_or_wait):
    result = resolve(builder)
    assert result.gang_key == key
    assert (result.spec.source if result.spec else result.waiting_for.removesuffix(" does not exist yet")) == (
        source_or_wait
    )


# --- objects: recognising, removing, replacing --------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (make_podgroup("g").min_member(1).build(), True),
        (make_podgroup("g", api_version=SIGS).build(), True),
        (make_podgroup("g", api_version=VOLCANO).build(), True),
        (make_podgroup("g", api_version="scheduling.k8s.io/v1alpha1").build(), False),
        (make_podgroup("g", api_version="v1alpha1").build(), False),
        (make_configmap("cm").data("minAvailable", "3").build(), True),
        (make_configmap("cm").data("other", "3").build(), False),
        (make_pod("p").build(), False),
        ({"kind": "ConfigMap"}, False),
        ("PodGroup", False),
    ],
)
def test_is_gang_object(obj, expected):
    assert GangResolver.is_gang_object(obj) is expected


def test_remove_object_sends_pods_back_to_waiting():
    resolver = GangResolver()
    resolver.add_object(make_podgroup("train").min_member(2).build(), created_at=0)
    pod = parse_pod(make_pod("w0").label(keys.LABEL_X_K8S_PODGROUP, "train").build())
    assert resolver.resolve(pod).spec is not None
    assert resolver.remove_object("PodGroup", "default", "train") == "default/train"
    assert resolver.resolve(pod).waiting_for == "PodGroup default/train (scheduling.x-k8s.io) does not exist yet"
    assert resolver.gang("default/train") is None
    assert resolver.remove_object("PodGroup", "default", "train") is None


def test_remove_object_with_a_qualified_kind_removes_only_that_api_group():
    resolver = GangResolver()
    resolver.add_object(make_podgroup("train").min_member(2).build(), created_at=0)
    resolver.add_object(make_podgroup("train", api_version=SIGS).min_member(3).build(), created_at=0)
    assert resolver.remove_object("PodGroup.scheduling.sigs.k8s.io", "default", "train") == "default/train"
    assert resolver.gang("default/train").source == "podgroup/scheduling.x-k8s.io"
    assert resolver.remove_object("ConfigMap", "default", "train") is None
    assert resolver.remove_object("podgroup", "default", "train") == "default/train"
    assert resolver.gang("default/train") is None


def test_a_gangs_objects_are_looked_up_by_key_not_by_scanning_every_object():
    """A rebuild looks up every PodGroup's gang; each lookup scanned every recorded object, so 20,000 PodGroups
    whose pods are gone (jobs that finished) took about 2 x 10^8 steps (tens of seconds) before the first
    placement. The same answers now come from an index by gang key."""
    import time

    resolver = GangResolver()
    n = 20_000
    for i in range(n):
        resolver.add_object(make_podgroup(f"pg{i}").min_member(2).build(), created_at=i)
    resolver.add_object(make_configmap("pg7").data("minAvailable", "3").build(), created_at=0)
    began = time.process_time()
    found = [resolver.gang(f"default/pg{i}") for i in range(n)]
    held = [resolver.has_object(f"default/pg{i}") for i in range(n)]
    took = time.process_time() - began
    assert all(g is not None and g.min_available == 2 for i, g in enumerate(found) if i != 7)
    assert found[7].min_available == 3  # the most recently added object of a key shared by two kinds
    assert all(held) and not resolver.has_object("default/none")
    assert took < 3.0, f"{took:.1f} s for {n} lookups of each kind"
    assert resolver.remove_object("ConfigMap", "default", "pg7") == "default/pg7"
    assert resolver.gang("default/pg7").min_available == 2 and resolver.has_object("default/pg7")


def test_adding_an_object_again_replaces_it():
    resolver = GangResolver()
    resolver.add_object(make_podgroup("train").min_member(2).build(), created_at=0)
    pod = parse_pod(make_pod("w0").label(keys.LABEL_X_K8S_PODGROUP, "train").build())
    resolver.resolve(pod)
    resolver.add_object(make_podgroup("train").min_member(5).build(), created_at=0)
    assert resolver.resolve(pod).spec.min_available == 5


def test_gang_lookup_before_any_pod_and_for_unknown_keys():
    resolver = GangResolver(default_wait_seconds=7)
    resolver.add_object(make_configmap("cm", "ns").data("minAvailable", 3).build(), created_at=4.0)
    spec = resolver.gang("ns/cm")
    assert (spec.min_available, spec.wait_seconds, spec.created_at, spec.source) == (3, 7, 4.0, "configmap")
    assert resolver.gang("ns/none") is None
    assert resolver.gang("default/cm") is None


def test_resolution_is_deterministic():
    def run():
        resolver = GangResolver(default_wait_seconds=10)
        pods = [koord(f"w{i}", gang=f"g{i % 3}").build() for i in range(6)]
        pods.append(make_pod("x").label(keys.LABEL_X_K8S_PODGROUP, "pg").build())
        resolver.add_object(make_podgroup("pg").min_member(1).build(), created_at=1.0)
        return [resolver.resolve(parse_pod(raw)) for raw in pods], parse_pod(make_pod("u").build()).uid

    assert run() == run()


def test_a_later_pod_with_another_form_joins_the_gang_its_first_pod_declared():
    resolver = GangResolver()
    resolver.add_object(make_podgroup("train").min_member(9).build(), created_at=0)
    first = resolver.resolve(parse_pod(koord("w0", minimum=2).build()))
    later = resolver.resolve(parse_pod(make_pod("w1").label(keys.LABEL_X_K8S_PODGROUP, "train").build()))
    assert first.gang_key == later.gang_key == "default/train"
    assert (later.spec.min_available, later.spec.source) == (2, "koordinator-annotations")


def test_a_gangs_pods_share_one_spec_until_what_it_is_built_from_changes():
    """The spec is built once per version of the gang's declaration (a rebuild resolves every bound pod, three
    of a gang); a changed PodGroup, or a gang forgotten and declared again by a new first pod, builds it
    anew, equal to what a resolver that never saw the earlier versions gives."""
    resolver = GangResolver(default_wait_seconds=60)
    pods = [parse_pod(make_pod(f"w{i}").label(keys.LABEL_X_K8S_PODGROUP, "train").build()) for i in range(3)]
    resolver.add_object(make_podgroup("train", api_version=X_K8S).min_member(3).build(), created_at=1.0)
    specs = [resolver.resolve(p).spec for p in pods]
    assert specs[0] is specs[1] is specs[2] and specs[0].min_available == 3

    changed = make_podgroup("train", api_version=X_K8S).min_member(2).timeout(30).build()
    resolver.add_object(changed, created_at=1.0)
    after = resolver.resolve(pods[0]).spec
    fresh = GangResolver(default_wait_seconds=60)
    fresh.add_object(changed, created_at=1.0)
    assert after is not specs[0] and after == fresh.resolve(pods[0]).spec
    assert (after.min_available, after.wait_seconds) == (2, 30.0)
    assert resolver.gang("default/train") is after

    # Self-contained: the first pod's creation time is part of the spec; forgotten, the next first pod's counts.
    def solo(name: str, created: str) -> Resolution:
        pod = koord(name, gang="solo").created(created).build()
        return resolver.resolve(parse_pod(pod, epoch=1714564800))

    first = solo("a", "2024-05-01T12:00:10Z")
    assert solo("b", "2024-05-01T12:00:30Z").spec is first.spec
    resolver.forget_link("default/solo")
    again = solo("c", "2024-05-01T12:00:20Z")
    assert again.spec is not first.spec and (first.spec.created_at, again.spec.created_at) == (10.0, 20.0)
