import pytest
from builders import make_node

from phalanx.intake.errors import IntakeError
from phalanx.intake.nodes import parse_node
from phalanx.model.objects import Taint


def test_allocatable_is_read_in_milli_units_with_default_pod_slots():
    node = parse_node(make_node("n1").cpu("7500m").memory("1Ki").gpu(8).build())
    assert node.name == "n1"
    assert node.allocatable == {"cpu": 7500, "memory": 1_024_000, "nvidia.com/gpu": 8000, "pods": 110_000}


def test_explicit_pods_capacity_is_kept():
    node = parse_node(make_node("n1").cpu("4").resource("pods", "30").build())
    assert node.allocatable["pods"] == 30_000


def test_capacity_is_the_fallback_when_allocatable_is_missing():
    node = parse_node(make_node("n1").cpu("2").capacity_only().build())
    assert node.allocatable == {"cpu": 2000, "pods": 110_000}


def test_allocatable_wins_over_capacity():
    raw = make_node("n1").cpu("3").set("status.capacity", {"cpu": "4"}).build()
    assert parse_node(raw).allocatable["cpu"] == 3000


def test_hostname_label_is_added_unless_present():
    assert parse_node(make_node("n1").label("zone", "a").build()).labels == {
        "zone": "a",
        "kubernetes.io/hostname": "n1",
    }
    assert parse_node(make_node("n1").label("kubernetes.io/hostname", "host-1").build()).labels == {
        "kubernetes.io/hostname": "host-1"
    }


def test_taints_and_unschedulable():
    raw = (
        make_node("n1")
        .taint("gpu", "true", "NoSchedule")
        .taint("dedicated", effect="NoExecute")
        .unschedulable()
        .build()
    )
    node = parse_node(raw)
    assert node.taints == (Taint("gpu", "true", "NoSchedule"), Taint("dedicated", "", "NoExecute"))
    assert node.unschedulable is True
    assert parse_node(make_node("n2").build()).unschedulable is False


def test_kubernetes_client_to_dict_form_is_read():
    from kubernetes import client

    raw = client.V1Node(
        metadata=client.V1ObjectMeta(name="n1", labels={"zone": "b"}),
        spec=client.V1NodeSpec(taints=[client.V1Taint(key="gpu", effect="NoSchedule")], unschedulable=True),
        status=client.V1NodeStatus(allocatable={"cpu": "4", "memory": "8Gi"}),
    ).to_dict()
    node = parse_node(raw)
    assert node.allocatable == {"cpu": 4000, "memory": 8 * 2**30 * 1000, "pods": 110_000}
    assert node.taints == (Taint("gpu", "", "NoSchedule"),)
    assert node.unschedulable is True
    assert node.labels["zone"] == "b"


@pytest.mark.parametrize(
    ("raw", "field", "fragment"),
    [
        (make_node("n1").cpu("lots").build(), "status.allocatable.cpu", "not a quantity"),
        (make_node("n1").cpu("-1").build(), "status.allocatable.cpu", "negative"),
        (make_node("n1").memory("1Zi").capacity_only().build(), "status.capacity.memory", "not a quantity"),
        (make_node("n1").taint("gpu", effect="Sometimes").build(), "spec.taints[0].effect", '"Sometimes"'),
        (make_node("n1").taint("gpu", effect=None).build(), "spec.taints[0].effect", '""'),
        (make_node("n1").taint("").build(), "spec.taints[0].key", "is required"),
        (make_node("n1").set("spec.taints", "gpu").build(), "spec.taints", "expected a list"),
        (make_node("n1").unschedulable("yes").build(), "spec.unschedulable", '"yes"'),
        (make_node("n1").set("metadata.labels", ["a"]).build(), "metadata.labels", "expected a mapping"),
    ],
)
def test_errors_name_the_node_and_the_field(raw, field, fragment):
    with pytest.raises(IntakeError) as caught:
        parse_node(raw)
    assert caught.value.kind == "Node" and caught.value.name == "n1"
    assert caught.value.field == field
    assert str(caught.value).startswith(f"Node n1: {field}: ")
    assert fragment in caught.value.message


def test_a_node_without_a_name_is_refused():
    with pytest.raises(IntakeError, match="metadata.name: is required"):
        parse_node({"metadata": {}, "status": {}})


@pytest.mark.parametrize(
    ("builder", "field", "fragment"),
    [
        # One column per GPU in the scheduler: 10^15 GPUs used to hang it.
        (make_node("n1").gpu(1025), "status.allocatable.nvidia.com/gpu", "at most 1024"),
        (make_node("n1").gpu(10**9).capacity_only(), "status.capacity.nvidia.com/gpu", "at most 1024"),
        # Amounts must stay exact as the doubles the Redis state adds them up in.
        (make_node("n1").memory(2**53), "status.allocatable.memory", "too large (at most 9007199254740991"),
        (make_node("n1").cpu(10**5000), "status.allocatable.cpu", "too large"),
        (make_node("a/b"), "metadata.name", "DNS-1123 subdomain"),
        (make_node("N1"), "metadata.name", "DNS-1123 subdomain"),
    ],
)
def test_bounded_node_inputs_are_refused_by_name(builder, field, fragment):
    with pytest.raises(IntakeError) as caught:
        parse_node(builder.build())
    assert caught.value.field == field
    assert fragment in caught.value.message


def test_the_largest_accepted_node():
    node = parse_node(make_node("n" * 253).gpu(1024).memory(f"{2**53 - 1}m").build())
    assert (node.allocatable["nvidia.com/gpu"], node.allocatable["memory"]) == (1_024_000, 2**53 - 1)
