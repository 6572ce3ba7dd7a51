"""HTML and PNG reports: numbers in tables and plots match hand-built reports; pages are safe and well-formed."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from phalanx.report.compare import compare_rows
from phalanx.report.html_report import ROW_CAP, render_compare_html, render_html
from phalanx.report.outputs import OutputError, check_writable, write_report_files
from phalanx.report.png_report import render_png

REPO = Path(__file__).resolve().parents[2]
GIB = 1024**3
EVIL_NAME = '<script>alert("pwned")</script>&x'
EVIL_REASON = "<img src=http://evil.example/x.png onerror=alert(1)> 0/2 nodes"

# -- a report built by hand --------------------------------------------------------------------------
# 8 GPUs, 64 CPUs, 256 GiB. Gang team/job-a (2 pods, 4 GPUs) binds at t=10 and finishes at t=130;
# team/job-c (1 pod) binds at t=70; team/job-b (min 4, 3 pods) never binds and times out; one more pod
# with a hostile name never binds.
T = [0.0, 10.0, 70.0, 130.0]
GPU_RATIO = [0.0, 0.5, 0.5, 0.0]
CPU_RATIO = [0.0, 0.25, 0.3125, 0.0]
MEM_RATIO = [0.0, 0.125, 0.125, 0.0]
PENDING_PODS = [7.0, 5.0, 4.0, 4.0]
PENDING_GANGS = [3.0, 2.0, 1.0, 1.0]
ARRIVED = [0.5, 1.0, 1.25, 1.25]
GPU_RESERVED = [0.25, 0.0, 0.125, 0.0]  # job-a held 2 GPUs before it bound; job-b held 1 while it waited


def _pod(name: str, bound: float | None, reason: str | None = None, gang: str | None = None) -> dict[str, Any]:
    return {
        "namespace": "team",
        "name": name,
        "gang": gang,
        "node": "n1" if bound is not None else None,
        "boundAt": bound,
        "startedAt": bound,
        "finishedAt": 130.0 if bound is not None else None,
        "annotations": {},
        "reason": reason,
    }


def hand_report() -> dict[str, Any]:
    pods = [
        _pod("job-a-0", 10.0),
        _pod("job-a-1", 10.0),
        _pod("job-c-0", 70.0),
        _pod("job-b-0", None, "gang timed out", "team/job-b"),
        _pod("job-b-1", None, "gang timed out", "team/job-b"),
        _pod("job-b-2", None, "gang timed out", "team/job-b"),
        _pod(EVIL_NAME, None, EVIL_REASON),
    ]
    return {
        "pods": pods,
        "podGroups": [
            {
                "namespace": "team",
                "name": "job-a",
                "phase": "Finished",
                "bound": 2,
                "minMember": 2,
                "pods": 2,
                "timedOut": False,
            },
            {
                "namespace": "team",
                "name": "job-b",
                "phase": "Failed",
                "bound": 0,
                "minMember": 4,
                "pods": 3,
                "timedOut": True,
            },
            {
                "namespace": "team",
                "name": "job-c",
                "phase": "Running",
                "bound": 1,
                "minMember": 1,
                "pods": 1,
                "timedOut": False,
            },
        ],
        "summary": {
            "mode": "gang",
            "gangsTotal": 3,
            "gangsBound": 2,
            "partialGangs": 0,
            "gangsTimedOut": 1,
            "podsTotal": 7,
            "podsBound": 3,
            "podsFinished": 3,
            "podsUnbound": 4,
            "virtualSeconds": 130.0,
            "untilReached": False,
            "wallSeconds": 0.25,
            "steps": 4,
            "errors": ["boom <b>bold</b>"],
            "schedulerRestarts": 0,
        },
        "series": {
            "t": T,
            "pendingPods": PENDING_PODS,
            "pendingGangs": PENDING_GANGS,
            "arrivedGpuDemand": ARRIVED,
            "allocated": {
                "nvidia.com/gpu": [r * 8 for r in GPU_RATIO],
                "cpu": [r * 64 for r in CPU_RATIO],
                "memory": [r * 256 * GIB for r in MEM_RATIO],
            },
            "allocatedRatio": {"nvidia.com/gpu": GPU_RATIO, "cpu": CPU_RATIO, "memory": MEM_RATIO},
            "reserved": {"nvidia.com/gpu": [r * 8 for r in GPU_RESERVED], "cpu": [0.0] * 4, "memory": [0.0] * 4},
            "reservedRatio": {"nvidia.com/gpu": GPU_RESERVED, "cpu": [0.0] * 4, "memory": [0.0] * 4},
            "capacity": {"nvidia.com/gpu": 8.0, "cpu": 64.0, "memory": 256.0 * GIB},
        },
        "gangWaits": [{"gang": "team/job-a", "waitSeconds": 10.0}, {"gang": "team/job-c", "waitSeconds": 70.0}],
        # waits [10, 70]: p50 = 40, p90 = 10 + 0.9 * 60 = 64, p99 = 10 + 0.99 * 60 = 69.4
        "gangWaitPercentiles": {"p50": 40.0, "p90": 64.0, "p99": 69.4},
        # arrived demand first reaches 0.9 and 1 at t=10, 1.1 at t=70 (GPU 50% both times), never 1.3
        "gpuAllocationAtDemand": {"0.9": 0.5, "1": 0.5, "1.1": 0.5, "1.3": None},
        "gpuDemandSweep": True,  # said so by hand: this report stands for an arrived-demand sweep
        "gangReasons": [
            {
                "gang": "team/job-a",
                "reason": "gang team/job-a: 1/2 pods placed; waiting for the rest of the gang",
                "cause": "gang <gang>: N/N pods placed; waiting for the rest of the gang",
            },
            {
                "gang": "team/job-b",
                "reason": "gang team/job-b timed out after waiting 60s",
                "cause": "gang <gang> timed out after waiting Ns",
            },
        ],
    }


def no_gpu_no_gang_report() -> dict[str, Any]:
    r = hand_report()
    r["podGroups"], r["gangWaits"], r["gangWaitPercentiles"] = [], [], {}
    r["gpuAllocationAtDemand"] = {"0.9": None, "1": None, "1.1": None, "1.3": None}
    r["gpuDemandSweep"], r["gangReasons"] = False, []
    r["summary"].update(gangsTotal=0, gangsBound=0, gangsTimedOut=0, errors=[])
    s = r["series"]
    for key in ("allocated", "allocatedRatio", "capacity", "reserved", "reservedRatio"):
        del s[key]["nvidia.com/gpu"]
    s["arrivedGpuDemand"] = [0.0] * len(T)
    s["pendingGangs"] = [0.0] * len(T)
    return r


# -- page helpers -------------------------------------------------------------------------------------
VOID = {"meta", "br", "hr", "img", "input", "link", "area", "base", "col", "source", "wbr"}


class TagBalance(HTMLParser):
    """Fails on any end tag that does not close the innermost open element; records tags and attributes."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.text: list[str] = []
        self.tags: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(page: str) -> TagBalance:
    parser = TagBalance()
    parser.feed(page)
    parser.close()
    return parser


