"""Reasons reduced to causes (names taken out from what the report knows, numbers become N), each gang's
reason in the report, the text summary, and the one duration format every report uses."""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.model.objects import GangMode, GangSpec
from phalanx.report import causes, units
from phalanx.report.compare import compare_rows
from phalanx.report.summary import summary_lines
from phalanx.sim.report import build_report
from phalanx.sim.tracks import PodTrack, SimResult


# -- causes ---------------------------------------------------------------------------------------------
def test_names_are_taken_out_whole_and_numbers_become_n() -> None:
    names = causes.names_of_gang("default/job-7", [("default", "job-7-3"), ("default", "job-7-10")], {})
    message = (
        "gang default/job-7 timed out after waiting 300s with 2/8 pods placed (last failure: job-7-10: "
        "0/8 nodes are available: 8 Insufficient nvidia.com/gpu); default/job-70 and job-7-3x are others"
    )
    assert causes.cause_of(message, names) == (
        "gang <gang> timed out after waiting Ns with N/N pods placed (last failure: <pod>: N/N nodes are available: "
        "N Insufficient nvidia.com/gpu); default/job-N and job-N-Nx are others"
    )


def test_group_members_and_their_pods_are_named_as_such() -> None:
    names = causes.names_of_gang("a/trainer", [("a", "trainer-0")], {"b/eval": [("b", "eval-2")]})
    message = (
        "gang a/trainer timed out after waiting 30s with 1/1 pods placed (waiting for GangGroup member b/eval "
        "which has 2/3 pods placed, its last failure: eval-2: 0/1 nodes are available: 1 node(s) had no GPU "
        "with 0.5 of it free)"
    )
    assert causes.cause_of(message, names) == (
        "gang <gang> timed out after waiting Ns with N/N pods placed (waiting for GangGroup member <member gang> "
        "which has N/N pods placed, its last failure: <pod>: N/N nodes are available: N node(s) had no GPU with "
        "N of it free)"
    )


def test_tally_counts_gangs_once_and_prefers_a_gang_as_example() -> None:
    found = causes.tally(
        [
            ("c1", "", "ns/loose-pod", "c1 for a pod", 1),
            ("c1", "ns/g1", "ns/g1", "c1 for g1", 3),
            ("c1", "ns/g1", "ns/g1", "c1 for g1 again", 1),
            ("c2", "ns/g2", "ns/g2", "c2 for g2", 9),
        ]
    )
    assert [(c.cause, c.pods, c.gangs, c.example, c.example_reason) for c in found] == [
        ("c2", 9, 1, "ns/g2", "c2 for g2"),
        ("c1", 5, 1, "ns/g1", "c1 for g1"),
    ]


# -- the report built from a simulation's result ----------------------------------------------------------
def timeout_message(gang: str, pod: str) -> str:
    """As the scheduler words a timeout (phalanx.scheduling.scheduler.GangScheduler._timeout_message)."""
    return (
        f"gang {gang} timed out after waiting 300s with 0/4 pods placed (last failure: {pod}: 0/8 nodes are "
        f"available: 8 Insufficient nvidia.com/gpu); it will not be scheduled again until its pods are recreated"
    )


def result(n_timed_out: int = 89) -> SimResult:
    """`n_timed_out` gangs of 4 pods that timed out for one cause; `default/quick` bound the instant it arrived;
    `default/slow` waited 50 s for its last pod; `default/loose` never bound and the scheduler never reported on
    it as a gang (its pods' own condition explains it)."""
    pods: dict[str, PodTrack] = {}
    conditions: dict[str, str] = {}
    messages: dict[str, str] = {}
    gangs: dict[str, GangSpec] = {}

    def add(gang: str, name: str, bound: float | None) -> PodTrack:
        t = PodTrack("default", name, "w.yaml", gang=f"default/{gang}", bound_at=bound)
        pods[t.key] = t
        return t

    for g in range(n_timed_out):
        gang = f"job-{g:03d}"
        gangs[f"default/{gang}"] = GangSpec("default", gang, 4, 4, GangMode.STRICT, (), 300.0)
        for i in range(4):
            conditions[add(gang, f"{gang}-{i}", None).key] = timeout_message(f"default/{gang}", f"{gang}-3")
        messages[f"default/{gang}"] = timeout_message(f"default/{gang}", f"{gang}-3")
    for name, count, bound in (("quick", 2, 0.0), ("slow", 2, 50.0), ("loose", 1, None)):
        gangs[f"default/{name}"] = GangSpec("default", name, count, count, GangMode.STRICT, (), 300.0)
        for i in range(count):
            add(name, f"{name}-{i}", bound)
    messages["default/slow"] = "gang default/slow: 1/2 pods placed; waiting for the rest of the gang"
    conditions["default/loose-0"] = "gang default/loose is not declared yet: its PodGroup or ConfigMap does not exist"
    series = {
        "gangWaits": [{"gang": "default/quick", "waitSeconds": 0.0}, {"gang": "default/slow", "waitSeconds": 50.0}]
    }
    return SimResult(
        pods,
        gangs,
        {t.gang for t in pods.values()},
        [],
        15630.0,
        2.5,
        10,
        "gang",
        {k for k in gangs if k.startswith("default/job-")},
        conditions,
        {},
        False,
        series,
        0,
        messages,
    )


