"""Line charts as inline SVG strings, so report pages need no script, font or network to show plots.

Every chart carries its own coordinate mapping (`data-box` in pixels, `data-domain` in data units) on
the plot group, which lets tests (and curious readers) turn polyline points back into data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape
from typing import Callable, Sequence

from phalanx.sim import units

WIDTH = 560  # about the width a half-page column shows, so 11px text stays 11px
HEIGHT = 320
MARGIN_LEFT = 64
MARGIN_RIGHT = 20
MARGIN_TOP = 26  # above the legend rows
LEGEND_ROW = 18
MARGIN_BOTTOM = 50
CHAR_WIDTH = 6.6  # rough width of a 12px sans-serif glyph, to lay out legends without measuring text


@dataclass
class Line:
    label: str
    xs: Sequence[float]
    ys: Sequence[float]
    color: str
    step: bool = True  # a sampled state holds until the next sample: draw stairs, not ramps
    dash: str | None = None
    width: float = 2.0


@dataclass
class Marker:
    """A vertical dotted rule at x, e.g. a percentile."""

    x: float
    label: str


@dataclass
class Scale:
    lo: float
    hi: float
    label: str
    ticks: list[float] = field(default_factory=list)
    fmt: Callable[[float], str] = units.fmt_number

    def __post_init__(self) -> None:
        if not math.isfinite(self.lo) or not math.isfinite(self.hi):
            self.lo, self.hi = 0.0, 1.0
        if self.hi <= self.lo:  # one sample or a constant: give the axis some width
            self.hi = self.lo + 1.0
        if not self.ticks:
            self.ticks = units.ticks(self.lo, self.hi)


def time_scale(t_max: float, t_min: float = 0.0, what: str = "virtual time") -> Scale:
    """Seconds in the data, ticks and labels in the unit that suits the range."""
    unit = units.time_unit(t_max - t_min)
    if not t_max > t_min:
        t_max = t_min + unit.seconds
    lo, hi = t_min / unit.seconds, t_max / unit.seconds
    step = units.nice_step(hi - lo)
    tick_values = [v * unit.seconds for v in units.ticks(lo, hi)]
    return Scale(t_min, t_max, f"{what} ({unit.name})", tick_values, lambda v: units.fmt_tick(v / unit.seconds, step))


def count_scale(y_max: float, label: str) -> Scale:
    hi = max(y_max, 1.0)
    step = units.nice_step(hi, 5)
    if step < 1:  # counts are whole: no ticks at 0.5 pods
        step = 1.0
    hi = math.ceil(hi / step) * step
    return Scale(0.0, hi, label, [k * step for k in range(int(round(hi / step)) + 1)],
                 lambda v: units.fmt_tick(v, step))


ZOOM_LEVELS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5)


def ratio_scale(y_max: float, label: str) -> Scale:
    """0-100%, or zoomed in when every value is under half, so a 1%-busy cluster is not a flat line."""
    hi = 1.0
    if 0 < y_max <= 0.5:
        hi = next(z for z in ZOOM_LEVELS if z >= y_max)
        label = f"{label} (zoomed to 0–{units.fmt_percent(hi)})"
    elif y_max > 1:
        hi = math.ceil(y_max * 4) / 4
    step = units.nice_step(hi, 5)
    return Scale(0.0, hi, label, units.ticks(0.0, hi, 5), lambda v: f"{units.fmt_tick(v * 100, step * 100)}%")


def _finite_points(line: Line) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in zip(line.xs, line.ys)
            if isinstance(x, (int, float)) and isinstance(y, (int, float)) and math.isfinite(x) and math.isfinite(y)]


def _vertices(line: Line) -> list[tuple[float, float]]:
    """The polyline's corners in data units; stairs only turn where the value changes, keeping pages small."""
    pts = _finite_points(line)
    if not pts:
        return []
    out = [pts[0]]
    for x, y in pts[1:]:
        px, py = out[-1]
        if line.step:
            if y != py:
                out.append((x, py))
                out.append((x, y))
        elif (x, y) != (px, py):
            out.append((x, y))
    if line.step and out[-1][0] != pts[-1][0]:
        out.append((pts[-1][0], out[-1][1]))  # hold the last value to the last sample
    # A vertical run of equal x (stairs at a jump, or an allocation change while demand stands still) keeps
    # only its ends.
    return out


class _Frame:
    """Maps data units to pixels inside the plot box."""

    def __init__(self, x: Scale, y: Scale, width: int, height: int, legend_rows: int) -> None:
        self.x, self.y = x, y
        self.left, self.top = MARGIN_LEFT, MARGIN_TOP + LEGEND_ROW * legend_rows
        self.right, self.bottom = width - MARGIN_RIGHT, height - MARGIN_BOTTOM

    def px(self, v: float) -> float:
        return self.left + (v - self.x.lo) / (self.x.hi - self.x.lo) * (self.right - self.left)

    def py(self, v: float) -> float:
        v = min(max(v, self.y.lo), self.y.hi)
        return self.bottom - (v - self.y.lo) / (self.y.hi - self.y.lo) * (self.bottom - self.top)


