"""The report's plots, read from its series: each takes one or more runs so the compare page can overlay them.

A run is (label, report dict, dash pattern or None). With one run the lines are named after what they
show; with several, after the run too ("gang: pending pods"). Each plot is drawn by phalanx.report.plot
(matplotlib, as SVG), or is a note saying why there is nothing to draw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from phalanx.model.gpu import GPU
from phalanx.report import units
from phalanx.report.plot import Line, Marker, chart
from phalanx.report.scales import Scale, count_scale, ratio_scale, time_scale

RESOURCE_ORDER = (GPU, "cpu", "memory")
RESOURCE_NAMES = {GPU: "GPU", "cpu": "CPU", "memory": "memory"}
RESOURCE_COLORS = {GPU: "#e8590c", "cpu": "#1c7ed6", "memory": "#2f9e44"}
RUN_COLORS = ("#e8590c", "#1c7ed6", "#2f9e44", "#ae3ec9")
PENDING_PODS_COLOR = "#495057"
PENDING_GANGS_COLOR = "#ae3ec9"
DEMAND_LEVELS = ("0.9", "1", "1.1", "1.3")


@dataclass
class Run:
    label: str
    report: dict[str, Any]
    dash: tuple[float, float] | None = None


@dataclass
class Plot:
    """A drawn chart (inline SVG), or, when there is nothing to draw, the note that says why."""

    svg: str = ""
    note: str = ""


def empty(message: str) -> Plot:
    return Plot(note=message)


def series_of(report: dict[str, Any]) -> dict[str, Any]:
    s = report.get("series")
    return s if isinstance(s, dict) else {}


def _floats(values: Any) -> list[float]:
    if not isinstance(values, list):
        return []
    return [float(v) if isinstance(v, (int, float)) else float("nan") for v in values]


def t_max(runs: Sequence[Run]) -> float:
    ts = [t for r in runs for t in _floats(series_of(r.report).get("t")) if t == t]
    return max(ts, default=0.0)


def _name(runs: Sequence[Run], run: Run, what: str) -> str:
    return what if len(runs) == 1 else f"{run.label}: {what}"


def resources(report: dict[str, Any]) -> list[str]:
    ratios = series_of(report).get("allocatedRatio") or {}
    known = [r for r in RESOURCE_ORDER if r in ratios]
    return known + sorted(r for r in ratios if r not in RESOURCE_ORDER)


def has_demand_sweep(report: dict[str, Any]) -> bool:
    """GPU allocation at arrived demand is shown only for a run that is the sweep it is read from (see
    phalanx.sim.series.SeriesRecorder.demand_sweep); anywhere else it reads 0% or 100% and means nothing."""
    return report.get("gpuDemandSweep") is True


def reserved_resources(report: dict[str, Any]) -> list[str]:
    """Resources that waiting gangs ever held reserved and unbound."""
    held = series_of(report).get("reservedRatio") or {}
    return [r for r in resources(report) if any(v for v in _floats(held.get(r)) if v == v)]


def _share_chart(
    runs: Sequence[Run],
    *,
    series: str,
    picked: Callable[[dict[str, Any]], list[str]],
    suffix: str,
    axis: str,
    nothing: str,
    name: str,
    title: str,
    x_max: float | None,
    height: int,
) -> Plot:
    """One line per run and resource of the share-of-cluster series `series` (allocatedRatio, reservedRatio)."""
    lines: list[Line] = []
    for run in runs:
        s = series_of(run.report)
        t = _floats(s.get("t"))
        for i, res in enumerate(picked(run.report)):
            color = RESOURCE_COLORS.get(res, RUN_COLORS[i % len(RUN_COLORS)])
            # CPU and memory often move together: memory dashed and GPU wider keep all three visible.
            dash = run.dash or ((7.0, 4.0) if res == "memory" else None)
            lines.append(
                Line(
                    _name(runs, run, RESOURCE_NAMES.get(res, res) + suffix),
                    t,
                    _floats(s[series][res]),
                    color,
                    dash=dash,
                    width=2.6 if res == GPU else 1.8,
                )
            )
    if not lines:
        return empty(nothing)
    y_max = max((y for line in lines for y in line.ys if y == y), default=0.0)
    x = time_scale(t_max(runs) if x_max is None else x_max)
    return Plot(chart(lines, x, ratio_scale(y_max, axis), name=name, title=title, width=1100, height=height))


def reserved_chart(
    runs: Sequence[Run], *, name: str, title: str, x_max: float | None = None, height: int = 260
) -> Plot:
    """Capacity reserved for waiting gangs and not bound: held, idle, and what keeps others waiting."""
    return _share_chart(
        runs,
        series="reservedRatio",
        picked=reserved_resources,
        suffix=" reserved, not bound",
        axis="reserved, share of the cluster",
        nothing="no capacity was ever held by a waiting gang",
        name=name,
        title=title,
        x_max=x_max,
        height=height,
    )


def allocation_chart(
    runs: Sequence[Run], *, name: str, title: str, x_max: float | None = None, height: int = 380
) -> Plot:
    return _share_chart(
        runs,
        series="allocatedRatio",
        picked=resources,
        suffix="",
        axis="allocated, share of the cluster",
        nothing="no allocation series in this report (no nodes, or a report without series)",
        name=name,
        title=title,
        x_max=x_max,
        height=height,
    )


def pending_chart(runs: Sequence[Run], *, name: str, title: str) -> Plot:
    lines: list[Line] = []
    for k, run in enumerate(runs):
        s = series_of(run.report)
        t = _floats(s.get("t"))
        if not t:
            continue
        pods_color = PENDING_PODS_COLOR if len(runs) == 1 else RUN_COLORS[k % len(RUN_COLORS)]
        lines.append(
            Line(_name(runs, run, "pending pods"), t, _floats(s.get("pendingPods")), pods_color, dash=run.dash)
        )
        if run.report.get("podGroups") or run.report.get("summary", {}).get("gangsTotal"):
            lines.append(
                Line(
                    _name(runs, run, "pending gangs"),
                    t,
                    _floats(s.get("pendingGangs")),
                    PENDING_GANGS_COLOR,
                    dash=run.dash,
                    width=1.5,
                )
            )
    if not lines:
        return empty("no pending-count series in this report")
    y_max = max((y for line in lines for y in line.ys if y == y), default=0.0)
    return Plot(chart(lines, time_scale(t_max(runs)), count_scale(y_max, "pending"), name=name, title=title))


def wait_values(report: dict[str, Any]) -> list[float]:
    waits = report.get("gangWaits")
    if not isinstance(waits, list):
        return []
    return sorted(
        float(w["waitSeconds"]) for w in waits if isinstance(w, dict) and isinstance(w.get("waitSeconds"), (int, float))
    )


def wait_cdf_chart(runs: Sequence[Run], *, name: str, title: str) -> Plot:
    """Share of gangs that waited at most x: stairs rising by 1/n at each gang's wait."""
    lines: list[Line] = []
    for k, run in enumerate(runs):
        waits = wait_values(run.report)
        if not waits:
            continue
        n = len(waits)
        lines.append(
            Line(
                _name(runs, run, f"gangs started ({n})"),
                [0.0] + waits,
                [0.0] + [(i + 1) / n for i in range(n)],
                RUN_COLORS[k % len(RUN_COLORS)],
                dash=run.dash,
            )
        )
    if not lines:
        has_gangs = any(r.report.get("podGroups") or r.report.get("summary", {}).get("gangsTotal") for r in runs)
        return empty("no gang ever started: no waits to show" if has_gangs else "no gangs")
    markers: list[Marker] = []
    if len(runs) == 1:
        pct = runs[0].report.get("gangWaitPercentiles") or {}
        markers = [Marker(float(v), k) for k, v in pct.items() if isinstance(v, (int, float))]
    w_max = max(max(line.xs) for line in lines)
    y = Scale(0.0, 1.0, "share of started gangs", [0, 0.25, 0.5, 0.75, 1.0], units.fmt_percent)
    return Plot(
        chart(
            lines,
            time_scale(w_max, what="wait from first pod's arrival to min bound"),
            y,
            name=name,
            title=title,
            markers=markers,
        )
    )