def check_well_formed(page: str) -> str:
    assert page.startswith("<!DOCTYPE html>")
    parser = parse(page)
    assert parser.errors == []
    assert parser.stack == []
    for svg in svgs(page):
        ET.fromstring(svg)  # each plot is well-formed XML too
    return "".join(parser.text)


def svgs(page: str) -> list[str]:
    return re.findall(r"<svg\b.*?</svg>", page, flags=re.S)


def chart(page: str, name: str) -> ET.Element:
    for svg in svgs(page):
        root = ET.fromstring(svg)
        if root.get("data-chart") == name:
            return root
    raise AssertionError(f"no chart {name!r}")


NS = "{http://www.w3.org/2000/svg}"


def plot_group(root: ET.Element) -> ET.Element:
    g = root.find(f".//{NS}g[@class='plot']")
    assert g is not None
    return g


def domain(root: ET.Element) -> tuple[float, ...]:
    return tuple(float(v) for v in plot_group(root).get("data-domain", "").split())


def line_groups(root: ET.Element) -> list[ET.Element]:
    return [g for g in plot_group(root).iter(f"{NS}g") if g.get("data-series") is not None]


def path_points(d: str) -> list[tuple[float, float]]:
    """The vertices of a line's path (matplotlib draws lines as moves and straight segments only)."""
    tokens = d.split()
    assert set(t for t in tokens if t.isalpha()) <= {"M", "L"}, d
    values = [float(t) for t in tokens if not t.isalpha()]
    return list(zip(values[0::2], values[1::2]))


