"""Property: whatever dict reaches the intake, it gives a model object or an IntakeError naming the object
and the field, never another exception; and what it gives fits the protobuf messages it travels in, and
passes the services' checks of them (phalanx.rpc.object_checks: the same bounds, phalanx.model.limits)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phalanx.intake.errors import IntakeError
from phalanx.intake.nodes import parse_node
from phalanx.intake.pods import parse_pod
from phalanx.intake.resolver import GangResolver
from phalanx.model import keys
from phalanx.rpc.convert import gang_to_pb, node_to_pb, pod_to_pb
from phalanx.rpc.object_checks import gang_errors, node_errors, pod_errors

settings.register_profile(
    "intake",
    deadline=None,
    derandomize=True,
    max_examples=300,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
INTAKE = settings.get_profile("intake")

# --- values: mostly plausible, sometimes garbage -------------------------------------------------------

# 10**5000 is built, not listed: repr() of it raises, and hypothesis describes listed values with repr().
big_ints = st.one_of(
    st.sampled_from([2**31 - 1, 2**31, -(2**31) - 1, 2**63 - 1, 2**63, 2**64]),
    st.builds(pow, st.just(10), st.just(5000)),
)
numbers = st.one_of(st.integers(), big_ints, st.floats(allow_nan=True, allow_infinity=True))
odd_text = st.sampled_from(
    [
        "",
        " ",
        "a/b",
        "A",
        "-a",
        "a-",
        "\ud800",
        "名前",
        "a\n",
        "x" * 300,
        "9" * 5000,
        "1e999999",
        "1e10000000",
        "5P",
        "-1",
        "+3",
        "0x10",
        "\u0663",
    ]
)
text = st.one_of(st.text(max_size=30), odd_text)
scalars = st.one_of(st.none(), st.booleans(), numbers, text)
garbage = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=8,
)

names = st.one_of(st.sampled_from(["worker-0", "a", "train", "n1", "a.b", "w" * 253]), text, garbage)
quantities = st.one_of(
    st.sampled_from(["500m", "2Gi", "1.5", "1e3", "8", "0", "5P", "9E", "-1"]),
    st.integers(min_value=0, max_value=2**40),
    numbers,
    text,
    garbage,
)
durations = st.one_of(st.sampled_from(["30s", "1h30m", "500ms", "0s", "-5s", "9" * 400 + "h", "20"]), numbers, text)
counts = st.one_of(
    st.integers(min_value=-3, max_value=10), big_ints, st.sampled_from(["3", "0", "2147483648"]), text, garbage
)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The field absent, or this value, or garbage in its place."""
    return st.one_of(st.just(_ABSENT), strategy, garbage)


_ABSENT = object()


def compact(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not _ABSENT}