def report_of(r: SimResult) -> dict[str, Any]:
    report = build_report(r)
    report.update(r.series)  # as phalanx.sim.run.simulate does
    return report


def test_each_gang_that_did_not_bind_at_once_has_its_reason_and_cause() -> None:
    report = report_of(result(3))
    reasons = {g["gang"]: g for g in report["gangReasons"]}
    assert "default/quick" not in reasons  # bound the instant it arrived: nothing to explain
    assert reasons["default/slow"]["reason"] == "gang default/slow: 1/2 pods placed; waiting for the rest of the gang"
    assert reasons["default/slow"]["cause"] == "gang <gang>: N/N pods placed; waiting for the rest of the gang"
    # Never taken up as a gang by the scheduler: what its pods were told.
    assert reasons["default/loose"]["cause"] == (
        "gang <gang> is not declared yet: its PodGroup or ConfigMap does not exist"
    )
    assert reasons["default/job-001"]["reason"] == timeout_message("default/job-001", "job-001-3")
    pods = {p["name"]: p for p in report["pods"]}
    assert pods["job-001-0"]["gang"] == "default/job-001"
    assert pods["job-001-0"]["cause"] == causes.cause_of(
        timeout_message("default/job-001", "job-001-3"),
        causes.names_of_gang("default/job-001", [("default", f"job-001-{i}") for i in range(4)], {}),
    )
    assert pods["quick-0"]["cause"] is None and pods["quick-0"]["reason"] is None


def test_eighty_nine_gangs_timed_out_for_one_cause_count_as_one_cause() -> None:
    report = report_of(result(89))
    found = causes.unbound_causes(report)
    top = found[0]
    assert (top.pods, top.gangs, top.example) == (89 * 4, 89, "default/job-000")
    assert top.example_reason == timeout_message("default/job-000", "job-000-3")
    assert "<gang>" in top.cause and "<pod>" in top.cause and "job-" not in top.cause
    assert len(found) == 2  # and the undeclared gang's pod
    never = causes.gang_causes(report, started=False)
    assert [(c.gangs, c.pods) for c in never] == [(89, 89 * 4), (1, 1)]
    assert [(c.gangs, c.example) for c in causes.gang_causes(report, started=True)] == [(1, "default/slow")]


def test_reports_without_causes_fall_back_to_the_pods_own_name() -> None:
    old = {
        "pods": [
            {
                "namespace": "ns",
                "name": f"p{i}",
                "boundAt": None,
                "reason": f"p{i}: 0/{i + 2} nodes are available: {i + 2} Insufficient cpu",
            }
            for i in range(5)
        ]
    }
    found = causes.unbound_causes(old)
    assert [(c.cause, c.pods, c.gangs, c.example) for c in found] == [
        ("<pod>: N/N nodes are available: N Insufficient cpu", 5, 0, "ns/p0")
    ]


def test_text_summary_names_causes_and_reads_durations() -> None:
    lines = summary_lines(report_of(result(89)))
    assert lines[0].endswith("virtual 4h 20m in 2.5 s wall")
    assert lines[1].startswith("  not bound: 356 pods of 89 gangs: gang <gang> timed out after waiting Ns")
    assert lines[1].endswith("(e.g. default/job-000)")
    assert lines[2].startswith("  not bound: 1 pod of 1 gang: gang <gang> is not declared yet")


# -- durations and numbers --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "seconds, text",
    [
        (0, "0 s"),
        (0.25, "0.25 s"),
        (0.0291, "0.029 s"),
        (13.481, "13.48 s"),
        (59.999, "1m"),
        (69.4, "1m 9s"),
        (3599.7, "1h"),
        (15630, "4h 20m"),
        (86399, "1d"),
        (136076, "1d 14h"),
        (12902960, "149d 8h"),
        (-75, "-1m 15s"),
    ],
)
def test_durations_read_as_a_person_writes_them(seconds: float, text: str) -> None:
    assert units.fmt_duration(seconds) == text


def test_numbers_never_use_an_exponent() -> None:
    assert [units.fmt_number(v) for v in (15630.4, 1234567.0, 2.5, 0.125)] == ["15,630", "1,234,567", "2.5", "0.125"]


def test_compare_rows_read_durations() -> None:
    a: dict[str, Any] = {"summary": {"virtualSeconds": 9.0, "podsBound": 8}}
    b: dict[str, Any] = {"summary": {"virtualSeconds": 15630.0, "podsBound": 1200}}
    rows = {r[0]: r[1:] for r in compare_rows(a, b, "a", "b")}
    assert rows["virtual time until quiet"] == ("9 s", "4h 20m")
    assert rows["pods bound"] == ("8", "1,200")