def series_points(root: ET.Element, label: str) -> list[tuple[float, float]]:
    """A line's points turned back into data units through the chart's own box and domain."""
    g = plot_group(root)
    left, top, right, bottom = (float(v) for v in g.get("data-box", "").split())
    x0, x1, y0, y1 = domain(root)
    for line in line_groups(root):
        if line.get("data-series") == label:
            path = line.find(f"{NS}path")
            assert path is not None
            return [
                (x0 + (px - left) / (right - left) * (x1 - x0), y0 + (bottom - py) / (bottom - top) * (y1 - y0))
                for px, py in path_points(path.get("d", ""))
            ]
    raise AssertionError(f"no series {label!r}")


def labels(root: ET.Element) -> list[str]:
    return [g.get("data-series", "") for g in line_groups(root)]


def step_value(points: list[tuple[float, float]], x: float) -> float:
    """The stairs' value at x: the last vertex at or before x (right-continuous, like the sampled state)."""
    tol = 1e-4 * max(1.0, abs(points[-1][0] - points[0][0]))  # points are rounded to 1e-6 of a unit
    value = None
    for px, py in points:
        if px <= x + tol:
            value = py
    assert value is not None
    return value


def summary_cells(page: str) -> dict[str, str]:
    rows = re.findall(r'<tr data-key="([^"]+)"><th>.*?</th><td[^>]*>(.*?)</td></tr>', page)
    return {unescape(k): unescape(v) for k, v in rows}


def section(page: str, heading: str) -> str:
    m = re.search(rf"<h2>{re.escape(heading)}</h2>(.*?)</section>", page, flags=re.S)
    assert m, heading
    return m.group(1)


# -- summary tables -----------------------------------------------------------------------------------
def test_summary_table_shows_the_reports_numbers() -> None:
    cells = summary_cells(render_html(hand_report(), "hand"))
    assert cells["mode"] == "gang"
    assert (cells["podsTotal"], cells["podsBound"], cells["podsFinished"], cells["podsUnbound"]) == ("7", "3", "3", "4")
    assert (cells["gangsTotal"], cells["gangsBound"], cells["partialGangs"], cells["gangsTimedOut"]) == (
        "3",
        "2",
        "0",
        "1",
    )
    assert cells["virtualSeconds"] == "2m 10s"
    assert cells["wallSeconds"] == "0.25 s"
    assert cells["untilReached"] == "no"
    assert cells["errors"] == "1"
    assert (cells["p50"], cells["p90"], cells["p99"]) == ("40 s", "1m 4s", "1m 9s")
    assert cells["gangsStarted"] == "2"
    assert [cells[f"demand:{d}"] for d in ("0.9", "1", "1.1", "1.3")] == ["50%", "50%", "50%", "not reached"]
    assert cells["capacity:nvidia.com/gpu"] == "8"
    assert cells["capacity:cpu"] == "64 cores"
    assert cells["capacity:memory"] == "256 GiB"


def test_long_durations_read_in_a_larger_unit() -> None:
    r = hand_report()
    r["summary"]["virtualSeconds"] = 12902960.0
    r["gangWaitPercentiles"]["p50"] = 15630.0
    r["gangWaitPercentiles"]["p99"] = 7200.0
    page = render_html(r, "long")
    cells = summary_cells(page)
    assert cells["virtualSeconds"] == "149d 8h"
    assert (cells["p50"], cells["p99"]) == ("4h 20m", "2h")
    assert "over 149d 8h of virtual time" in page
    assert "e+" not in check_well_formed(page)  # no 1.563e+04 anywhere a person reads


def test_errors_are_listed_and_escaped() -> None:
    page = render_html(hand_report(), "hand")
    assert "<li>boom &lt;b&gt;bold&lt;/b&gt;</li>" in page


