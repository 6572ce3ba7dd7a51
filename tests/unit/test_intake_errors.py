import pickle

import pytest

from phalanx.intake.errors import IntakeError, Subject, quoted


def test_intake_error_text_names_kind_object_and_field():
    error = IntakeError(
        "Pod",
        "default",
        "worker-0",
        "metadata.annotations[gang.scheduling.koordinator.sh/min-available]",
        '"abc" is not a positive integer',
    )
    assert str(error) == (
        "Pod default/worker-0: metadata.annotations[gang.scheduling.koordinator.sh/min-available]: "
        '"abc" is not a positive integer'
    )
    assert (error.kind, error.namespace, error.name) == ("Pod", "default", "worker-0")
    assert error.field.endswith("min-available]")
    assert error.message == '"abc" is not a positive integer'


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (("Node", "", "n1", "spec.taints[0].effect", "bad"), "Node n1: spec.taints[0].effect: bad"),
        (("Pod", "ns", "p", "", "broken"), "Pod ns/p: broken"),
    ],
)
def test_intake_error_text_without_namespace_or_field(args, text):
    assert str(IntakeError(*args)) == text


def test_intake_error_is_a_value_error_and_survives_pickling():
    error = Subject("PodGroup", "ns", "g").error("spec.minMember", "is required")
    assert isinstance(error, ValueError)
    copy = pickle.loads(pickle.dumps(error))
    assert str(copy) == str(error) == "PodGroup ns/g: spec.minMember: is required"
    assert copy.field == "spec.minMember"


def test_quoted_shows_strings_in_double_quotes():
    assert quoted("abc") == '"abc"'
    assert quoted("") == '""'
    assert quoted(5) == "5"


def test_a_workload_with_mis_shaped_fields_reports_them_and_loads_the_rest(tmp_path):
    # `annotations: "foo"` crashed `phalanx simulate` before the intake could name it.
    from phalanx.sim.workload import load_workload

    path = tmp_path / "w.yaml"
    path.write_text(
        "kind: Pod\nmetadata: {name: a, annotations: foo}\n---\n"
        "kind: Pod\nmetadata: {name: b}\nspec: [1]\n---\n"
        "kind: [Pod]\nmetadata: {name: c}\n---\n"
        "kind: Pod\nmetadata: {name: d, labels: [x]}\n---\n"
        "kind: Pod\nmetadata: {name: e}\n"
    )
    w = load_workload([path])
    assert w.errors == [
        f"{path}#1: Pod default/a: metadata.annotations: expected a mapping, got str; skipped",
        f"{path}#2: Pod default/b: spec: expected a mapping, got list; skipped",
        f"{path}#3: kind a list is not simulated (expected one of ConfigMap, Node, PhalanxJob, Pod, PodGroup); skipped",
    ]
    # Labels are read by the intake only, which names them; the pod stays, to be reported with that reason.
    assert [o.name for o in w.objects] == ["d", "e"]
