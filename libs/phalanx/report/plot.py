"""One line chart drawn by matplotlib as inline SVG, for the HTML report (the PNG draws with matplotlib too).

The SVG is matplotlib's own, with its text kept as text (svg.fonttype "none") and then marked up so the
page, and the tests, can read it:
- the root: `data-chart` (which plot), `class="chart"`, a <title> and aria-label;
- the axes: `class="plot"`, with the plot box in SVG units (`data-box`: left top right bottom) and the data
  range it maps (`data-domain`: x0 x1 y0 y1), so a line's path turns back into data;
- each line: its group carries `data-series` (the legend's label); percentile markers and tick labels
  carry `class="marker"` / `class="tick"`.
matplotlib's element ids (figure_1, axes_1, ...) repeat in every chart, so they are dropped; clip-path ids
are salted with the chart's name and stay unique on a page. Nothing is loaded from elsewhere.

matplotlib is imported inside `chart`: it takes about half a second to load, and only report pages draw.
Render time, measured on the 2-core dev machine (median of 10 warm renders in one process; first render in a
fresh process, imports included, in brackets), against the hand-written SVG this replaced:
- examples/demo-two-jobs.yaml, gang mode (4 plots): 0.24 s [0.75 s], was 0.7 ms [1.2 ms]; page 54 KB, was 20 KB;
- the openb FGD sweep (10,804 pods, 2,000 samples a series): 0.19 s [0.61 s], was 35 ms; 378 KB, was 283 KB;
- `phalanx simulate --html` on the demo: 0.6-0.9 s more than with -o alone.
About 40% of a plot is matplotlib's constrained layout, kept because it fits any tick label and legend. A
page is rendered once per run, so this is paid once, after the simulation.
"""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from phalanx.report.scales import Scale

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

SVG_NS = "http://www.w3.org/2000/svg"
ET.register_namespace("", SVG_NS)
ET.register_namespace("xlink", "http://www.w3.org/1999/xlink")

WIDTH = 560  # SVG units (1 pt at 72 dpi): about the width a half-page column shows, so 11px text stays 11px
HEIGHT = 320
MARKER_COLOR = "#868e96"
# What every chart looks like; matplotlib's own defaults otherwise.
STYLE: dict[RcKeyType, Any] = {
    "svg.fonttype": "none",  # text stays text: selectable, searchable, and small
    "text.parse_math": False,  # a label is shown as written, "$" and all
    "lines.scale_dashes": False,  # dash patterns in points, as given
    "font.size": 11,
    "axes.labelsize": 12,
    "xtick.labelsize": 11,
    "ytick.labelsize": 11,
    "legend.fontsize": 12,
    "axes.labelcolor": "#343a40",
    "xtick.labelcolor": "#495057",
    "ytick.labelcolor": "#495057",
    "axes.facecolor": "#fcfcfd",
    "axes.edgecolor": "#ced4da",
    "figure.facecolor": "none",
    "axes.grid": True,
    "grid.color": "#e9ecef",
    "grid.linewidth": 1.0,
    "xtick.major.size": 0,
    "ytick.major.size": 0,  # grid lines instead of tick marks
    "xtick.major.pad": 5,
    "ytick.major.pad": 5,
}


@dataclass
class Line:
    label: str
    xs: Sequence[float]
    ys: Sequence[float]
    color: str
    step: bool = True  # a sampled state holds until the next sample: draw stairs, not ramps
    dash: tuple[float, float] | None = None  # on, off (points)
    width: float = 2.0


@dataclass
class Marker:
    """A vertical dotted rule at x, e.g. a percentile."""

    x: float
    label: str


def _finite(line: Line) -> tuple[list[float], list[float]]:
    """The points with both coordinates finite: a missing sample is left out, not drawn as a gap."""
    pts = [
        (float(x), float(y))
        for x, y in zip(line.xs, line.ys)
        if isinstance(x, (int, float))
        and isinstance(y, (int, float))
        and x == x
        and y == y
        and abs(x) != float("inf")
        and abs(y) != float("inf")
    ]
    return [x for x, _ in pts], [y for _, y in pts]