# -- plots --------------------------------------------------------------------------------------------
def test_allocation_plot_points_map_back_to_the_series() -> None:
    page = render_html(hand_report(), "hand")
    root = chart(page, "allocation")
    # Peak 50%: the axis zooms to 0-50% and says so.
    assert domain(root) == (0.0, 130.0, 0.0, 0.5)
    assert "zoomed to 0–50%" in "".join(root.itertext())
    assert labels(root) == ["GPU", "CPU", "memory"]
    for label, ys in (("GPU", GPU_RATIO), ("CPU", CPU_RATIO), ("memory", MEM_RATIO)):
        pts = series_points(root, label)
        assert pts[0] == pytest.approx((0.0, 0.0), abs=1e-3)
        assert pts[-1][0] == pytest.approx(130.0, abs=0.05)
        for t, y in zip(T, ys):
            assert step_value(pts, t) == pytest.approx(y, abs=1e-3), (label, t)
        # Between samples the value holds (stairs, not ramps): just before t=130 GPU is still 50%.
        if label == "GPU":
            assert step_value(pts, 129.0) == pytest.approx(0.5, abs=1e-3)


def test_time_axis_unit_follows_the_range() -> None:
    page = render_html(hand_report(), "hand")
    assert "virtual time (seconds)" in "".join(chart(page, "allocation").itertext())
    for factor, unit in ((60, "minutes"), (360, "hours"), (86400 * 10, "days")):  # 130 min, 13 h, 1300 d
        r = hand_report()
        r["series"]["t"] = [t * factor for t in T]
        text = "".join(chart(render_html(r, "scaled"), "allocation").itertext())
        assert f"virtual time ({unit})" in text
        if unit == "days":
            # 1300 days: ticks are whole, readable day counts, not seconds.
            ticks = [
                e.text
                for e in chart(render_html(r, "x"), "allocation").iter(f"{NS}text")
                if e.get("class") == "tick" and e.get("text-anchor") == "middle"
            ]
            assert "1,000" in ticks and all("e+" not in (t or "") for t in ticks)


def test_pending_plot_points_map_back() -> None:
    root = chart(render_html(hand_report(), "hand"), "pending")
    assert labels(root) == ["pending pods", "pending gangs"]
    x0, x1, y0, y1 = domain(root)
    assert (x0, x1, y0) == (0.0, 130.0, 0.0) and y1 >= 7
    for label, ys in (("pending pods", PENDING_PODS), ("pending gangs", PENDING_GANGS)):
        pts = series_points(root, label)
        for t, y in zip(T, ys):
            assert step_value(pts, t) == pytest.approx(y, abs=0.01)


def test_gang_wait_cdf_steps_at_each_wait_with_percentile_markers() -> None:
    root = chart(render_html(hand_report(), "hand"), "waits")
    pts = series_points(root, "gangs started (2)")
    assert step_value(pts, 5.0) == pytest.approx(0.0, abs=1e-3)
    assert step_value(pts, 10.0) == pytest.approx(0.5, abs=1e-3)
    assert step_value(pts, 69.0) == pytest.approx(0.5, abs=1e-3)
    assert step_value(pts, 70.0) == pytest.approx(1.0, abs=1e-3)
    marker_text = [e.text for e in root.iter(f"{NS}text") if e.get("class") == "marker"]
    assert marker_text == ["p50", "p90", "p99"]


def test_gpu_against_demand_plot_with_reference_line() -> None:
    root = chart(render_html(hand_report(), "hand"), "demand")
    x0, x1, y0, y1 = domain(root)
    assert (x0, x1) == (0.0, 1.25)  # from 0 to the most demand that arrived
    ref = series_points(root, "y = x (all arrived demand allocated)")
    assert ref[0] == pytest.approx((0.0, 0.0), abs=1e-3)
    assert ref[-1] == pytest.approx((1.0, 1.0), abs=1e-3)  # y = x stops at 100%
    pts = series_points(root, "GPU allocated")
    assert pts[0] == pytest.approx((0.5, 0.0), abs=1e-3)
    assert step_value(pts, 0.99) == pytest.approx(0.0, abs=1e-3)
    assert step_value(pts, 1.0) == pytest.approx(0.5, abs=1e-3)
    assert pts[-1] == pytest.approx((1.25, 0.0), abs=1e-3)  # job-a finished, demand stood still


