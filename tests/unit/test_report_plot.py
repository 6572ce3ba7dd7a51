"""The report's drawing and templates: matplotlib's SVG marked up for the page, Jinja2 templates as package data,
and the one-line refusal when the `report` extra is missing."""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from importlib.resources import files
from pathlib import Path

import pytest
from test_html_report import NS, chart, hand_report, labels, series_points, step_value, svgs

from phalanx.report.html_report import render_compare_html, render_html
from phalanx.report.outputs import check_can_render
from phalanx.report.plot import Line, Marker
from phalanx.report.plot import chart as draw
from phalanx.report.scales import Scale, count_scale, ratio_scale, time_scale

REPO = Path(__file__).resolve().parents[2]


def test_labels_are_shown_as_written_and_escaped() -> None:
    label = 'cost $5 & <b>"more"</b>'
    svg = draw(
        [Line(label, [0.0, 1.0], [0.0, 1.0], "#000000")],
        time_scale(1.0),
        count_scale(1.0, "n"),
        name="t",
        title="a <title>",
    )
    root = ET.fromstring(svg)  # well-formed, whatever the label holds
    assert labels(root) == [label]
    assert label in "".join(root.itertext())  # the legend shows it verbatim: "$" is no math
    assert "<b>" not in svg and "&lt;b&gt;" in svg
    assert root.findtext(f"{NS}title") == "a <title>"


def test_a_line_maps_back_to_its_data_at_any_size() -> None:
    xs, ys = [0.0, 3.0, 7.5, 10.0], [1.0, 4.0, 2.0, 2.0]
    for width, height in ((560, 320), (1100, 260)):
        root = ET.fromstring(
            draw(
                [Line("n", xs, ys, "#000000")],
                time_scale(10.0),
                count_scale(4.0, "n"),
                name="t",
                title="t",
                width=width,
                height=height,
            )
        )
        assert root.get("viewBox") == f"0 0 {width} {height}"
        pts = series_points(root, "n")
        assert pts[0] == pytest.approx((0.0, 1.0), abs=1e-4) and pts[-1][0] == pytest.approx(10.0, abs=1e-4)
        for x, y in zip(xs, ys):
            assert step_value(pts, x) == pytest.approx(y, abs=1e-4)


def test_missing_samples_are_left_out_not_drawn_as_gaps() -> None:
    nan = float("nan")
    root = ET.fromstring(
        draw(
            [Line("n", [0.0, 1.0, 2.0, 3.0], [1.0, nan, 3.0, 3.0], "#000000")],
            time_scale(3.0),
            count_scale(3.0, "n"),
            name="t",
            title="t",
        )
    )
    pts = series_points(root, "n")
    assert step_value(pts, 1.5) == pytest.approx(1.0, abs=1e-4)  # the value held over the missing sample
    assert step_value(pts, 2.0) == pytest.approx(3.0, abs=1e-4)


def test_markers_outside_the_axis_are_left_out() -> None:
    root = ET.fromstring(
        draw(
            [Line("n", [0.0, 10.0], [0.0, 1.0], "#000000")],
            time_scale(10.0),
            ratio_scale(1.0, "share"),
            name="t",
            title="t",
            markers=[Marker(5.0, "in"), Marker(50.0, "out")],
        )
    )
    assert [e.text for e in root.iter(f"{NS}text") if e.get("class") == "marker"] == ["in"]


def test_ticks_are_the_scales() -> None:
    x = Scale(0.0, 4.0, "x", [0.0, 2.0, 4.0, 6.0], lambda v: f"<{v:g}>")
    root = ET.fromstring(
        draw([Line("n", [0.0, 4.0], [0.0, 1.0], "#000000")], x, count_scale(1.0, "n"), name="t", title="t")
    )
    ticks = [e.text for e in root.iter(f"{NS}text") if e.get("class") == "tick" and e.get("text-anchor") == "middle"]
    assert ticks == ["<0>", "<2>", "<4>"]  # 6 is off the axis


def test_a_page_has_unique_ids_and_its_clip_paths_resolve() -> None:
    page = render_compare_html(hand_report(), hand_report(), "a", "b")
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert ids and len(ids) == len(set(ids))
    for svg in svgs(page):
        own = set(re.findall(r'\bid="([^"]+)"', svg))
        assert set(re.findall(r"url\(#([^)]+)\)", svg)) <= own


def test_pages_are_the_same_every_time() -> None:
    assert render_html(hand_report(), "t") == render_html(hand_report(), "t")


def test_plots_carry_no_style_for_the_whole_page() -> None:
    page = render_html(hand_report(), "t")
    assert page.count("<style") == 1  # the page's own; matplotlib's per-chart <style> is dropped
    assert chart(page, "allocation").get("class") == "chart"


def test_templates_ship_with_the_package() -> None:
    names = {p.name for p in files("phalanx.report").joinpath("templates").iterdir()}
    assert {"page.html.j2", "parts.html.j2", "report.html.j2", "compare.html.j2", "report.css"} <= names
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '"phalanx.report.templates" = ["*.j2", "*.css"]' in pyproject


@pytest.mark.starts_processes
def test_check_can_render_names_the_extra() -> None:
    check_can_render(html=True, png=True)  # installed here (dev brings the report extra)
    code = (
        "import sys\n"
        "sys.modules['jinja2'] = None\n"
        "from phalanx.report.outputs import OutputError, check_can_render\n"
        "check_can_render(png=True)\n"  # the PNG needs no template
        "try:\n"
        "    check_can_render(html=True)\n"
        "except OutputError as exc:\n"
        "    print(exc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("HTML reports need jinja2") and "phalanx[report]" in proc.stdout


@pytest.mark.starts_processes
def test_write_report_files_refuses_html_without_matplotlib() -> None:
    code = (
        "import sys\n"
        "sys.modules['matplotlib'] = None\n"
        "from phalanx.report.outputs import OutputError, write_report_files\n"
        "try:\n"
        "    write_report_files({}, 't', html_path='/nonexistent/never-written.html')\n"
        "except OutputError as exc:\n"
        "    print(exc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("HTML reports need matplotlib") and "phalanx[report]" in proc.stdout
