import pytest
from builders import make_pod, requirement

from phalanx.intake.errors import IntakeError
from phalanx.intake.pods import parse_pod
from phalanx.model.objects import Placement, SelectorRequirement, SelectorTerm, Toleration

TERMS = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"


def test_required_node_affinity_terms_with_expressions_and_fields():
    raw = (
        make_pod("w0")
        .affinity_term(requirement("zone", "In", "a", "b"), requirement("spot", "DoesNotExist"))
        .affinity_term(requirement("gpus", "Gt", "3"), fields=[requirement("metadata.name", "NotIn", "n1")])
        .build()
    )
    assert parse_pod(raw).placement.affinity_terms == (
        SelectorTerm(
            match_expressions=(
                SelectorRequirement("zone", "In", ("a", "b")),
                SelectorRequirement("spot", "DoesNotExist"),
            )
        ),
        SelectorTerm(
            match_expressions=(SelectorRequirement("gpus", "Gt", ("3",)),),
            match_fields=(SelectorRequirement("metadata.name", "NotIn", ("n1",)),),
        ),
    )


def test_preferred_affinity_is_not_a_constraint():
    raw = (
        make_pod("w0")
        .set(
            "spec.affinity",
            {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 1, "preference": {"matchExpressions": [requirement("zone", "In", "a")]}}
                    ]
                }
            },
        )
        .build()
    )
    assert parse_pod(raw).placement.affinity_terms == ()


def test_tolerations_with_defaults():
    raw = (
        make_pod("w0")
        .toleration("gpu", "Exists", effect="NoSchedule")
        .toleration("team", value="ml")
        .toleration(operator="Exists")
        .build()
    )
    assert parse_pod(raw).placement.tolerations == (
        Toleration("gpu", "Exists", "", "NoSchedule"),
        Toleration("team", "Equal", "ml", ""),
        Toleration("", "Exists", "", ""),
    )


def test_placement_is_hashable_and_equal_for_equal_constraints():
    def build():
        return parse_pod(
            make_pod("w0")
            .node_selector("b", "2")
            .node_selector("a", "1")
            .affinity_term(requirement("zone", "In", "a"))
            .toleration("gpu", "Exists")
            .build()
        ).placement

    assert hash(build()) == hash(build()) and build() == build()
    assert parse_pod(make_pod("w1").build()).placement == Placement()


@pytest.mark.parametrize(
    ("builder", "field", "fragment"),
    [
        (
            make_pod("w0").affinity_term(requirement("zone", "in", "a")),
            f"{TERMS}[0].matchExpressions[0].operator",
            '"in" is not one of',
        ),
        (
            make_pod("w0").affinity_term(requirement("zone", "In")),
            f"{TERMS}[0].matchExpressions[0].values",
            "non-empty",
        ),
        (
            make_pod("w0").affinity_term(requirement("zone", "Exists", "a")),
            f"{TERMS}[0].matchExpressions[0].values",
            "must be empty",
        ),
        (
            make_pod("w0").affinity_term(requirement("gpus", "Gt", "many")),
            f"{TERMS}[0].matchExpressions[0].values",
            "one integer",
        ),
        (
            make_pod("w0").affinity_term(requirement("gpus", "Lt", "1", "2")),
            f"{TERMS}[0].matchExpressions[0].values",
            "one integer",
        ),
        (make_pod("w0").affinity_term(requirement("", "Exists")), f"{TERMS}[0].matchExpressions[0].key", "is required"),
        (
            make_pod("w0").affinity_term(requirement("zone", "In", "a"), fields=[requirement("spec.x", "In", "a")]),
            f"{TERMS}[0].matchFields[0].key",
            "only metadata.name",
        ),
        (
            make_pod("w0").affinity_term(fields=[requirement("metadata.name", "Exists")]).affinity_term(),
            f"{TERMS}[0].matchFields[0].operator",
            '"Exists"',
        ),
        (
            make_pod("w0").affinity_term(requirement("a", "Exists")).affinity_term(requirement("b", "Foo")),
            f"{TERMS}[1].matchExpressions[0].operator",
            '"Foo"',
        ),
        (make_pod("w0").set("spec.affinity", {"nodeAffinity": []}), "spec.affinity.nodeAffinity", "expected a mapping"),
        (make_pod("w0").toleration("gpu", "Exist"), "spec.tolerations[0].operator", '"Exist"'),
        (make_pod("w0").toleration("gpu", "Exists", value="x"), "spec.tolerations[0].value", "must be empty"),
        (make_pod("w0").toleration("", "Equal", value="x"), "spec.tolerations[0].operator", "key is empty"),
        (make_pod("w0").toleration("gpu", effect="NoSchedul"), "spec.tolerations[0].effect", '"NoSchedul"'),
        (make_pod("w0").set("spec.tolerations", {"key": "gpu"}), "spec.tolerations", "expected a list"),
        (make_pod("w0").set("spec.nodeSelector", ["zone=a"]), "spec.nodeSelector", "expected a mapping"),
    ],
)
def test_bad_placement_names_the_field(builder, field, fragment):
    with pytest.raises(IntakeError) as caught:
        parse_pod(builder.build())
    assert caught.value.field == field
    assert str(caught.value).startswith(f"Pod default/w0: {field}: ")
    assert fragment in caught.value.message
