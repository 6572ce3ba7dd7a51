"""PodTopologySpread over a real Snapshot (kube-scheduler's semantics), and the parser of its constraints."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from phalanx.framework.plugin import PodRequest
from phalanx.framework.snapshot import Snapshot
from phalanx.intake.errors import IntakeError, Subject
from phalanx.intake.pod_affinity import parse_pod_affinity
from phalanx.model.objects import NodeInfo, Placement, PodInfo, Taint, Toleration
from phalanx.model.pod_affinity import (
    LabelRequirement,
    LabelSelector,
    PodAffinitySpec,
    TopologySpreadConstraint,
)
from phalanx.plugins.topology_spread import MISSING_LABEL_REASON, SPREAD_REASON, PodTopologySpread

ZONE = "zone"
HOST = "kubernetes.io/hostname"
WEB = LabelSelector((("app", "web"),))


def spread(
    max_skew: int = 1, key: str = ZONE, when: str = "DoNotSchedule", selector: LabelSelector | None = WEB, **kw: Any
) -> TopologySpreadConstraint:
    return TopologySpreadConstraint(max_skew, key, when, selector, **kw)


def apod(
    name: str,
    labels: dict[str, str] | None = None,
    *constraints: TopologySpreadConstraint,
    placement: Placement | None = None,
    ns: str = "default",
) -> PodInfo:
    spec = PodAffinitySpec(spread=constraints) if constraints else None
    return PodInfo(ns, name, uid=name, labels=labels or {}, placement=placement or Placement(), pod_affinity=spec)


def web(name: str, *constraints: TopologySpreadConstraint, **kw: Any) -> PodInfo:
    return apod(name, {"app": "web"}, *constraints, **kw)


def cluster(*pods: tuple[str, PodInfo], taint_b: bool = False) -> Snapshot:
    """a1, a2 in zone a; b1 in zone b (tainted if asked); x without a zone; `pods` tracked on their nodes."""
    snap = Snapshot()
    taints = (Taint("dedicated", "x"),) if taint_b else ()
    snap.set_nodes(
        [
            NodeInfo("a1", labels={ZONE: "a", HOST: "a1"}),
            NodeInfo("a2", labels={ZONE: "a", HOST: "a2"}),
            NodeInfo("b1", labels={ZONE: "b", HOST: "b1"}, taints=taints),
            NodeInfo("x", labels={HOST: "x"}),
        ],
        {},
    )
    for node, p in pods:
        snap.track_pod(node, p)
    return snap


def allowed(p: PodInfo, snap: Snapshot) -> list[str]:
    mask = PodTopologySpread().filter(PodRequest.of(p, snap), snap)
    assert mask.dtype == bool and mask.shape == (len(snap),)
    return [snap.nodes[i].name for i in np.flatnonzero(mask)]


def reasons(p: PodInfo, snap: Snapshot) -> dict[str, int]:
    req = PodRequest.of(p, snap)
    return dict(PodTopologySpread().explain(req, snap, ~PodTopologySpread().filter(req, snap)))


def scores(p: PodInfo, snap: Snapshot, candidates: list[int] | None = None) -> list[float]:
    chosen = np.arange(len(snap)) if candidates is None else np.array(candidates, dtype=np.intp)
    return PodTopologySpread().score(PodRequest.of(p, snap), snap, chosen).tolist()


TWO_IN_A = (("a1", web("w0")), ("a2", web("w1")))


# -- DoNotSchedule ----------------------------------------------------------------------------------------


def test_skew_counts_the_domain_plus_the_pod_against_the_emptiest_domain() -> None:
    snap = cluster(*TWO_IN_A)
    p = web("p", spread(1))
    assert allowed(p, snap) == ["b1"]  # zone a: 2 + 1 - 0 > 1; x has no zone
    assert reasons(p, snap) == {SPREAD_REASON: 2, MISSING_LABEL_REASON: 1}
    assert allowed(web("p", spread(3)), snap) == ["a1", "a2", "b1"]


def test_a_pod_its_own_selector_does_not_match_does_not_add_itself() -> None:
    snap = cluster(*TWO_IN_A)
    assert allowed(web("p", spread(2)), snap) == ["b1"]  # 2 + 1 - 0 > 2
    assert allowed(apod("p", {"app": "api"}, spread(2)), snap) == ["a1", "a2", "b1"]  # 2 + 0 - 0 <= 2


def test_only_pods_of_the_pods_namespace_count() -> None:
    snap = cluster(("a1", web("w0", ns="other")), ("a2", web("w1", ns="other")))
    assert allowed(web("p", spread(1)), snap) == ["a1", "a2", "b1"]


def test_eligible_domains_are_those_of_nodes_passing_the_pods_node_affinity() -> None:
    snap = cluster(*TWO_IN_A)
    in_a = Placement(node_selector=((ZONE, "a"),))
    # Zone b is not eligible, so the minimum is zone a's 2: 2 + 1 - 2 <= 1.
    assert allowed(web("p", spread(1), placement=in_a), snap) == ["a1", "a2", "b1"]
    ignored = spread(1, node_affinity_policy="Ignore")
    assert allowed(web("p", ignored, placement=in_a), snap) == ["b1"]


def test_taints_policy_honor_leaves_out_untolerated_nodes() -> None:
    snap = cluster(*TWO_IN_A, taint_b=True)
    assert allowed(web("p", spread(1)), snap) == ["b1"]  # Ignore (default): zone b counts, with 0
    assert allowed(web("p", spread(1, node_taints_policy="Honor")), snap) == ["a1", "a2", "b1"]
    tolerant = Placement(tolerations=(Toleration("dedicated", "Exists"),))
    assert allowed(web("p", spread(1, node_taints_policy="Honor"), placement=tolerant), snap) == ["b1"]


def test_min_domains_counts_missing_domains_as_empty() -> None:
    snap = cluster(("a1", web("w0")), ("b1", web("w1")))
    assert allowed(web("p", spread(1)), snap) == ["a1", "a2", "b1"]  # 1 + 1 - 1 <= 1
    assert allowed(web("p", spread(1, min_domains=3)), snap) == []  # 2 domains < 3: minimum 0
    assert allowed(web("p", spread(1, min_domains=2)), snap) == ["a1", "a2", "b1"]


def test_every_hard_constraint_must_hold_and_every_key_be_present() -> None:
    snap = cluster(("a1", web("w0")))
    both = (spread(1, ZONE), spread(1, HOST))
    # Zone: a 1+1-0 > 1 ... zone b is the emptiest; hostname: b1 0+1-0 <= 1.
    assert allowed(web("p", *both), snap) == ["b1"]
    assert allowed(web("p", spread(1, "rack")), snap) == []
    assert reasons(web("p", spread(1, "rack")), snap) == {MISSING_LABEL_REASON: 4}


def test_match_label_keys_narrow_the_selector_to_the_pods_own_values() -> None:
    snap = cluster(("a1", apod("w0", {"app": "web", "rev": "1"})), ("a2", apod("w1", {"app": "web", "rev": "1"})))
    c = spread(1, match_label_keys=("rev",))
    assert allowed(apod("p", {"app": "web", "rev": "2"}, c), snap) == ["a1", "a2", "b1"]
    assert allowed(apod("p", {"app": "web", "rev": "1"}, c), snap) == ["b1"]


def test_a_gang_spreads_as_its_own_pods_are_placed() -> None:
    snap = cluster()
    placed = []
    for i in range(4):
        p = web(f"w{i}", spread(1))
        node = allowed(p, snap)[0]
        snap.reserve(snap.index[node], {}, pod=p)
        placed.append(node)
    assert placed == ["a1", "b1", "a1", "b1"]


def test_pods_without_constraints_pass_and_score_zero() -> None:
    snap = cluster(*TWO_IN_A)
    assert allowed(web("p"), snap) == ["a1", "a2", "b1", "x"]
    assert scores(web("p"), snap) == [0, 0, 0, 0]
    # ScheduleAnyway constraints never filter; DoNotSchedule ones never score.
    assert allowed(web("p", spread(1, when="ScheduleAnyway")), snap) == ["a1", "a2", "b1", "x"]
    assert scores(web("p", spread(1)), snap) == [0, 0, 0, 0]


# -- ScheduleAnyway ----------------------------------------------------------------------------------------


def test_schedule_anyway_prefers_emptier_domains() -> None:
    snap = cluster(*TWO_IN_A)
    p = web("p", spread(1, when="ScheduleAnyway"))
    # Raw: zone a 2 * log(2 + 2) = 2.77 -> 3, zone b 0; x lacks the key and scores 0.
    assert scores(p, snap) == [0, 0, 100, 0]
    # Normalised over the candidates only: (max + min - raw) / max.
    assert scores(p, snap, [0, 1]) == [100, 100]


def test_schedule_anyway_on_hostnames_counts_each_node() -> None:
    snap = cluster(("a1", web("w0")), ("a1", web("w1")), ("a2", web("w2")))
    p = web("p", spread(2, HOST, when="ScheduleAnyway"))
    # Raw: count * log(4 + 2) + (2 - 1): a1 2*1.79+1 = 5, a2 3, b1 1, x 1; 100 * (5 + 1 - raw) / 5.
    assert scores(p, snap) == [20, 60, 100, 100]


# -- parsing ------------------------------------------------------------------------------------------------

SUBJECT = Subject("Pod", "ns", "name")
PATH = "spec.topologySpreadConstraints"


def parse_constraints(*items: dict[str, Any]) -> tuple[TopologySpreadConstraint, ...]:
    parsed = parse_pod_affinity({"topologySpreadConstraints": list(items)}, SUBJECT)
    assert parsed is not None
    return parsed.spread


def test_parse_constraints() -> None:
    raw = {
        "maxSkew": 2,
        "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "v", "operator": "Exists"}]},
        "minDomains": 3,
        "matchLabelKeys": ["rev"],
        "nodeTaintsPolicy": "Honor",
    }
    selector = LabelSelector((("app", "web"),), (LabelRequirement("v", "Exists"),))
    assert parse_constraints(raw) == (
        TopologySpreadConstraint(2, ZONE, "DoNotSchedule", selector, 3, ("rev",), "Honor", "Honor"),
    )
    snake = {"max_skew": 1, "topology_key": HOST, "when_unsatisfiable": "ScheduleAnyway"}
    assert parse_constraints(snake) == (TopologySpreadConstraint(1, HOST, "ScheduleAnyway"),)


GOOD = {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}


@pytest.mark.parametrize(
    "items, expected",
    [
        ([{**GOOD, "maxSkew": 0}], f"{PATH}[0].maxSkew: must be an integer >= 1, got 0"),
        ([GOOD, {**GOOD, "topologyKey": HOST, "maxSkew": "1"}], f'{PATH}[1].maxSkew: must be an integer >= 1, got "1"'),
        ([{**GOOD, "maxSkew": True}], f"{PATH}[0].maxSkew: must be an integer >= 1, got True"),
        ([{"topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}], f"{PATH}[0].maxSkew: is required"),
        (
            [{**GOOD, "topologyKey": ""}],
            f"{PATH}[0].topologyKey: is required (a node label key, e.g. topology.kubernetes.io/zone)",
        ),
        (
            [{**GOOD, "whenUnsatisfiable": "Sometimes"}],
            f'{PATH}[0].whenUnsatisfiable: "Sometimes" is not one of DoNotSchedule, ScheduleAnyway',
        ),
        ([{**GOOD, "minDomains": 0}], f"{PATH}[0].minDomains: must be an integer >= 1, got 0"),
        (
            [{**GOOD, "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 2}],
            f"{PATH}[0].minDomains: may only be set when whenUnsatisfiable is DoNotSchedule",
        ),
        (
            [{**GOOD, "nodeAffinityPolicy": "honor"}],
            f'{PATH}[0].nodeAffinityPolicy: "honor" is not one of Honor, Ignore',
        ),
        ([GOOD, GOOD], f'{PATH}[1]: duplicate constraint on topologyKey "zone" with whenUnsatisfiable DoNotSchedule'),
        (
            [{**GOOD, "labelSelector": {"matchLabels": "app=web"}}],
            f"{PATH}[0].labelSelector.matchLabels: expected a mapping, got str",
        ),
        ([{**GOOD, "matchLabelKeys": [3]}], f"{PATH}[0].matchLabelKeys[0]: expected a string, got 3"),
        (["x"], f"{PATH}[0]: expected a mapping, got str"),
    ],
)
def test_parse_errors_name_the_pod_and_the_field(items: list[Any], expected: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_constraints(*items)
    assert isinstance(err.value, IntakeError)
    assert str(err.value) == f"Pod ns/name: {expected}"