def test_reserved_plot_maps_back_under_the_allocation_plot() -> None:
    page = render_html(hand_report(), "hand")
    alloc = section(page, "Allocation over virtual time")
    assert alloc.index('data-chart="allocation"') < alloc.index('data-chart="reserved"')
    root = chart(page, "reserved")
    assert labels(root) == ["GPU reserved, not bound"]  # CPU and memory were never held
    assert domain(root)[:2] == domain(chart(page, "allocation"))[:2]  # the same time axis
    pts = series_points(root, "GPU reserved, not bound")
    for t, y in zip(T, GPU_RESERVED):
        assert step_value(pts, t) == pytest.approx(y, abs=1e-3), t


def test_reserved_plot_says_when_nothing_was_held_and_is_left_out_where_it_cannot_be() -> None:
    r = hand_report()
    r["series"]["reservedRatio"]["nvidia.com/gpu"] = [0.0] * 4
    alloc = section(render_html(r, "none held"), "Allocation over virtual time")
    assert "no capacity was ever held by a waiting gang" in alloc and 'data-chart="reserved"' not in alloc
    pod_mode = hand_report()
    pod_mode["summary"]["mode"] = "pod"  # nothing is ever reserved for a gang there
    assert "Reserved for waiting gangs" not in render_html(pod_mode, "pod")
    older = hand_report()
    del older["series"]["reservedRatio"]  # a report written before the series was recorded
    assert "Reserved for waiting gangs" not in render_html(older, "old")


def test_gpu_demand_panel_only_for_a_demand_sweep() -> None:
    for flag in (False, None):
        r = hand_report()
        if flag is None:
            del r["gpuDemandSweep"]
        else:
            r["gpuDemandSweep"] = flag
        page = render_html(r, "no sweep")
        assert "arrived GPU demand" not in page and "arrived demand" not in page
        assert not any(k.startswith("demand:") for k in summary_cells(page))
        assert "GPU allocation at" not in render_compare_html(r, r, "a", "b")
    page = render_html(hand_report(), "sweep")
    assert summary_cells(page)["demand:0.9"] == "50%" and chart(page, "demand") is not None


# -- tables -------------------------------------------------------------------------------------------
def test_gang_table_puts_gangs_not_bound_whole_first() -> None:
    gangs = section(render_html(hand_report(), "hand"), "Gangs")
    names = re.findall(r"<tr><td>(team/job-.)</td>", gangs)
    assert names == ["team/job-b", "team/job-a", "team/job-c"]
    assert re.search(r"team/job-b</td><td class=\"bad\">Failed</td><td class=\"num\">0/4</td>", gangs)
    assert re.search(r"team/job-a</td><td class=\"ok\">Finished</td><td class=\"num\">2/2</td>.*?10 s", gangs)


def test_gangs_table_has_each_gangs_reason_and_their_causes_counted() -> None:
    gangs = section(render_html(hand_report(), "hand"), "Gangs")
    assert re.search(r"<th>wait</th><th>reason</th>", gangs)
    assert re.search(r'team/job-b</td>.*?<td class="reason">gang team/job-b timed out after waiting 60s</td>', gangs)
    assert re.search(r'team/job-c</td>(?:(?!</tr>).)*<td class="reason"></td></tr>', gangs)  # no wait to explain
    never = gangs[gangs.index("<h3>Why gangs never started</h3>") : gangs.index("<h3>Why gangs waited")]
    assert (
        '<td class="num">3</td><td class="num">1</td><td class="reason">gang &lt;gang&gt; timed out after '
        'waiting Ns</td><td class="example"><details><summary>team/job-b</summary>'
    ) in never
    waited = gangs[gangs.index("<h3>Why gangs waited") : gangs.index("<h3>All gangs</h3>")]
    assert "N/N pods placed; waiting for the rest of the gang" in waited and "team/job-a" in waited


def test_many_gangs_timed_out_for_one_cause_make_one_row() -> None:
    r = hand_report()
    r["pods"] = [
        _pod(
            f"g{g}-{i}",
            None,
            f"gang ns/g{g} timed out after waiting 300s with {i}/4 pods placed "
            f"(last failure: g{g}-3: 0/8 nodes are available: 8 Insufficient nvidia.com/gpu)",
            f"ns/g{g}",
        )
        for g in range(89)
        for i in range(4)
    ]
    unbound = section(render_html(r, "many"), "Unbound pods")
    by_reason = unbound[: unbound.index("<h3>Pods</h3>")]
    assert by_reason.count("<tr><td") == 1  # one cause, not 89 (nor 356) reasons
    assert (
        '<td class="num">356</td><td class="num">89</td><td class="reason">gang &lt;gang&gt; timed out after '
        "waiting Ns with N/N pods placed (last failure: &lt;pod&gt;: N/N nodes"
    ) in by_reason
    assert "<summary>ns/g0</summary>" in by_reason