def string_maps(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return maybe(st.dictionaries(st.one_of(st.sampled_from(GANG_KEYS), st.text(max_size=12)), values, max_size=4))


GANG_KEYS = [
    keys.KOORD_NAME,
    keys.KOORD_MIN_AVAILABLE,
    keys.KOORD_TOTAL_NUMBER,
    keys.KOORD_MODE,
    keys.KOORD_WAITING_TIME,
    keys.KOORD_GROUPS,
    keys.KOORD_MATCH_POLICY,
    keys.LABEL_X_K8S_PODGROUP,
    keys.LABEL_SIGS_PODGROUP,
    keys.LIGHT_NAME,
    keys.LIGHT_MIN_AVAILABLE,
    keys.VOLCANO_GROUP_NAME,
    keys.KUBE_BATCH_MIN_MEMBER,
    keys.DELAYED_BIND_POD_NUM,
    keys.CONFIGMAP_LABEL,
    keys.SIM_DURATION,
]
annotation_values = st.one_of(
    st.sampled_from(["train", "2", "3", "Strict", "NonStrict", "10s", "[ns/a]", '["default/train"]', "once-satisfied"]),
    counts,
    durations,
)


@st.composite
def metadata(draw: st.DrawFn) -> Any:
    return draw(
        st.one_of(
            garbage,
            st.builds(
                compact,
                st.fixed_dictionaries(
                    {
                        "name": names,
                        "namespace": maybe(st.one_of(st.sampled_from(["default", "ml", "a/b"]), names)),
                        "annotations": string_maps(annotation_values),
                        "labels": string_maps(annotation_values),
                        "creationTimestamp": maybe(
                            st.sampled_from(
                                [
                                    "2026-01-01T00:00:00Z",
                                    "0001-01-01T00:00:00+05:00",
                                    "yesterday",
                                    "9999-12-31T23:59:59-05:00",
                                ]
                            )
                        ),
                        "uid": maybe(text),
                    }
                ),
            ),
        )
    )


resource_lists = maybe(
    st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu", ""]), quantities, max_size=3)
)
containers = maybe(
    st.lists(
        st.one_of(
            garbage,
            st.builds(
                compact,
                st.fixed_dictionaries(
                    {
                        "resources": maybe(
                            st.builds(
                                compact, st.fixed_dictionaries({"requests": resource_lists, "limits": resource_lists})
                            )
                        ),
                        "restartPolicy": maybe(st.just("Always")),
                    }
                ),
            ),
        ),
        max_size=3,
    )
)
requirements = st.lists(
    st.builds(
        compact,
        st.fixed_dictionaries(
            {
                "key": maybe(st.sampled_from(["zone", "metadata.name", ""])),
                "operator": maybe(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "exists"])),
                "values": maybe(st.lists(st.one_of(st.sampled_from(["1", "a", "9" * 30]), numbers, text), max_size=2)),
            }
        ),
    ),
    max_size=2,
)
affinity = maybe(
    st.fixed_dictionaries(
        {
            "nodeAffinity": st.fixed_dictionaries(
                {
                    "requiredDuringSchedulingIgnoredDuringExecution": st.fixed_dictionaries(
                        {
                            "nodeSelectorTerms": st.lists(
                                st.fixed_dictionaries({"matchExpressions": requirements, "matchFields": requirements}),
                                max_size=2,
                            )
                        }
                    )
                }
            )
        }
    )
)
tolerations = maybe(
    st.lists(
        st.builds(
            compact,
            st.fixed_dictionaries(
                {
                    "key": maybe(text),
                    "operator": maybe(st.sampled_from(["Equal", "Exists", "exists"])),
                    "value": maybe(scalars),
                    "effect": maybe(st.sampled_from(["NoSchedule", "NoExecute", "Never"])),
                }
            ),
        ),
        max_size=2,
    )
)

pods = st.one_of(
    garbage,
    st.builds(
        compact,
        st.fixed_dictionaries(
            {
                "metadata": metadata(),
                "spec": maybe(
                    st.builds(
                        compact,
                        st.fixed_dictionaries(
                            {
                                "containers": containers,
                                "initContainers": containers,
                                "overhead": resource_lists,
                                "priority": maybe(numbers),
                                "nodeName": maybe(names),
                                "schedulerName": maybe(text),
                                "nodeSelector": string_maps(scalars),
                                "affinity": affinity,
                                "tolerations": tolerations,
                            }
                        ),
                    )
                ),
            }
        ),
    ),
)
nodes = st.one_of(
    garbage,
    st.builds(
        compact,
        st.fixed_dictionaries(
            {
                "metadata": metadata(),
                "spec": maybe(
                    st.builds(
                        compact,
                        st.fixed_dictionaries(
                            {
                                "taints": maybe(
                                    st.lists(
                                        st.builds(
                                            compact,
                                            st.fixed_dictionaries(
                                                {
                                                    "key": maybe(text),
                                                    "value": maybe(scalars),
                                                    "effect": maybe(st.sampled_from(["NoSchedule", "Never"])),
                                                }
                                            ),
                                        ),
                                        max_size=2,
                                    )
                                ),
                                "unschedulable": maybe(st.booleans()),
                            }
                        ),
                    )
                ),
                "status": maybe(
                    st.builds(
                        compact, st.fixed_dictionaries({"allocatable": resource_lists, "capacity": resource_lists})
                    )
                ),
            }
        ),
    ),
)
podgroups = st.builds(
    compact,
    st.fixed_dictionaries(
        {
            "apiVersion": maybe(
                st.sampled_from(
                    [
                        "scheduling.x-k8s.io/v1alpha1",
                        "scheduling.sigs.k8s.io/v1alpha1",
                        "scheduling.volcano.sh/v1beta1",
                        "v1alpha1",
                    ]
                )
            ),
            "kind": st.just("PodGroup"),
            "metadata": metadata(),
            "spec": maybe(
                st.builds(
                    compact,
                    st.fixed_dictionaries(
                        {
                            "minMember": maybe(counts),
                            "scheduleTimeoutSeconds": maybe(durations),
                            "minResources": resource_lists,
                        }
                    ),
                )
            ),
        }
    ),
)
configmaps = st.builds(
    compact,
    st.fixed_dictionaries(
        {
            "apiVersion": maybe(st.just("v1")),
            "kind": st.just("ConfigMap"),
            "metadata": metadata(),
            "data": maybe(
                st.builds(
                    compact,
                    st.fixed_dictionaries({"minAvailable": maybe(counts), "scheduleTimeoutSeconds": maybe(durations)}),
                )
            ),
        }
    ),
)


