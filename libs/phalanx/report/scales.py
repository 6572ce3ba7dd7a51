"""The axes of the report's plots: their range, ticks and tick labels, chosen for the data they show.

Kept apart from the drawing (phalanx.report.plot, with matplotlib) because the choices are the report's:
time in the unit that suits the range, whole-number ticks for counts, shares zoomed in when a cluster is
barely busy. The PNG and the HTML page share them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from phalanx.report import units

ZOOM_LEVELS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5)


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

    def visible_ticks(self) -> list[float]:
        return [v for v in self.ticks if self.lo - 1e-12 <= v <= self.hi + 1e-12]


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
    return Scale(
        0.0, hi, label, [k * step for k in range(int(round(hi / step)) + 1)], lambda v: units.fmt_tick(v, step)
    )


def zoom(y_max: float) -> float:
    """The top of a share axis: 100%, or the first zoom level over every value when all are under half, so a
    1%-busy cluster is not a flat line; past 100% (over-commitment), the next quarter."""
    if 0 < y_max <= 0.5:
        return next(z for z in ZOOM_LEVELS if z >= y_max)
    if y_max > 1:
        return math.ceil(y_max * 4) / 4
    return 1.0


def ratio_scale(y_max: float, label: str) -> Scale:
    """0-100% (or zoomed, see zoom), ticks as percentages."""
    hi = zoom(y_max)
    if hi < 1:
        label = f"{label} (zoomed to 0–{units.fmt_percent(hi)})"
    step = units.nice_step(hi, 5)
    return Scale(0.0, hi, label, units.ticks(0.0, hi, 5), lambda v: f"{units.fmt_tick(v * 100, step * 100)}%")