def _n(v: float) -> str:
    return f"{v:.2f}".rstrip("0").rstrip(".")


def _axes(f: _Frame) -> list[str]:
    out = [f'<rect x="{f.left}" y="{f.top}" width="{f.right - f.left}" height="{f.bottom - f.top}" '
           f'fill="#fcfcfd" stroke="#ced4da"/>']
    for v in f.y.ticks:
        if f.y.lo - 1e-12 <= v <= f.y.hi + 1e-12:
            y = _n(f.py(v))
            out.append(f'<line x1="{f.left}" x2="{f.right}" y1="{y}" y2="{y}" stroke="#e9ecef"/>')
            out.append(f'<text x="{f.left - 6}" y="{y}" text-anchor="end" dominant-baseline="middle" '
                       f'class="tick">{escape(f.y.fmt(v))}</text>')
    for v in f.x.ticks:
        if f.x.lo - 1e-12 <= v <= f.x.hi + 1e-12:
            x = _n(f.px(v))
            out.append(f'<line x1="{x}" x2="{x}" y1="{f.top}" y2="{f.bottom}" stroke="#f1f3f5"/>')
            out.append(f'<text x="{x}" y="{f.bottom + 16}" text-anchor="middle" class="tick">'
                       f'{escape(f.x.fmt(v))}</text>')
    mid_x, mid_y = (f.left + f.right) / 2, (f.top + f.bottom) / 2
    out.append(f'<text x="{_n(mid_x)}" y="{f.bottom + 38}" text-anchor="middle" class="axis">{escape(f.x.label)}</text>')
    out.append(f'<text transform="translate(14 {_n(mid_y)}) rotate(-90)" text-anchor="middle" class="axis">'
               f'{escape(f.y.label)}</text>')
    return out


def _legend_layout(lines: Sequence[Line], width: int) -> list[tuple[float, int]]:
    """(x, row) of each legend entry, wrapping to a new row rather than running off the chart."""
    out, x, row = [], float(MARGIN_LEFT), 0
    for line in lines:
        w = 36 + CHAR_WIDTH * len(line.label)
        if x + w > width - MARGIN_RIGHT and x > MARGIN_LEFT:
            x, row = float(MARGIN_LEFT), row + 1
        out.append((x, row))
        x += w + 12
    return out


def _legend(lines: Sequence[Line], layout: list[tuple[float, int]]) -> list[str]:
    out = []
    for line, (x, row) in zip(lines, layout):
        y = 14 + LEGEND_ROW * row
        dash = f' stroke-dasharray="{line.dash}"' if line.dash else ""
        out.append(f'<line x1="{_n(x)}" x2="{_n(x + 22)}" y1="{y}" y2="{y}" stroke="{line.color}" '
                   f'stroke-width="{line.width + 1}"{dash}/>')
        out.append(f'<text x="{_n(x + 28)}" y="{y}" dominant-baseline="middle" class="legend">{escape(line.label)}</text>')
    return out


def chart(lines: Sequence[Line], x: Scale, y: Scale, *, name: str, title: str, markers: Sequence[Marker] = (),
          width: int = WIDTH, height: int = HEIGHT) -> str:
    """One SVG chart; `name` becomes data-chart so a page (or a test) can tell its charts apart."""
    layout = _legend_layout(lines, width)
    rows = max((row for _, row in layout), default=0) + 1
    height += LEGEND_ROW * (rows - 1)  # the plot keeps its height when the legend wraps
    f = _Frame(x, y, width, height, rows)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" class="chart" '
             f'data-chart="{escape(name)}" role="img" aria-label="{escape(title)}">',
             f'<title>{escape(title)}</title>']
    parts += _axes(f)
    parts.append(f'<g class="plot" data-box="{f.left} {f.top} {f.right} {f.bottom}" '
                 f'data-domain="{x.lo!r} {x.hi!r} {y.lo!r} {y.hi!r}">')
    for m in markers:
        if x.lo <= m.x <= x.hi:
            mx = _n(f.px(m.x))
            parts.append(f'<line x1="{mx}" x2="{mx}" y1="{f.top}" y2="{f.bottom}" stroke="#868e96" '
                         f'stroke-dasharray="2 3" class="marker"/>')
            parts.append(f'<text x="{mx}" y="{f.top - 4}" text-anchor="middle" class="marker">{escape(m.label)}</text>')
    for line in lines:
        pts = " ".join(f"{_n(f.px(px))},{_n(f.py(py))}" for px, py in _vertices(line))
        if not pts:
            continue
        dash = f' stroke-dasharray="{line.dash}"' if line.dash else ""
        parts.append(f'<polyline data-series="{escape(line.label)}" points="{pts}" fill="none" '
                     f'stroke="{line.color}" stroke-width="{line.width}" stroke-linejoin="round"{dash}>'
                     f'<title>{escape(line.label)}</title></polyline>')
    parts.append("</g>")
    parts += _legend(lines, layout)
    parts.append("</svg>")
    return "\n".join(parts)