def demand_chart(runs: Sequence[Run], *, name: str, title: str) -> Plot:
    """GPU allocation against arrived GPU demand (both over the cluster's GPUs), with y = x for reference."""
    lines: list[Line] = []
    for k, run in enumerate(runs):
        s = series_of(run.report)
        gpu = (s.get("allocatedRatio") or {}).get(GPU)
        if not gpu or not has_demand_sweep(run.report):  # a run that is no sweep has nothing to say here
            continue
        xs = _floats(s.get("arrivedGpuDemand"))
        # Stairs: within one sample the demand arrives first and the allocation follows it.
        lines.append(
            Line(_name(runs, run, "GPU allocated"), xs, _floats(gpu), RUN_COLORS[k % len(RUN_COLORS)], dash=run.dash)
        )
    if not lines:
        return empty("no run here is an arrived-GPU-demand sweep")
    x_hi = max((x for line in lines for x in line.xs if x == x), default=0.0)
    if x_hi <= 0:
        return empty("no GPU demand arrived")
    ref = min(1.0, x_hi)
    lines.insert(
        0,
        Line(
            "y = x (all arrived demand allocated)",
            [0.0, ref],
            [0.0, ref],
            "#adb5bd",
            step=False,
            dash=(5.0, 4.0),
            width=1.2,
        ),
    )
    y_max = max(ref, max((y for line in lines[1:] for y in line.ys if y == y), default=0.0))
    step = units.nice_step(x_hi)
    x = Scale(
        0.0,
        x_hi,
        "arrived GPU demand, share of the cluster's GPUs",
        units.ticks(0.0, x_hi),
        lambda v: f"{units.fmt_tick(v * 100, step * 100)}%",
    )
    markers = [Marker(float(d), units.fmt_percent(float(d))) for d in DEMAND_LEVELS]
    return Plot(chart(lines, x, ratio_scale(y_max, "GPU allocated"), name=name, title=title, markers=markers))


