"""InterPodAffinity over a real Snapshot (kube-scheduler's semantics), and the parser of pod affinity."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from phalanx.framework.framework import Framework
from phalanx.framework.plugin import PodRequest
from phalanx.framework.profile import Profile
from phalanx.framework.registry import Registry
from phalanx.framework.snapshot import Snapshot
from phalanx.intake.errors import IntakeError, Subject
from phalanx.intake.pod_affinity import parse_pod_affinity
from phalanx.model.objects import NodeInfo, PodInfo
from phalanx.model.pod_affinity import (
    LabelRequirement,
    LabelSelector,
    PodAffinitySpec,
    PodAffinityTerm,
    WeightedPodAffinityTerm,
)
from phalanx.plugins.inter_pod_affinity import (
    AFFINITY_REASON,
    ANTI_AFFINITY_REASON,
    EXISTING_ANTI_AFFINITY_REASON,
    InterPodAffinity,
    pod_index,
)

ZONE = "zone"
HOST = "kubernetes.io/hostname"


def apod(
    name: str, labels: dict[str, str] | None = None, spec: PodAffinitySpec | None = None, ns: str = "default"
) -> PodInfo:
    return PodInfo(ns, name, uid=name, labels=labels or {}, pod_affinity=spec)


def sel(**labels: str) -> LabelSelector:
    return LabelSelector(tuple(sorted(labels.items())))


def term(key: str = ZONE, selector: LabelSelector | None = None, **kw: Any) -> PodAffinityTerm:
    return PodAffinityTerm(key, selector, **kw)


def cluster(*pods: tuple[str, PodInfo], snap: Snapshot | None = None) -> Snapshot:
    """n1, n2 in zone a; n3 in zone b; n4 without a zone; `pods` tracked on their nodes."""
    snap = snap if snap is not None else Snapshot()  # an empty Snapshot is falsy (len 0)
    snap.set_nodes(
        [
            NodeInfo("n1", labels={ZONE: "a", HOST: "n1"}),
            NodeInfo("n2", labels={ZONE: "a", HOST: "n2"}),
            NodeInfo("n3", labels={ZONE: "b", HOST: "n3"}),
            NodeInfo("n4", labels={HOST: "n4"}),
        ],
        {},
    )
    for node, p in pods:
        snap.track_pod(node, p)
    return snap


def allowed(p: PodInfo, snap: Snapshot) -> list[str]:
    mask = InterPodAffinity().filter(PodRequest.of(p, snap), snap)
    assert mask.dtype == bool and mask.shape == (len(snap),)
    return [snap.nodes[i].name for i in np.flatnonzero(mask)]


def reasons(p: PodInfo, snap: Snapshot) -> dict[str, int]:
    req = PodRequest.of(p, snap)
    rejected = ~InterPodAffinity().filter(req, snap)
    return dict(InterPodAffinity().explain(req, snap, rejected))


def scores(p: PodInfo, snap: Snapshot) -> list[float]:
    return InterPodAffinity().score(PodRequest.of(p, snap), snap, np.arange(len(snap))).tolist()


# -- required affinity -------------------------------------------------------------------------------


def test_required_affinity_needs_a_matching_pod_in_the_domain() -> None:
    snap = cluster(("n1", apod("db", {"app": "db"})))
    p = apod("web", {"app": "web"}, PodAffinitySpec(required_affinity=(term(ZONE, sel(app="db")),)))
    assert allowed(p, snap) == ["n1", "n2"]  # n3: other zone; n4: no zone label
    assert reasons(p, snap) == {AFFINITY_REASON: 2}


def test_required_affinity_terms_are_anded_and_a_pod_must_match_them_all() -> None:
    both = PodAffinitySpec(required_affinity=(term(ZONE, sel(app="db")), term(HOST, sel(tier="x"))))
    snap = cluster(("n1", apod("db", {"app": "db"})), ("n2", apod("x", {"tier": "x"})))
    assert allowed(apod("w", spec=both), snap) == []  # no single pod matches both terms
    snap.track_pod("n2", apod("dbx", {"app": "db", "tier": "x"}))
    assert allowed(apod("w", spec=both), snap) == ["n2"]


def test_the_first_pod_of_a_self_affine_group_may_go_anywhere_labelled() -> None:
    spec = PodAffinitySpec(required_affinity=(term(ZONE, sel(app="db")),))
    snap = cluster(("n1", apod("web", {"app": "web"})))
    assert allowed(apod("db-0", {"app": "db"}, spec), snap) == ["n1", "n2", "n3"]  # n4 lacks the zone label
    assert allowed(apod("other", {"app": "other"}, spec), snap) == []  # does not match its own term
    # Once one exists, the rule binds the others to its zone.
    snap.track_pod("n3", apod("db-0", {"app": "db"}, spec))
    assert allowed(apod("db-1", {"app": "db"}, spec), snap) == ["n3"]


def test_affinity_counts_pods_of_the_terms_namespaces_only() -> None:
    snap = cluster(("n3", apod("db", {"app": "db"}, ns="data")))
    own_ns = PodAffinitySpec(required_affinity=(term(ZONE, sel(app="db")),))
    listed = PodAffinitySpec(required_affinity=(term(ZONE, sel(app="db"), namespaces=("data",)),))
    every = PodAffinitySpec(required_affinity=(term(ZONE, sel(app="db"), namespace_selector=LabelSelector()),))
    assert allowed(apod("w", spec=own_ns), snap) == []
    assert allowed(apod("w", spec=listed), snap) == ["n3"]
    assert allowed(apod("w", spec=every), snap) == ["n3"]


def test_a_term_without_a_label_selector_matches_no_pod() -> None:
    snap = cluster(("n1", apod("db", {"app": "db"})))
    assert allowed(apod("w", spec=PodAffinitySpec(required_affinity=(term(ZONE, None),))), snap) == []


# -- required anti-affinity ---------------------------------------------------------------------------


def test_required_anti_affinity_keeps_out_of_domains_with_a_matching_pod() -> None:
    snap = cluster(("n1", apod("web-0", {"app": "web"})))
    p = apod("web-1", {"app": "web"}, PodAffinitySpec(required_anti_affinity=(term(ZONE, sel(app="web")),)))
    assert allowed(p, snap) == ["n3", "n4"]  # n4 has no zone: in no domain, so nothing to avoid
    assert reasons(p, snap) == {ANTI_AFFINITY_REASON: 2}


def test_expressions_in_selectors() -> None:
    snap = cluster(("n1", apod("a", {"app": "web", "v": "1"})), ("n3", apod("b", {"app": "web"})))
    no_v = LabelSelector(match_expressions=(LabelRequirement("v", "DoesNotExist"),))
    p = apod("p", spec=PodAffinitySpec(required_anti_affinity=(term(HOST, no_v),)))
    assert allowed(p, snap) == ["n1", "n2", "n4"]  # only b (on n3) lacks v
    not_two = LabelSelector(match_expressions=(LabelRequirement("v", "NotIn", ("2",)),))
    assert allowed(apod("p", spec=PodAffinitySpec(required_anti_affinity=(term(HOST, not_two),))), snap) == ["n2", "n4"]


def test_existing_pods_anti_affinity_is_symmetric() -> None:
    loner = apod("loner", {"app": "db"}, PodAffinitySpec(required_anti_affinity=(term(ZONE, sel(app="web")),)))
    snap = cluster(("n3", loner))
    assert allowed(apod("web", {"app": "web"}), snap) == ["n1", "n2", "n4"]
    assert reasons(apod("web", {"app": "web"}), snap) == {EXISTING_ANTI_AFFINITY_REASON: 1}
    assert allowed(apod("api", {"app": "api"}), snap) == ["n1", "n2", "n3", "n4"]
    # The existing pod's term looks in its own namespace only.
    assert allowed(apod("web", {"app": "web"}, ns="other"), snap) == ["n1", "n2", "n3", "n4"]
    snap.untrack_pod("n3", loner)
    assert allowed(apod("web", {"app": "web"}), snap) == ["n1", "n2", "n3", "n4"]


def test_reasons_count_each_node_once_in_upstreams_order() -> None:
    loner = apod("loner", {"app": "db"}, PodAffinitySpec(required_anti_affinity=(term(HOST, sel(app="web")),)))
    snap = cluster(("n1", loner), ("n3", apod("cache", {"app": "cache"})))
    spec = PodAffinitySpec(
        required_affinity=(term(ZONE, sel(app="db")),), required_anti_affinity=(term(ZONE, sel(app="cache")),)
    )
    p = apod("web", {"app": "web"}, spec)
    assert allowed(p, snap) == ["n2"]
    assert reasons(p, snap) == {AFFINITY_REASON: 2, EXISTING_ANTI_AFFINITY_REASON: 1}


def test_a_gangs_own_pods_placed_earlier_count() -> None:
    snap = cluster()
    spec = PodAffinitySpec(required_anti_affinity=(term(HOST, sel(job="train")),))
    placed: list[str] = []
    for i in range(4):
        p = apod(f"w{i}", {"job": "train"}, spec)
        node = allowed(p, snap)[0]
        snap.reserve(snap.index[node], {}, pod=p)  # what the scheduler does with each placed pod
        placed.append(node)
    assert placed == ["n1", "n2", "n3", "n4"]
    assert allowed(apod("w4", {"job": "train"}, spec), snap) == []


# -- pods without a spec, and the index ---------------------------------------------------------------


def test_a_pod_without_a_spec_passes_everywhere_and_scores_zero() -> None:
    snap = cluster(("n1", apod("db", {"app": "db"})))
    p = apod("plain", {"app": "web"})
    assert p.pod_affinity is None and PodInfo("default", "x").pod_affinity is None
    assert allowed(p, snap) == ["n1", "n2", "n3", "n4"]
    assert scores(p, snap) == [0, 0, 0, 0]
    assert not pod_index(snap).anti and not pod_index(snap).attract


def test_the_index_follows_pods_and_node_changes() -> None:
    snap = cluster(snap=Snapshot())
    spec = PodAffinitySpec(required_anti_affinity=(term(ZONE, sel(app="web")),))
    p = apod("p", {"app": "web"}, spec)
    assert allowed(p, snap) == ["n1", "n2", "n3", "n4"]
    web = apod("web", {"app": "web"})
    snap.track_pod("n3", web)
    assert allowed(p, snap) == ["n1", "n2", "n4"]
    snap.untrack_pod("n3", web)
    snap.track_pod("n2", web)
    assert allowed(p, snap) == ["n3", "n4"]
    snap.untrack_pod("n2", web)
    snap.track_pod("n2", apod("web", {"app": "api"}))  # the same key, relabelled: no longer matches
    assert allowed(p, snap) == ["n1", "n2", "n3", "n4"]
    snap.untrack_pod("n2", apod("web"))
    snap.track_pod("n2", web)
    snap.upsert_nodes([NodeInfo("n0", labels={ZONE: "b"})])  # rows move: rebuilt for the new generation
    assert allowed(p, snap) == ["n0", "n3", "n4"]
    snap.clear_pods()
    assert allowed(p, snap) == ["n0", "n1", "n2", "n3", "n4"]


# -- preferred terms (score) ----------------------------------------------------------------------------


def test_preferred_terms_add_and_subtract_their_weights_per_domain() -> None:
    snap = cluster(("n1", apod("cache", {"app": "cache"})))
    spec = PodAffinitySpec(
        preferred_affinity=(WeightedPodAffinityTerm(10, term(ZONE, sel(app="cache"))),),
        preferred_anti_affinity=(WeightedPodAffinityTerm(5, term(HOST, sel(app="cache"))),),
    )
    # Raw: n1 10 - 5, n2 10, n3 0, n4 0; normalised min..max to 0..100.
    assert scores(apod("web", spec=spec), snap) == [50, 100, 0, 0]
    candidates = np.array([0, 2])  # normalised over the candidates only
    assert InterPodAffinity().score(PodRequest.of(apod("web", spec=spec), snap), snap, candidates).tolist() == [100, 0]


def test_equal_raw_scores_normalise_to_zero() -> None:
    spec = PodAffinitySpec(preferred_affinity=(WeightedPodAffinityTerm(10, term(ZONE, sel(app="cache"))),))
    assert scores(apod("web", spec=spec), cluster()) == [0, 0, 0, 0]


def test_existing_pods_terms_score_the_incoming_pod_symmetrically() -> None:
    likes_web = apod(
        "a", spec=PodAffinitySpec(preferred_affinity=(WeightedPodAffinityTerm(20, term(ZONE, sel(app="web"))),))
    )
    needs_web = apod("b", spec=PodAffinitySpec(required_affinity=(term(HOST, sel(app="web")),)))
    hates_web = apod(
        "c", spec=PodAffinitySpec(preferred_anti_affinity=(WeightedPodAffinityTerm(7, term(HOST, sel(app="web"))),))
    )
    snap = cluster(("n3", likes_web), ("n1", needs_web), ("n2", hates_web))
    # Raw: n1 +1 (hard weight), n2 -7, n3 +20, n4 0.
    assert scores(apod("web", {"app": "web"}), snap) == [29, 0, 100, 25]
    assert scores(apod("api", {"app": "api"}), snap) == [0, 0, 0, 0]


# -- end to end through the framework ------------------------------------------------------------------


def test_the_framework_reports_affinity_failures_as_kube_scheduler_does() -> None:
    filters: Registry[Any] = Registry("filter")
    filters.register(InterPodAffinity.name, InterPodAffinity)
    scores_: Registry[Any] = Registry("score")
    scores_.register(InterPodAffinity.name, InterPodAffinity)
    fw = Framework(
        Profile(filters=("InterPodAffinity",), scores={"InterPodAffinity": 1}, node_preparers=()), (filters, scores_)
    )
    snap = cluster(("n3", apod("web-0", {"app": "web"})))
    spec = PodAffinitySpec(required_affinity=(term(ZONE, sel(app="db")),))
    res = fw.place(apod("w", spec=spec), snap)
    assert res.message == "0/4 nodes are available: 4 node(s) didn't match pod affinity rules"
    prefer = PodAffinitySpec(preferred_affinity=(WeightedPodAffinityTerm(3, term(ZONE, sel(app="web"))),))
    assert snap.nodes[fw.place(apod("w", spec=prefer), snap).node_index or 0].name == "n3"


# -- parsing ------------------------------------------------------------------------------------------------

SUBJECT = Subject("Pod", "default", "p")


def parse(spec: dict[str, Any]) -> PodAffinitySpec | None:
    return parse_pod_affinity(spec, SUBJECT)


def test_parse_full_affinity() -> None:
    spec = {
        "affinity": {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": ZONE, "namespaces": ["data"]}
                ],
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 5,
                        "podAffinityTerm": {"labelSelector": {}, "topologyKey": HOST, "namespaceSelector": {}},
                    }
                ],
            },
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]},
                        "topologyKey": HOST,
                    }
                ]
            },
        }
    }
    assert parse(spec) == PodAffinitySpec(
        required_affinity=(term(ZONE, sel(app="db"), namespaces=("data",)),),
        preferred_affinity=(
            WeightedPodAffinityTerm(5, term(HOST, LabelSelector(), namespace_selector=LabelSelector())),
        ),
        required_anti_affinity=(
            term(HOST, LabelSelector(match_expressions=(LabelRequirement("app", "In", ("web",)),))),
        ),
    )


def test_parse_reads_snake_case_and_returns_none_without_rules() -> None:
    assert parse({}) is None
    assert parse({"affinity": {"nodeAffinity": {}}}) is None
    snake = {
        "affinity": {
            "pod_anti_affinity": {"required_during_scheduling_ignored_during_execution": [{"topology_key": HOST}]}
        }
    }
    assert parse(snake) == PodAffinitySpec(required_anti_affinity=(term(HOST, None),))


_AA = "spec.affinity.podAntiAffinity"
_REQ = "requiredDuringSchedulingIgnoredDuringExecution"
_PREF = "preferredDuringSchedulingIgnoredDuringExecution"


@pytest.mark.parametrize(
    "rules, expected",
    [
        ({_REQ: [{"labelSelector": {}}]}, f"{_AA}.{_REQ}[0].topologyKey: is required"),
        ({_REQ: "x"}, f"{_AA}.{_REQ}: expected a list, got str"),
        (
            {_PREF: [{"weight": 101, "podAffinityTerm": {"topologyKey": HOST}}]},
            f"{_AA}.{_PREF}[0].weight: must be an integer from 1 to 100, got 101",
        ),
        ({_PREF: [{"weight": 1}]}, f"{_AA}.{_PREF}[0].podAffinityTerm: is required"),
        (
            {_REQ: [{"topologyKey": HOST, "labelSelector": {"matchExpressions": [{"key": "a", "operator": "in"}]}}]},
            f'{_AA}.{_REQ}[0].labelSelector.matchExpressions[0].operator: "in" is not one of',
        ),
        (
            {_REQ: [{"topologyKey": HOST, "labelSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}]},
            f"{_AA}.{_REQ}[0].labelSelector.matchExpressions[0].values: must be non-empty for operator In",
        ),
        (
            {
                _REQ: [
                    {
                        "topologyKey": HOST,
                        "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
                    }
                ]
            },
            f"{_AA}.{_REQ}[0].labelSelector.matchExpressions[0].values: must be empty for operator Exists",
        ),
        (
            {_REQ: [{"topologyKey": HOST, "namespaceSelector": {"matchLabels": {"team": "a"}}}]},
            f'{_AA}.{_REQ}[0].namespaceSelector: label "team" is not supported',
        ),
    ],
)
def test_parse_errors_name_the_pod_and_the_field(rules: dict[str, Any], expected: str) -> None:
    with pytest.raises(IntakeError) as err:
        parse({"affinity": {"podAntiAffinity": rules}})
    assert isinstance(err.value, ValueError)
    assert str(err.value).startswith(f"Pod default/p: {expected}")


def test_a_namespace_selector_on_namespace_names_works() -> None:
    by_name = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["data"]}]}
    spec = parse(
        {
            "affinity": {
                "podAffinity": {_REQ: [{"topologyKey": ZONE, "labelSelector": {}, "namespaceSelector": by_name}]}
            }
        }
    )
    snap = cluster(("n3", apod("db", ns="data")), ("n1", apod("x", ns="else")))
    assert allowed(apod("w", spec=spec), snap) == ["n3"]
