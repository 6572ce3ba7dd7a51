"""The chaos suite's checks on hand-made snapshots and Redis records: each kind of violation is found, and
legitimate states (a reservation of a waiting pod, a finished pod, a gang mid-bind) are not reported."""

from __future__ import annotations

from phalanx.chaos import invariants as inv
from phalanx.chaos.invariants import GangWatch
from phalanx.chaos.snapshot import NodeView, PodView, Snapshot, pod_view
from phalanx.model.gpu import GPU

CPU1 = {"cpu": 1000}
GPU1 = {"cpu": 500, GPU: 1000}


def pod(
    name: str,
    node: str = "",
    phase: str = "",
    requests: dict[str, int] | None = None,
    gang: str = "ns/g",
    min_available: int = 2,
) -> PodView:
    return PodView(
        "ns",
        name,
        gang,
        min_available,
        node,
        phase or ("Running" if node else "Pending"),
        False,
        dict(requests or GPU1),
    )


def snapshot(at: float, *pods: PodView, nodes: dict[str, dict[str, int]] | None = None) -> Snapshot:
    nodes = nodes if nodes is not None else {"n1": {"cpu": 4000, GPU: 2000}, "n2": {"cpu": 4000, GPU: 2000}}
    return Snapshot(at, {p.key: p for p in pods}, {n: NodeView(n, a) for n, a in nodes.items()})


def kinds(found: list[inv.Violation]) -> list[str]:
    return sorted(v.kind for v in found)


# --- partial gangs ---------------------------------------------------------------------------------------


def test_a_partial_gang_is_reported_only_after_the_grace() -> None:
    watch = GangWatch({"ns/g": 2}, grace_seconds=10)
    assert watch.observe(snapshot(0, pod("a", "n1"), pod("b")), calm_since=0) == []
    assert watch.observe(snapshot(9, pod("a", "n1"), pod("b")), calm_since=0) == []
    found = watch.observe(snapshot(11, pod("a", "n1"), pod("b")), calm_since=0)
    assert kinds(found) == [inv.PARTIAL_GANG]
    assert "ns/g: 1/2" in found[0].message


def test_the_grace_restarts_when_the_stack_is_whole_again_and_nothing_is_judged_while_down() -> None:
    watch = GangWatch({"ns/g": 2}, grace_seconds=10)
    watch.observe(snapshot(0, pod("a", "n1"), pod("b")), calm_since=0)
    assert watch.observe(snapshot(20, pod("a", "n1"), pod("b")), calm_since=None) == []  # a process is down
    assert watch.observe(snapshot(25, pod("a", "n1"), pod("b")), calm_since=18) == []  # back at 18: 7 s
    assert kinds(watch.observe(snapshot(29, pod("a", "n1"), pod("b")), calm_since=18)) == [inv.PARTIAL_GANG]


def test_a_gang_that_was_whole_stays_whole_after_its_pods_end() -> None:
    watch = GangWatch({"ns/g": 2}, grace_seconds=1)
    watch.observe(snapshot(0, pod("a", "n1"), pod("b", "n2")), calm_since=0)
    assert watch.observe(snapshot(5, pod("b", "n2", "Succeeded")), calm_since=0) == []  # a deleted
    assert watch.bound_gangs() == {"ns/g"}
    assert inv.check_all_bound(watch) == []
    assert watch.first_binding_after(-1) == 0


def test_a_gang_never_bound_is_reported_at_the_end() -> None:
    watch = GangWatch({"ns/g": 2, "ns/h": 3})
    watch.observe(snapshot(0, pod("a", "n1"), pod("b", "n2")), calm_since=0)
    found = inv.check_all_bound(watch)
    assert [v.subject for v in found] == ["ns/h"] and "0/3" in found[0].message


# --- capacity ----------------------------------------------------------------------------------------------


def test_an_overcommitted_node_is_reported_per_resource() -> None:
    found = inv.check_capacity(snapshot(0, pod("a", "n1"), pod("b", "n1"), pod("c", "n1")))
    assert kinds(found) == [inv.OVERCOMMIT]
    assert found[0].subject == f"n1/{GPU}" and "3 requested" in found[0].message


def test_finished_pods_do_not_count_against_their_node() -> None:
    snap = snapshot(0, pod("a", "n1"), pod("b", "n1"), pod("c", "n1", "Succeeded"), pod("d", "n1", "Failed"))
    assert inv.check_capacity(snap) == []


