from datetime import datetime, timedelta, timezone

import pytest
from builders import make_pod

from phalanx.intake.errors import IntakeError
from phalanx.intake.pods import parse_pod, scheduler_name
from phalanx.model.keys import SIM_DURATION

GPU = "nvidia.com/gpu"


# --- metadata -----------------------------------------------------------------------------------------


def test_namespace_defaults_to_default():
    raw = make_pod("w0").build()
    del raw["metadata"]["namespace"]
    pod = parse_pod(raw)
    assert (pod.namespace, pod.name, pod.key) == ("default", "w0", "default/w0")


def test_uid_is_taken_from_metadata():
    assert parse_pod(make_pod("w0").uid("abc-123").build()).uid == "abc-123"


def test_missing_uid_is_deterministic_and_distinct_per_pod():
    first = parse_pod(make_pod("w0", "ns").build()).uid
    assert first == parse_pod(make_pod("w0", "ns").build()).uid
    assert first not in {parse_pod(make_pod("w1", "ns").build()).uid, parse_pod(make_pod("w0", "other").build()).uid}
    assert len(first) == 36


@pytest.mark.parametrize(("priority", "expected"), [(None, 0), (100, 100), (-5, -5), (2_000_000_000, 2_000_000_000)])
def test_priority(priority, expected):
    builder = make_pod("w0")
    if priority is not None:
        builder.priority(priority)
    assert parse_pod(builder.build()).priority == expected


@pytest.mark.parametrize(
    ("timestamp", "epoch", "expected"),
    [
        ("2022-07-11T18:26:33Z", 0.0, 1657563993.0),
        ("2022-07-11T18:26:33Z", 1657563900.0, 93.0),
        ("2022-07-11T18:26:33.250Z", 1657563993.0, 0.25),
        ("2022-07-11T20:26:33+02:00", 1657563993.0, 0.0),
        (datetime(2022, 7, 11, 18, 26, 33, tzinfo=timezone.utc), 1657563983.0, 10.0),
        (datetime(2022, 7, 11, 18, 26, 33), 1657563993.0, 0.0),  # naive: UTC
        (datetime(2022, 7, 11, 20, 26, 33, tzinfo=timezone(timedelta(hours=2))), 1657563993.0, 0.0),
    ],
)
def test_created_at_is_unix_seconds_minus_epoch(timestamp, epoch, expected):
    assert parse_pod(make_pod("w0").created(timestamp).build(), epoch=epoch).created_at == pytest.approx(expected)


def test_created_at_is_zero_without_a_timestamp_whatever_the_epoch():
    assert parse_pod(make_pod("w0").build(), epoch=1000.0).created_at == 0.0


def test_labels_annotations_and_node_name_are_kept_as_strings():
    raw = (
        make_pod("w0").label("app", "train").annotation("replicas", 5).annotation("flag", True).node_name("n3").build()
    )
    pod = parse_pod(raw)
    assert pod.labels == {"app": "train"}
    assert pod.annotations == {"replicas": "5", "flag": "true"}
    assert pod.node_name == "n3"
    assert pod.gang == "" and pod.invalid == ""


@pytest.mark.parametrize(("value", "seconds"), [("90s", 90.0), ("1h30m", 5400.0), ("20", 20.0), (15, 15.0)])
def test_duration_comes_from_the_simulation_annotation(value, seconds):
    assert parse_pod(make_pod("w0").annotation(SIM_DURATION, value).build()).duration == seconds


def test_duration_is_none_without_the_annotation():
    assert parse_pod(make_pod("w0").build()).duration is None


@pytest.mark.parametrize(
    ("spec", "name"),
    [
        ({}, "default-scheduler"),
        ({"schedulerName": "phalanx"}, "phalanx"),
        ({"schedulerName": ""}, "default-scheduler"),
    ],
)
def test_scheduler_name(spec, name):
    assert scheduler_name({"metadata": {"name": "p"}, "spec": spec}) == name


