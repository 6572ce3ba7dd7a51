"""The report's main plot as a PNG, for terminals, CI logs and READMEs.

matplotlib is imported inside render_png: it takes a good part of a second to load, and most
`phalanx` commands never draw. It is an optional dependency (the `report` extra), left out of the container
image, whose services never draw.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from phalanx.model.gpu import GPU
from phalanx.report import units
from phalanx.report.charts import (
    RESOURCE_COLORS,
    RESOURCE_NAMES,
    fragmentation_points,
    reserved_resources,
    resources,
    series_of,
)
from phalanx.report.outputs import extra_missing
from phalanx.report.scales import ZOOM_LEVELS

WIDTH_IN, HEIGHT_IN, DPI = 12.0, 5.0, 100


def _zoom(y_max: float) -> float:
    """Same rule as the HTML page: 0-100%, or zoomed in when every value is under half."""
    if 0 < y_max <= 0.5:
        return next(z for z in ZOOM_LEVELS if z >= y_max)
    return max(1.0, y_max)


def render_png(report: dict[str, Any], path: str | Path, title: str) -> None:
    # The object API with an explicit Agg canvas: no pyplot global state, no display needed.
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import FuncFormatter, MaxNLocator
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "matplotlib":
            raise  # matplotlib is there but broken: its own message says more
        raise extra_missing("PNG", "matplotlib") from None

    fig = Figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    s = series_of(report)
    t = [float(v) for v in s.get("t") or []]
    res = resources(report)
    if not t or not res:
        ax.text(0.5, 0.5, "no allocation series in this report", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    else:
        unit = units.time_unit(max(t) - min(t))
        xs = [v / unit.seconds for v in t]
        y_max = 0.0
        for r in res:
            ys = [float(v) for v in s["allocatedRatio"][r]]
            y_max = max([y_max] + ys)
            ax.step(
                xs,
                ys,
                where="post",
                color=RESOURCE_COLORS.get(r),
                linewidth=2.2 if r == GPU else 1.6,
                linestyle="--" if r == "memory" else "-",
                label=f"{RESOURCE_NAMES.get(r, r)} allocated",
            )
        for r in reserved_resources(report):  # held by waiting gangs, next to what is bound: what others wait for
            ys = [float(v) for v in s["reservedRatio"][r]]
            y_max = max([y_max] + ys)
            ax.step(
                xs,
                ys,
                where="post",
                color=RESOURCE_COLORS.get(r),
                linewidth=1.4,
                linestyle=":",
                label=f"{RESOURCE_NAMES.get(r, r)} reserved, not bound",
            )
        cap = (s.get("capacity") or {}).get(GPU)
        frag = fragmentation_points(report)
        if frag and isinstance(cap, (int, float)) and cap > 0:
            # Free GPU no waiting pod could use, as an area under the lines: what the placement stranded.
            fx = [float(p.get("t", 0.0)) / unit.seconds for p in frag]
            fy = [float(p.get("fragmentedMilli", 0)) / (cap * 1000) for p in frag]
            y_max = max([y_max] + fy)
            ax.fill_between(
                fx,
                fy,
                step="post",
                color=RESOURCE_COLORS.get(GPU),
                alpha=0.25,
                linewidth=0,
                label="GPU free, unusable by waiting pods",
            )
        hi = _zoom(y_max)
        ax.set_ylim(0, hi * 1.02)
        ax.set_xlim(xs[0], xs[-1] if xs[-1] > xs[0] else xs[0] + 1)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: units.fmt_percent(v)))
        zoom_note = f" (zoomed to 0–{units.fmt_percent(hi)})" if hi < 1 else ""
        ax.set_ylabel(f"allocated, share of the cluster{zoom_note}")
        ax.set_xlabel(f"virtual time ({unit.name})")
        ax.grid(True, color="#e9ecef")
        handles, labels = ax.get_legend_handles_labels()
        pending = [float(v) for v in s.get("pendingPods") or []]
        if pending and max(pending) > 0:
            # A second axis only when something was ever pending: a flat zero line would just add noise.
            ax2 = ax.twinx()
            ax2.step(xs, pending, where="post", color="#868e96", linewidth=1.0, alpha=0.8, label="pending pods")
            ax2.fill_between(xs, pending, step="post", color="#adb5bd", alpha=0.15)
            ax2.set_ylim(0, max(pending) * 1.1)
            ax2.yaxis.set_major_locator(MaxNLocator(integer=True))
            ax2.set_ylabel("pending pods")
            ax.set_zorder(ax2.get_zorder() + 1)  # allocation lines over the pending area, not under it
            ax.patch.set_visible(False)
            h2, l2 = ax2.get_legend_handles_labels()
            handles, labels = handles + h2, labels + l2
        # Below the axes, so the legend never hides a line.
        ax.legend(
            handles,
            labels,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.13),
            ncol=min(len(labels), 4),
            frameon=False,
            fontsize=9,
        )  # at most 4 a row: with the reserved lines there can be 7
    summary = report.get("summary") or {}
    sub = ""
    if summary:
        mode = f"{summary.get('mode')} mode"
        sub = (
            f"\n{summary.get('podsBound')}/{summary.get('podsTotal')} pods bound, "
            f"{summary.get('gangsBound')}/{summary.get('gangsTotal')} gangs bound whole"
            + ("" if mode in title else f" ({mode})")
        )
    ax.set_title(title + sub, fontsize=11)
    fig.tight_layout()
    fig.savefig(str(path), format="png")