def test_a_pod_bound_to_a_node_that_does_not_exist_is_reported() -> None:
    found = inv.check_capacity(snapshot(0, pod("a", "gone")))
    assert kinds(found) == [inv.MISSING_NODE] and "gone" in found[0].message


# --- Redis against the API server ------------------------------------------------------------------------


def used_of(*entries: tuple[str, dict[str, int]]) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for node, req in entries:
        for res, milli in req.items():
            out[(node, res)] = out.get((node, res), 0) + milli
    return out


def test_redis_that_agrees_is_clean_including_reservations_of_waiting_pods() -> None:
    snap = snapshot(0, pod("a", "n1"), pod("b"), pod("c", "n2", "Succeeded"))
    records = {"ns/a": ("n1", "bound"), "ns/b": ("n2", "assumed")}
    assert inv.check_redis(snap, records, used_of(("n1", GPU1), ("n2", GPU1))) == []


def test_redis_records_of_gone_or_finished_pods_are_orphans() -> None:
    snap = snapshot(0, pod("c", "n2", "Succeeded"))
    records = {"ns/gone": ("n1", "bound"), "ns/c": ("n2", "bound")}
    found = inv.check_redis(snap, records, used_of(("n1", GPU1), ("n2", GPU1)))
    assert kinds(found) == [
        inv.REDIS_ORPHAN,
        inv.REDIS_ORPHAN,
        inv.REDIS_USAGE,
        inv.REDIS_USAGE,
        inv.REDIS_USAGE,
        inv.REDIS_USAGE,
    ]


def test_a_reservation_left_assumed_for_a_bound_pod_is_stale() -> None:
    snap = snapshot(0, pod("a", "n1"))
    found = inv.check_redis(snap, {"ns/a": ("n1", "assumed")}, used_of(("n1", GPU1)))
    assert kinds(found) == [inv.REDIS_STALE]
    found = inv.check_redis(snap, {"ns/a": ("n1", "binding")}, used_of(("n1", GPU1)))
    assert kinds(found) == [inv.REDIS_STALE]


def test_a_bound_pod_missing_from_redis_or_on_another_node_is_reported() -> None:
    snap = snapshot(0, pod("a", "n1"), pod("b", "n2"))
    found = inv.check_redis(snap, {"ns/b": ("n1", "bound")}, used_of(("n1", GPU1), ("n2", GPU1)))
    assert kinds(found) == [inv.REDIS_MISSING, inv.REDIS_WRONG_NODE]  # usage agrees: a on n1, b on n2


def test_usage_drift_names_node_resource_and_both_amounts() -> None:
    snap = snapshot(0, pod("a", "n1"))
    found = inv.check_redis(snap, {"ns/a": ("n1", "bound")}, {("n1", "cpu"): 500, ("n1", GPU): 3000})
    assert kinds(found) == [inv.REDIS_USAGE]
    assert found[0].subject == f"n1/{GPU}" and "uses 3" in found[0].message and "hold 1" in found[0].message


def test_a_record_bound_for_a_pod_that_is_not_bound_is_stale() -> None:
    found = inv.check_redis(snapshot(0, pod("a")), {"ns/a": ("n1", "bound")}, used_of(("n1", GPU1)))
    assert inv.REDIS_STALE in kinds(found)


def test_dedupe_reports_each_kind_and_subject_once() -> None:
    seen: set[tuple[str, str]] = set()
    v = inv.Violation(inv.OVERCOMMIT, "n1/cpu", "x")
    assert inv.dedupe(seen, [v, v]) == [v]
    assert inv.dedupe(seen, [v]) == []


# --- reading API objects ----------------------------------------------------------------------------------


def test_pod_view_reads_gang_requests_and_limits() -> None:
    obj = {
        "metadata": {
            "namespace": "ns",
            "name": "w-0",
            "annotations": {
                "gang.scheduling.koordinator.sh/name": "w",
                "gang.scheduling.koordinator.sh/min-available": "4",
            },
        },
        "spec": {"nodeName": "n1", "containers": [{"resources": {"requests": {"cpu": "500m"}, "limits": {GPU: "1"}}}]},
        "status": {"phase": "Running"},
    }
    view = pod_view(obj)
    assert (view.key, view.gang, view.min_available, view.node) == ("ns/w-0", "ns/w", 4, "n1")
    assert view.requests == {"cpu": 500, GPU: 1000} and view.holds_node


def test_ports_picked_together_are_distinct() -> None:
    from phalanx.testing.ports import free_ports

    ports = free_ports(64)
    assert len(set(ports)) == 64