def _legend_columns(lines: Sequence[Line], width: int) -> int:
    """As many legend entries a row as fit the chart's width (about 6.6 units a character at 12px)."""
    widest = max(36 + 6.6 * len(line.label) for line in lines)
    return max(1, min(len(lines), int(width // (widest + 12))))


def chart(
    lines: Sequence[Line],
    x: Scale,
    y: Scale,
    *,
    name: str,
    title: str,
    markers: Sequence[Marker] = (),
    width: int = WIDTH,
    height: int = HEIGHT,
) -> str:
    """One SVG chart; `name` becomes data-chart (and salts the SVG's ids) so a page can tell its charts apart."""
    from matplotlib import rc_context
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, FuncFormatter

    with rc_context(STYLE), rc_context({"svg.hashsalt": name}):  # the salt keeps clip-path ids unique on a page
        fig = Figure(figsize=(width / 72, height / 72), dpi=72, layout="constrained")
        FigureCanvasSVG(fig)
        ax = fig.add_subplot()
        for i, line in enumerate(lines):
            xs, ys = _finite(line)
            ax.plot(
                xs,
                ys,
                drawstyle="steps-post" if line.step else "default",
                color=line.color,
                linewidth=line.width,
                linestyle=(0, line.dash) if line.dash else "-",
                label=line.label,
                gid=f"series-{i}",
                snap=False,
                clip_on=False,
            )  # snapping would move points half a pixel
        for k, m in enumerate(markers):
            if x.lo <= m.x <= x.hi:
                ax.axvline(m.x, color=MARKER_COLOR, linewidth=1.0, linestyle=(0, (2.0, 3.0)), clip_on=False)
                ax.text(
                    m.x,
                    1.0,
                    m.label,
                    transform=ax.get_xaxis_transform(),
                    ha="center",
                    va="bottom",
                    fontsize=10,
                    color=MARKER_COLOR,
                    gid=f"marker-{k}",
                )
        for axis, scale in ((ax.xaxis, x), (ax.yaxis, y)):
            axis.set_major_locator(FixedLocator(scale.visible_ticks()))
            axis.set_major_formatter(FuncFormatter(lambda v, _pos, fmt=scale.fmt: fmt(v)))
        ax.xaxis.grid(True, color="#f1f3f5")
        ax.set_axisbelow(True)
        ax.set_xlim(x.lo, x.hi)
        ax.set_ylim(y.lo, y.hi)
        ax.set_xlabel(x.label)
        ax.set_ylabel(y.label)
        if lines:
            fig.legend(
                loc="outside upper left",
                ncols=_legend_columns(lines, width),
                frameon=False,
                handlelength=2.2,
                borderaxespad=0.2,
            )
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    box = ax.get_window_extent()  # where the layout put the axes, in SVG units (dpi 72), y up
    top, bottom = fig.bbox.height - box.y1, fig.bbox.height - box.y0
    return _marked_up(
        buf.getvalue(),
        name=name,
        title=title,
        labels=[line.label for line in lines],
        box=(box.x0, top, box.x1, bottom),
        domain=(x.lo, x.hi, y.lo, y.hi),
    )


def _marked_up(
    svg: str,
    *,
    name: str,
    title: str,
    labels: list[str],
    box: tuple[float, float, float, float],
    domain: tuple[float, float, float, float],
) -> str:
    """matplotlib's SVG document as an element to inline in a page, marked up as the module docstring says."""
    root = ET.fromstring(svg[svg.index("<svg") :])  # without the XML declaration and DOCTYPE
    for attr in ("width", "height"):  # the page's CSS sizes it; the viewBox keeps its proportions
        root.attrib.pop(attr, None)
    root.attrib.update({"class": "chart", "data-chart": name, "role": "img", "aria-label": title})
    defs = root.find(f"{{{SVG_NS}}}defs")
    if defs is not None:  # its <style> would apply to the whole page: the page's CSS carries the same rule
        for style in defs.findall(f"{{{SVG_NS}}}style"):
            defs.remove(style)
    heading = ET.Element(f"{{{SVG_NS}}}title")
    heading.text = title
    root.insert(0, heading)
    for g in root.iter(f"{{{SVG_NS}}}g"):
        gid = g.attrib.pop("id", "")
        if gid == "axes_1":
            g.set("class", "plot")
            g.set("data-box", " ".join(f"{v:.6f}".rstrip("0").rstrip(".") for v in box))
            g.set("data-domain", " ".join(repr(float(v)) for v in domain))
        elif gid.startswith("series-"):
            g.set("data-series", labels[int(gid.removeprefix("series-"))])
        elif gid.startswith(("marker-", "xtick_", "ytick_")):
            for text in g.iter(f"{{{SVG_NS}}}text"):
                text.set("class", "marker" if gid.startswith("marker-") else "tick")
                if gid.startswith("xtick_"):
                    text.set("text-anchor", "middle")  # as its style says: x tick labels sit under their tick
    return ET.tostring(root, encoding="unicode")