def test_scheduler_name_without_spec():
    assert scheduler_name({"metadata": {"name": "p"}}) == "default-scheduler"


# --- requests -----------------------------------------------------------------------------------------


def test_requests_sum_over_containers_in_milli_units_plus_one_pod_slot():
    raw = (
        make_pod("w0")
        .container(requests={"cpu": "500m", "memory": "1Gi"})
        .container(requests={"cpu": "1.5", "memory": "512Mi"})
        .build()
    )
    assert parse_pod(raw).requests == {"cpu": 2000, "memory": (2**30 + 2**29) * 1000, "pods": 1000}


def test_a_pod_without_containers_still_takes_a_pod_slot():
    assert parse_pod(make_pod("w0").build()).requests == {"pods": 1000}


def test_limits_stand_in_for_missing_requests():
    # Seed 003's GPU workers give only limits: Kubernetes defaults the request to the limit.
    raw = make_pod("w0").container(requests={"cpu": "1"}, limits={"cpu": "4", GPU: 1}).build()
    assert parse_pod(raw).requests == {"cpu": 1000, GPU: 1000, "pods": 1000}


def test_gpu_limits_sum_over_containers():
    raw = make_pod("w0").container(limits={GPU: 1}).container(limits={GPU: 2}).build()
    assert parse_pod(raw).requests[GPU] == 3000


def test_init_containers_count_by_their_maximum_against_the_containers_sum():
    raw = (
        make_pod("w0")
        .container(requests={"cpu": "1", "memory": "1Gi"})
        .container(requests={"cpu": "1"})
        .init_container(requests={"cpu": "3"})
        .init_container(requests={"cpu": "500m", "memory": "4Gi"})
        .build()
    )
    requests = parse_pod(raw).requests
    assert requests["cpu"] == 3000  # the first init container needs more than both app containers
    assert requests["memory"] == 4 * 2**30 * 1000  # the second needs more memory than the app


def test_init_container_smaller_than_the_app_does_not_add():
    raw = make_pod("w0").container(requests={"cpu": "2"}).init_container(requests={"cpu": "1"}).build()
    assert parse_pod(raw).requests["cpu"] == 2000


def test_init_container_limits_stand_in_for_requests():
    raw = make_pod("w0").container(requests={"cpu": "1"}).init_container(limits={"cpu": "2"}).build()
    assert parse_pod(raw).requests["cpu"] == 2000


def test_sidecar_init_containers_add_to_the_app_and_to_later_init_containers():
    raw = (
        make_pod("w0")
        .container(requests={"cpu": "1"})
        .init_container(requests={"cpu": "500m"}, sidecar=True)
        .init_container(requests={"cpu": "2"})
        .build()
    )
    # Later init container: 2 + 0.5 sidecar = 2.5 > app 1 + 0.5 sidecar.
    assert parse_pod(raw).requests["cpu"] == 2500
    small = make_pod("w0").container(requests={"cpu": "1"}).init_container(requests={"cpu": "500m"}, sidecar=True)
    assert parse_pod(small.build()).requests["cpu"] == 1500


def test_overhead_is_added_on_top():
    raw = make_pod("w0").container(requests={"cpu": "1"}).overhead("cpu", "250m").overhead("memory", "64Mi").build()
    assert parse_pod(raw).requests == {"cpu": 1250, "memory": 64 * 2**20 * 1000, "pods": 1000}


# --- placement ----------------------------------------------------------------------------------------


def test_node_selector_is_sorted_pairs():
    raw = make_pod("w0").node_selector("zone", "a").node_selector("accelerator", "a100").build()
    assert parse_pod(raw).placement.node_selector == (("accelerator", "a100"), ("zone", "a"))


