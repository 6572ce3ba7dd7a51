"""Readable numbers for report plots and tables: time units chosen by range, nice axis ticks."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class TimeUnit:
    short: str
    name: str
    seconds: float


SECOND = TimeUnit("s", "seconds", 1.0)
MINUTE = TimeUnit("min", "minutes", 60.0)
HOUR = TimeUnit("h", "hours", 3600.0)
DAY = TimeUnit("d", "days", 86400.0)


def time_unit(span_seconds: float) -> TimeUnit:
    """The unit in which a span reads as a small number: switch once it passes 3 of the next unit."""
    if span_seconds <= 3 * MINUTE.seconds:
        return SECOND
    if span_seconds <= 3 * HOUR.seconds:
        return MINUTE
    if span_seconds <= 3 * DAY.seconds:
        return HOUR
    return DAY


def nice_step(span: float, target: int = 6) -> float:
    """A step of 1, 2, 2.5 or 5 times a power of ten giving about `target` intervals over `span`."""
    if not math.isfinite(span) or span <= 0:
        return 1.0
    raw = span / max(target, 1)
    power = 10.0 ** math.floor(math.log10(raw))
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        if raw <= m * power * (1 + 1e-9):
            return m * power
    return 10 * power


def ticks(lo: float, hi: float, target: int = 6) -> list[float]:
    step = nice_step(hi - lo, target)
    first = math.ceil(lo / step - 1e-9)
    out: list[float] = []
    k = first
    while k * step <= hi + step * 1e-9:
        # Rounding keeps 0.1 * 3 from printing as 0.30000000000000004.
        out.append(round(k * step, 12))
        k += 1
    return out


def fmt_number(value: float) -> str:
    """Compact and exact enough for tables: integers with thousands separators, else 4 significant digits;
    never an exponent for ordinary magnitudes (15,630 rather than 1.563e+04)."""
    if not math.isfinite(value):
        return str(value)
    if float(value).is_integer():
        return f"{int(value):,}"
    if abs(value) >= 1000:
        return f"{round(value):,}"
    return f"{value:,.4g}" if abs(value) >= 1 else f"{value:.4g}"


def fmt_tick(value: float, step: float) -> str:
    """A tick label with as many decimals as the step needs (2.5 needs one, 0.25 two)."""
    decimals = 0
    while decimals < 9 and abs(step * 10**decimals - round(step * 10**decimals)) > 1e-6:
        decimals += 1
    return f"{value:,.{decimals}f}"


def fmt_percent(ratio: float) -> str:
    return f"{round(ratio * 100, 4):g}%"


# (unit, its name, the next smaller unit, its name): a duration reads as two parts, "4h 20m", "1d 14h".
_PARTS = ((86400, "d", 3600, "h"), (3600, "h", 60, "m"), (60, "m", 1, "s"))


def fmt_duration(seconds: float) -> str:
    """A duration as a person writes it, the one format of every report: `0.25 s`, `38.5 s`, `6m 31s`,
    `4h 20m`, `149d 8h` (rounded to the smaller part; a zero smaller part is left out)."""
    if not math.isfinite(seconds):
        return str(seconds)
    sign = "-" if seconds < 0 else ""
    s = abs(seconds)
    if round(s, 2) < 60:
        return f"{sign}{fmt_number(round(s, 2) if s >= 1 else float(f'{s:.2g}'))} s"
    for big, big_name, small, small_name in _PARTS:
        total = round(s / small)
        if total * small >= big:  # rounding 3599.7 s up makes it 1h, not 60m
            whole, rest = divmod(total, big // small)
            return f"{sign}{whole:,}{big_name}" + (f" {rest}{small_name}" if rest else "")
    raise AssertionError("unreachable: 60 s and more reach the minutes")