def test_unbound_pods_with_reasons_and_escaping() -> None:
    page = render_html(hand_report(), "hand")
    unbound = section(page, "Unbound pods")
    assert (
        '<td class="num">3</td><td class="num">1</td><td class="reason">gang timed out</td>'
        '<td class="example"><details><summary>team/job-b</summary>'
    ) in unbound
    # Jinja2's autoescape (markupsafe) writes a double quote as &#34;.
    assert "team/&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;&amp;x" in unbound
    assert "&lt;img src=http://evil.example/x.png onerror=alert(1)&gt; 0/2 nodes" in unbound
    assert EVIL_NAME not in page and "<img" not in page and "<script" not in page
    text = check_well_formed(page)
    assert EVIL_NAME in text  # shown to the reader as text, intact


def test_long_tables_are_capped_and_say_so() -> None:
    r = hand_report()
    r["pods"] = [_pod(f"p{i}", None, f"reason {'abcdefghijklmnopqrstuvwxyzABCD'[i % 30]}") for i in range(450)]
    r["podGroups"] = [
        {
            "namespace": "ns",
            "name": f"g{i}",
            "phase": "Pending",
            "bound": 0,
            "minMember": 2,
            "pods": 2,
            "timedOut": False,
        }
        for i in range(300)
    ]
    page = render_html(r, "big")
    unbound, gangs = section(page, "Unbound pods"), section(page, "Gangs")
    assert unbound.count("<tr><td>ns/") + unbound.count("<tr><td>team/p") == ROW_CAP
    assert "Showing the first 200 of 450 unbound pods." in unbound
    assert "Showing the first 20 of 30 distinct reasons." in unbound
    assert unbound.split("<h3>Pods</h3>")[0].count('<td class="reason">reason ') == 20
    assert gangs.count("<tr><td>ns/g") == ROW_CAP
    assert "Showing the first 200 of 300 gangs" in gangs
    check_well_formed(page)


# -- safety and structure -----------------------------------------------------------------------------
LOADING_TAGS = {"script", "link", "iframe", "img", "object", "embed", "image", "use", "audio", "video", "source"}
LOADING_ATTRS = {"src", "href", "xlink:href", "action", "srcset", "data", "poster"}


@pytest.mark.parametrize(
    "build",
    [
        lambda: render_html(hand_report(), "hand"),
        lambda: render_html(no_gpu_no_gang_report(), "plain"),
        lambda: render_html({}, "empty"),
        lambda: render_compare_html(hand_report(), no_gpu_no_gang_report(), "a", "b"),
    ],
)
def test_pages_are_self_contained_and_well_formed(build: Any) -> None:
    page = build()
    check_well_formed(page)
    parsed = parse(page)
    assert [t for t, _ in parsed.tags if t in LOADING_TAGS] == []
    assert [(t, a) for t, attrs in parsed.tags for a in attrs if a in LOADING_ATTRS] == []
    assert all(not a.startswith("on") for _, attrs in parsed.tags for a in attrs)  # no inline handlers either
    style = re.search(r"<style>(.*?)</style>", page, flags=re.S)
    assert style and "url(" not in style.group(1) and "@import" not in style.group(1)
    # Inside the markup itself (text such as a pod's reason may mention a URL, escaped, and that is fine).
    markup = " ".join(re.findall(r"<[^>]*>", page))
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", markup, flags=re.I)


def test_title_is_escaped() -> None:
    page = render_html(hand_report(), "<b>run</b> & co")
    assert "<title>&lt;b&gt;run&lt;/b&gt; &amp; co</title>" in page
    assert "<h1>&lt;b&gt;run&lt;/b&gt; &amp; co</h1>" in page