# --- errors -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("builder", "field", "fragment"),
    [
        (
            make_pod("worker-0").container(requests={"cpu": "abc"}),
            "spec.containers[0].resources.requests.cpu",
            "not a quantity",
        ),
        (
            make_pod("worker-0").container().container(limits={GPU: "one"}),
            "spec.containers[1].resources.limits.nvidia.com/gpu",
            "not a quantity",
        ),
        (
            make_pod("worker-0").container(requests={"memory": "-1Gi"}),
            "spec.containers[0].resources.requests.memory",
            "negative",
        ),
        (
            make_pod("worker-0").init_container(requests={"cpu": "1x"}),
            "spec.initContainers[0].resources.requests.cpu",
            "not a quantity",
        ),
        (make_pod("worker-0").overhead("cpu", "fast"), "spec.overhead.cpu", "not a quantity"),
        (make_pod("worker-0").set("spec.containers", {"name": "c"}), "spec.containers", "expected a list"),
        (
            make_pod("worker-0").set("spec.containers", [{"resources": {"requests": "1"}}]),
            "spec.containers[0].resources.requests",
            "expected a mapping",
        ),
        (make_pod("worker-0").priority("high"), "spec.priority", '"high" is not an integer'),
        (make_pod("worker-0").priority(True), "spec.priority", "not an integer"),
        (make_pod("worker-0").created("yesterday"), "metadata.creationTimestamp", '"yesterday"'),
        (make_pod("worker-0").created(12345), "metadata.creationTimestamp", "RFC 3339"),
        (
            make_pod("worker-0").annotation(SIM_DURATION, "forever"),
            f"metadata.annotations[{SIM_DURATION}]",
            '"forever" is not a duration',
        ),
        (make_pod("worker-0").annotation(SIM_DURATION, "-5s"), f"metadata.annotations[{SIM_DURATION}]", "negative"),
        (make_pod("worker-0").set("metadata.annotations", "a=b"), "metadata.annotations", "expected a mapping"),
        (make_pod("worker-0").set("spec", []), "spec", "expected a mapping"),
        (make_pod("worker-0").node_name(7), "spec.nodeName", "expected a string"),
        # Bounded inputs: every number must fit its protobuf field, every name must split cleanly.
        (make_pod("worker-0").priority(2**31), "spec.priority", "out of range"),
        (make_pod("worker-0").priority(-(2**31) - 1), "spec.priority", "out of range"),
        (make_pod("worker-0").priority(10**5000), "spec.priority", "out of range"),
        (
            make_pod("worker-0").container(requests={"cpu": 10**5000}),
            "spec.containers[0].resources.requests.cpu",
            "too large",
        ),
        (
            make_pod("worker-0").container(requests={"cpu": "1e999990"}),
            "spec.containers[0].resources.requests.cpu",
            "too large",
        ),
        (
            make_pod("worker-0").container(requests={"cpu": "1e10000000"}),
            "spec.containers[0].resources.requests.cpu",
            "too large",
        ),
        (
            make_pod("worker-0").container(requests={"cpu": "9" * 100}),
            "spec.containers[0].resources.requests.cpu",
            "too long",
        ),
        (
            make_pod("worker-0").container(requests={"cpu": "5T"}).container(requests={"cpu": "5T"}),
            "spec.containers[*].resources.requests.cpu",
            "too large",
        ),
        (
            make_pod("worker-0").annotation(SIM_DURATION, "9" * 100 + "h"),
            f"metadata.annotations[{SIM_DURATION}]",
            "too long",
        ),
        (make_pod("worker-0").label("big", 10**5000), "metadata.labels[big]", "cannot be read as text"),
        (make_pod("worker-0").annotation("odd", "\ud800"), "metadata.annotations[odd]", "not valid UTF-8"),
        (make_pod("worker-0").node_name("node/1"), "spec.nodeName", "DNS-1123 subdomain"),
    ],
)
def test_errors_name_the_pod_and_the_field(builder, field, fragment):
    with pytest.raises(IntakeError) as caught:
        parse_pod(builder.build())
    assert (caught.value.kind, caught.value.namespace, caught.value.name) == ("Pod", "default", "worker-0")
    assert caught.value.field == field
    assert str(caught.value).startswith(f"Pod default/worker-0: {field}: ")
    assert fragment in caught.value.message