FREE_GPU_COLOR = "#adb5bd"


def fragmentation_points(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The report's GPU fragmentation samples (phalanx.sim.fragmentation); none in older reports."""
    points = report.get("gpuFragmentation")
    return [p for p in points if isinstance(p, dict)] if isinstance(points, list) else []


def fragmentation_summary(report: dict[str, Any]) -> dict[str, Any]:
    s = report.get("gpuFragmentationSummary")
    return s if isinstance(s, dict) else {}


def fragmentation_chart(
    runs: Sequence[Run], *, name: str, title: str, x_max: float | None = None, height: int = 260
) -> Plot:
    """Free GPU and the part of it no waiting pod could use, both as a share of the cluster's GPUs: the gap
    between the lines is what the waiting pods could still take."""
    lines: list[Line] = []
    for k, run in enumerate(runs):
        cap = (series_of(run.report).get("capacity") or {}).get(GPU)
        points = fragmentation_points(run.report)
        if not points or not isinstance(cap, (int, float)) or cap <= 0:
            continue
        t = _floats([p.get("t") for p in points])
        free = [v / (cap * 1000) for v in _floats([p.get("freeMilli") for p in points])]
        fragmented = [v / (cap * 1000) for v in _floats([p.get("fragmentedMilli") for p in points])]
        color = RESOURCE_COLORS[GPU] if len(runs) == 1 else RUN_COLORS[k % len(RUN_COLORS)]
        lines.append(Line(_name(runs, run, "GPU free"), t, free, FREE_GPU_COLOR, dash=run.dash, width=1.6))
        lines.append(
            Line(_name(runs, run, "GPU free, unusable by waiting pods"), t, fragmented, color, dash=run.dash, width=2.6)
        )
    if not lines:
        return empty("no GPU fragmentation series in this report (no GPU nodes, or an older report)")
    y_max = max((y for line in lines for y in line.ys if y == y), default=0.0)
    x = time_scale(t_max(runs) if x_max is None else x_max)
    axis = "share of the cluster's GPUs"
    return Plot(chart(lines, x, ratio_scale(y_max, axis), name=name, title=title, width=1100, height=height))