# -- reports without GPUs, gangs or series ----------------------------------------------------------
def test_report_without_gpus_or_gangs() -> None:
    page = render_html(no_gpu_no_gang_report(), "plain")
    check_well_formed(page)
    assert labels(chart(page, "allocation")) == ["CPU", "memory"]
    assert labels(chart(page, "pending")) == ["pending pods"]
    assert "GPU allocation against arrived GPU demand" not in page  # no GPUs: no sweep to show
    assert "no gangs" in section(page, "Gang wait (CDF)")
    assert "no gangs" in section(page, "Gangs")
    assert not any(ET.fromstring(s).get("data-chart") in ("waits", "demand") for s in svgs(page))
    cells = summary_cells(page)
    assert cells["gangWaits"] == "no gangs"
    assert not any(k.startswith("demand:") for k in cells)


def test_gangs_that_never_started_say_so() -> None:
    r = hand_report()
    r["gangWaits"], r["gangWaitPercentiles"] = [], {}
    page = render_html(r, "stuck")
    assert "no gang ever started" in section(page, "Gang wait (CDF)")
    assert summary_cells(page)["gangWaits"] == "no gang started"


def test_empty_and_series_less_reports_render() -> None:
    reports: list[dict[str, Any]] = [
        {},
        {"summary": hand_report()["summary"]},
        {"series": {"t": [], "allocatedRatio": {}}},
    ]
    for report in reports:
        page = render_html(report, "empty")
        check_well_formed(page)
        assert svgs(page) == []
        assert "no allocation series" in page


def test_single_sample_does_not_divide_by_zero() -> None:
    r = hand_report()
    s = r["series"]
    for key in ("t", "pendingPods", "pendingGangs", "arrivedGpuDemand"):
        s[key] = s[key][:1]
    for res in s["allocatedRatio"]:
        s["allocatedRatio"][res] = s["allocatedRatio"][res][:1]
    page = render_html(r, "one")
    check_well_formed(page)
    x0, x1, _, _ = domain(chart(page, "allocation"))
    assert x1 > x0


# -- compare page -------------------------------------------------------------------------------------
def test_compare_page_has_both_summaries_and_overlaid_plots() -> None:
    a, b = no_gpu_no_gang_report(), hand_report()
    a["summary"].update(mode="pod", podsBound=5, partialGangs=2)
    page = render_compare_html(a, b, "pod <1>", "gang")
    check_well_formed(page)
    assert "<th>pod &lt;1&gt;</th><th>gang</th>" in page
    for title, ca, cb in compare_rows(a, b, "pod <1>", "gang")[2:]:
        if title and not title.startswith("gang:") and "/" not in title:
            assert re.search(
                rf"<th>{re.escape(title)}</th><td class=\"num\">{re.escape(ca)}</td>"
                rf"<td class=\"num\">{re.escape(cb)}</td>",
                page,
            ), title
    assert re.search(r'<th>gang wait p50</th><td class="num">–</td><td class="num">40 s</td>', page)
    assert re.search(r'<th>GPU allocation at 90% demand</th><td class="num">–</td><td class="num">50%</td>', page)
    assert re.search(r'<th>team/job-b</th><td class="num">-</td><td class="num">0/4 Failed</td>', page)
    # One allocation plot per run, on the same time axis; pending counts overlaid.
    assert domain(chart(page, "allocation-0"))[:2] == domain(chart(page, "allocation-1"))[:2] == (0.0, 130.0)
    assert labels(chart(page, "allocation-1")) == ["GPU", "CPU", "memory"]
    assert labels(chart(page, "pending")) == ["pod <1>: pending pods", "gang: pending pods", "gang: pending gangs"]
    pts = series_points(chart(page, "pending"), "gang: pending pods")
    assert [step_value(pts, t) for t in T] == pytest.approx(PENDING_PODS, abs=0.01)
    assert labels(chart(page, "demand"))[1:] == ["gang: GPU allocated"]


def test_compare_page_with_different_time_ranges_shares_the_axis() -> None:
    a, b = hand_report(), copy.deepcopy(hand_report())
    b["series"]["t"] = [t * 2 for t in T]
    page = render_compare_html(a, b, "a", "b")
    assert domain(chart(page, "allocation-0"))[:2] == domain(chart(page, "allocation-1"))[:2] == (0.0, 260.0)