@pytest.mark.parametrize(
    ("name", "namespace", "field"),
    [
        ("a/b", "default", "metadata.name"),
        ("worker-0", "team/a", "metadata.namespace"),
        ("Worker-0", "default", "metadata.name"),
        ("worker_0", "default", "metadata.name"),
        ("w" * 254, "default", "metadata.name"),
        ("worker-0", "n" * 64, "metadata.namespace"),
        ("worker-0", "team.a", "metadata.namespace"),
        ("worker-0\n", "default", "metadata.name"),
    ],
)
def test_pod_names_and_namespaces_must_be_kubernetes_names(name, namespace, field):
    # A "/" in either used to pass the intake and then fail a whole binder step.
    with pytest.raises(IntakeError) as caught:
        parse_pod(make_pod(name, namespace).build())
    assert caught.value.field == field
    assert "DNS-1123" in caught.value.message


def test_the_longest_kubernetes_names_are_accepted():
    pod = parse_pod(make_pod("w" * 253, "n" * 63).node_name("a." * 126 + "b").build())
    assert (len(pod.name), len(pod.namespace), len(pod.node_name)) == (253, 63, 253)


@pytest.mark.parametrize("raw", [{"metadata": {"namespace": "ns"}}, {"metadata": {"name": ""}}, {"spec": {}}])
def test_a_pod_without_a_name_is_refused(raw):
    with pytest.raises(IntakeError, match="metadata.name: is required"):
        parse_pod(raw)


def test_a_non_mapping_is_refused():
    with pytest.raises(IntakeError, match="expected an object"):
        parse_pod(["not", "a", "pod"])  # type: ignore[arg-type]


# --- the kubernetes client's to_dict() form -----------------------------------------------------------


def test_kubernetes_client_to_dict_form_gives_the_same_pod_as_camel_case():
    from kubernetes import client

    created = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)
    typed = client.V1Pod(
        metadata=client.V1ObjectMeta(
            name="w0",
            namespace="ml",
            uid="u-1",
            creation_timestamp=created,
            labels={"app": "train"},
            annotations={SIM_DURATION: "1m"},
        ),
        spec=client.V1PodSpec(
            priority=7,
            node_selector={"zone": "a"},
            scheduler_name="phalanx",
            tolerations=[client.V1Toleration(key="gpu", operator="Exists", effect="NoSchedule")],
            affinity=client.V1Affinity(
                node_affinity=client.V1NodeAffinity(
                    required_during_scheduling_ignored_during_execution=client.V1NodeSelector(
                        node_selector_terms=[
                            client.V1NodeSelectorTerm(
                                match_expressions=[
                                    client.V1NodeSelectorRequirement(key="zone", operator="In", values=["a"])
                                ],
                                match_fields=[
                                    client.V1NodeSelectorRequirement(key="metadata.name", operator="In", values=["n1"])
                                ],
                            )
                        ]
                    )
                )
            ),
            init_containers=[
                client.V1Container(name="i", resources=client.V1ResourceRequirements(requests={"cpu": "4"}))
            ],
            containers=[
                client.V1Container(
                    name="c", resources=client.V1ResourceRequirements(requests={"cpu": "1"}, limits={GPU: "2"})
                )
            ],
            overhead={"memory": "1Mi"},
        ),
    )
    camel = client.ApiClient().sanitize_for_serialization(typed)
    from_snake = parse_pod(typed.to_dict(), epoch=created.timestamp())
    from_camel = parse_pod(camel, epoch=created.timestamp())
    assert from_snake == from_camel
    assert from_snake.requests == {"cpu": 4000, GPU: 2000, "memory": 2**20 * 1000, "pods": 1000}
    assert from_snake.placement.affinity_terms[0].match_fields[0].values == ("n1",)
    assert from_snake.placement.node_selector == (("zone", "a"),)
    assert (from_snake.priority, from_snake.uid, from_snake.created_at, from_snake.duration) == (7, "u-1", 0.0, 60.0)
    assert scheduler_name(typed.to_dict()) == scheduler_name(camel) == "phalanx"