def wire_accepts_gang(spec: Any) -> None:
    """A usable gang passes the services' checks; an invalid one is a placeholder its pods are refused by."""
    message = gang_to_pb(spec)
    message.SerializeToString()
    if not spec.invalid:
        assert gang_errors(message, "gang") == []


def refused_by_name(exc: IntakeError) -> None:
    """An intake error names the object's kind and, unless the whole thing is not an object, the field."""
    assert exc.kind and exc.name
    assert exc.field or "expected an object" in exc.message, exc
    assert len(str(exc)) < 2_000, "errors echo user values cut short"


# --- the properties --------------------------------------------------------------------------------


@INTAKE
@given(pods)
def test_any_pod_dict_gives_a_pod_that_fits_the_wire_or_a_named_error(raw: Any) -> None:
    try:
        pod = parse_pod(raw)
    except IntakeError as exc:
        refused_by_name(exc)
        return
    pod_to_pb(pod).SerializeToString()
    assert pod_errors(pod_to_pb(pod), "pod") == []
    # The gang declaration is read from the pod's own annotations and labels.
    resolution = GangResolver(default_wait_seconds=600.0).resolve(pod)
    if resolution.spec is not None:
        wire_accepts_gang(resolution.spec)


@INTAKE
@given(nodes)
def test_any_node_dict_gives_a_node_that_fits_the_wire_or_a_named_error(raw: Any) -> None:
    try:
        node = parse_node(raw)
    except IntakeError as exc:
        refused_by_name(exc)
        return
    node_to_pb(node).SerializeToString()
    assert node_errors(node_to_pb(node), "node") == []


@INTAKE
@given(st.one_of(podgroups, configmaps, garbage))
def test_any_gang_object_gives_a_gang_that_fits_the_wire_or_a_named_error(raw: Any) -> None:
    resolver = GangResolver()
    try:
        key = resolver.add_object(raw, created_at=0.0)
    except IntakeError as exc:
        refused_by_name(exc)
        return
    spec = resolver.gang(key)
    assert spec is not None
    wire_accepts_gang(spec)


@INTAKE
@given(st.one_of(podgroups, configmaps), pods)
def test_pods_resolve_against_any_gang_object_without_a_traceback(obj: Any, raw: Any) -> None:
    resolver = GangResolver()
    try:
        resolver.add_object(obj, created_at=0.0)
    except IntakeError as exc:
        refused_by_name(exc)
    try:
        pod = parse_pod(raw)
    except IntakeError as exc:
        refused_by_name(exc)
        return
    resolution = resolver.resolve(pod)
    if resolution.spec is not None:
        wire_accepts_gang(resolution.spec)