# -- PNG ----------------------------------------------------------------------------------------------
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_png_of_the_main_plot(tmp_path: Path) -> None:
    from matplotlib.image import imread

    out = tmp_path / "r.png"
    render_png(hand_report(), out, "hand <report>")
    data = out.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 10_000
    img = imread(str(out))
    assert img.shape[:2] == (500, 1200)
    assert img[..., :3].std() > 0.05  # something was drawn, not a blank canvas


@pytest.mark.parametrize("report", [{}, {"summary": {"mode": "pod"}}])
def test_png_without_series(tmp_path: Path, report: dict[str, Any]) -> None:
    from matplotlib.image import imread

    out = tmp_path / "e.png"
    render_png(report, out, "empty")
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert imread(str(out)).shape[:2] == (500, 1200)


# -- writing files --------------------------------------------------------------------------------------
def test_write_report_files(tmp_path: Path) -> None:
    paths = [tmp_path / "r.json", tmp_path / "r.html", tmp_path / "r.png"]
    write_report_files(hand_report(), "t", *(str(p) for p in paths))
    assert paths[0].read_text().startswith("{")
    assert paths[1].read_text().startswith("<!DOCTYPE html>")
    assert paths[2].read_bytes()[:8] == PNG_MAGIC


def test_unwritable_paths_are_reported(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="does not exist"):
        check_writable(str(tmp_path / "missing" / "r.html"))
    with pytest.raises(OutputError, match="is a directory"):
        check_writable(str(tmp_path))
    with pytest.raises(OutputError, match=r"r\.png"):
        write_report_files(hand_report(), "t", png_path=str(tmp_path / "missing" / "r.png"))
    check_writable(None, str(tmp_path / "ok.html"))


# -- CLI --------------------------------------------------------------------------------------------------
def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "phalanx.cli.main", *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


@pytest.mark.integration
def test_simulate_writes_html_and_png(tmp_path: Path) -> None:
    html, png, js = tmp_path / "demo.html", tmp_path / "demo.png", tmp_path / "demo.json"
    proc = run_cli(
        "simulate", "-f", "examples/demo-two-jobs.yaml", "--html", str(html), "--png", str(png), "-o", str(js)
    )
    assert proc.returncode == 0, proc.stderr
    page = html.read_text()
    check_well_formed(page)
    cells = summary_cells(page)
    assert (cells["podsBound"], cells["gangsBound"]) == ("10", "2")
    assert labels(chart(page, "allocation")) == ["GPU", "CPU", "memory"]
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert js.exists()


@pytest.mark.integration
def test_simulate_html_without_output(tmp_path: Path) -> None:
    html = tmp_path / "only.html"
    proc = run_cli(
        "simulate", "-f", "examples/demo-two-jobs.yaml", "--mode", "pod", "--until", "1h", "--html", str(html)
    )
    assert proc.returncode == 0, proc.stderr
    assert "0/2 nodes are available" in section(html.read_text(), "Unbound pods")


@pytest.mark.starts_processes
def test_simulate_unwritable_html_fails_fast() -> None:
    proc = run_cli("simulate", "-f", "examples/demo-two-jobs.yaml", "--html", "/nonexistent-dir/r.html")
    assert proc.returncode == 2
    assert proc.stderr.startswith("phalanx simulate: /nonexistent-dir/r.html:")
    assert "Traceback" not in proc.stderr


@pytest.mark.starts_processes
def test_compare_cli_html_and_errors(tmp_path: Path) -> None:
    import json

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(no_gpu_no_gang_report()))
    b.write_text(json.dumps(hand_report()))
    out = tmp_path / "c.html"
    proc = run_cli("compare", str(a), str(b), "--labels", "A", "B", "--html", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "gangs bound whole" in proc.stdout  # the text table stays on stdout
    check_well_formed(out.read_text())

    proc = run_cli("compare", str(a), str(tmp_path / "missing.json"))
    assert proc.returncode == 2 and proc.stderr.startswith("phalanx compare: ") and "Traceback" not in proc.stderr
    proc = run_cli("compare", str(a), str(b), "--html", str(tmp_path / "no" / "c.html"))
    assert proc.returncode == 2 and proc.stderr.startswith("phalanx compare: ") and "Traceback" not in proc.stderr
