"""A simulation report as one self-contained HTML page: Jinja2 templates (templates/), plots from matplotlib.

Nothing is loaded from elsewhere (no script, font, stylesheet or image): the page is read on offline
machines and clusters, and attached to CI runs. Autoescaping is on: every string from the report is
escaped by the templates; only the plots' SVG (serialized by ElementTree) goes in as markup.

This module decides what each table and plot shows (which rows, in which order, formatted how); the
templates decide how it is laid out. Both need the `report` extra (jinja2, matplotlib). What the plots cost
to draw, measured against the hand-written SVG they replaced: phalanx.report.plot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from phalanx.report import units
from phalanx.report.causes import Cause, gang_causes, unbound_causes
from phalanx.report.charts import (
    DEMAND_LEVELS,
    RESOURCE_NAMES,
    Plot,
    Run,
    allocation_chart,
    demand_chart,
    fragmentation_chart,
    fragmentation_summary,
    has_demand_sweep,
    pending_chart,
    reserved_chart,
    t_max,
    wait_cdf_chart,
    wait_values,
)
from phalanx.report.compare import compare_rows

ROW_CAP = 200  # a trace replay has thousands of pods: the page stays small and the cut is said out loud
REASON_CAP = 20

SUMMARY_FIELDS = (
    ("mode", "mode"),
    ("podsTotal", "pods"),
    ("podsBound", "pods bound"),
    ("podsFinished", "pods finished"),
    ("podsUnbound", "pods never bound"),
    ("gangsTotal", "gangs"),
    ("gangsBound", "gangs bound whole"),
    ("partialGangs", "gangs partially bound (deadlock risk)"),
    ("gangsTimedOut", "gangs timed out"),
    ("virtualSeconds", "virtual time until quiet"),
    ("untilReached", "stopped by --until"),
    ("wallSeconds", "wall-clock time"),
    ("steps", "simulation steps"),
    ("schedulerRestarts", "scheduler restarts"),
)
DURATION_KEYS = {"virtualSeconds", "wallSeconds"}
BOUND_PHASES = {"Running", "Finished"}

_ENV = Environment(
    loader=PackageLoader("phalanx.report", "templates"),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)
_ENV.filters["number"] = units.fmt_number


# -- cells -----------------------------------------------------------------------------------------
def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)):
        return units.fmt_number(v)
    if v is None:
        return "–"
    return str(v)


def _duration(seconds: Any) -> str:
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
        return _value(seconds)
    return units.fmt_duration(seconds)


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{units.fmt_number(round(n, 1))} {unit}"
        n /= 1024
    return str(n)


# -- what the templates show -------------------------------------------------------------------------
@dataclass
class KeyValue:
    """A row of a two-column card; `key` (data-key) names it for tests and scripts."""

    key: str
    label: str
    cell: str
    css: str = "num"


@dataclass
class Card:
    caption: str
    rows: list[KeyValue]


@dataclass
class Capped:
    """A table or list shown up to `cap` rows, saying so when `total` is more."""

    rows: list[Any]
    total: int
    what: str
    cap: int = ROW_CAP
    caption: str = ""


@dataclass
class Grid:
    """The pending and gang-wait plots, and GPU allocation against arrived demand for runs that are that sweep."""

    pending: Plot
    waits: Plot
    demand: Plot | None = None


@dataclass
class GangsTable(Capped):
    """Every gang, after the tables of why gangs waited (`causes`)."""

    causes: list[Capped] = field(default_factory=list)


@dataclass
class UnboundTable(Capped):
    """Every unbound pod, after its causes counted."""

    causes: Capped | None = None


@dataclass
class CompareTable(Capped):
    head: list[str] = field(default_factory=list)


# -- summary ---------------------------------------------------------------------------------------
def summary_card(report: dict[str, Any]) -> Card:
    s = report.get("summary") or {}
    rows = [
        KeyValue(key, label, _duration(s[key]) if key in DURATION_KEYS else _value(s[key]))
        for key, label in SUMMARY_FIELDS
        if key in s
    ]
    known = {k for k, _ in SUMMARY_FIELDS} | {"errors"}
    rows += [KeyValue(k, k, _value(v)) for k, v in s.items() if k not in known and not isinstance(v, (dict, list))]
    rows.append(KeyValue("errors", "errors", units.fmt_number(len(s.get("errors") or []))))
    return Card("Run", rows)


def waits_card(report: dict[str, Any]) -> Card:
    pct = report.get("gangWaitPercentiles") or {}
    if not pct:
        has_gangs = report.get("podGroups") or (report.get("summary") or {}).get("gangsTotal")
        return Card(
            "Gang wait", [KeyValue("gangWaits", "gang waits", "no gang started" if has_gangs else "no gangs", "")]
        )
    rows = [KeyValue(k, k, _duration(pct[k])) for k in ("p50", "p90", "p99") if k in pct]
    rows.append(KeyValue("gangsStarted", "gangs started", units.fmt_number(len(wait_values(report)))))
    return Card("Gang wait (first pod's arrival to min bound)", rows)


def demand_card(report: dict[str, Any]) -> Card | None:
    """The FGD metric, for a run that is its sweep; nothing otherwise."""
    if not has_demand_sweep(report):
        return None
    at = report.get("gpuAllocationAtDemand") or {}
    rows = []
    for level in DEMAND_LEVELS:
        v = at.get(level)
        cell = "not reached" if not isinstance(v, (int, float)) else units.fmt_percent(v)
        rows.append(KeyValue(f"demand:{level}", f"at {units.fmt_percent(float(level))} arrived demand", cell))
    return Card("GPU allocation at arrived demand", rows)


def fragmentation_card(report: dict[str, Any]) -> Card | None:
    """GPU free but unusable by the waiting pods (phalanx.sim.fragmentation), for a run with GPUs."""
    s = fragmentation_summary(report)
    if not s:
        return None

    def gpus(key: str) -> str:
        v = s.get(key)
        return _value(round(v / 1000, 2)) + " GPUs" if isinstance(v, (int, float)) else "–"

    def share(key: str) -> str:
        v = s.get(key)
        return units.fmt_percent(v) if isinstance(v, (int, float)) else "–"

    rows = [
        KeyValue("fragmentation:mean", "mean share of free GPU unusable by waiting pods", share("meanFragmentedRatio")),
        KeyValue("fragmentation:meanGpus", "mean GPU free, unusable", gpus("meanFragmentedMilli")),
        KeyValue("fragmentation:end", "at the end: share of free GPU unusable", share("endFragmentedRatio")),
        KeyValue("fragmentation:endGpus", "at the end: GPU free, unusable", gpus("endFragmentedMilli")),
    ]
    return Card("GPU fragmentation", rows)


def capacity_card(report: dict[str, Any]) -> Card | None:
    cap = (report.get("series") or {}).get("capacity") or {}
    if not cap:
        return None
    rows = []
    for res, v in cap.items():
        cell = _bytes(v) if res == "memory" else units.fmt_number(v) + (" cores" if res == "cpu" else "")
        rows.append(KeyValue(f"capacity:{res}", RESOURCE_NAMES.get(res, res), cell))
    return Card("Cluster capacity", rows)


def errors_list(report: dict[str, Any]) -> Capped:
    errors = [str(e) for e in (report.get("summary") or {}).get("errors") or []]
    return Capped(errors[:ROW_CAP], len(errors), "errors")


def _lede(report: dict[str, Any]) -> dict[str, str] | None:
    s = report.get("summary") or {}
    if not s:
        return None
    return {
        "mode": _value(s.get("mode")),
        "pods_bound": _value(s.get("podsBound")),
        "pods_total": _value(s.get("podsTotal")),
        "gangs_bound": _value(s.get("gangsBound")),
        "gangs_total": _value(s.get("gangsTotal")),
        "virtual": _duration(float(s.get("virtualSeconds") or 0)),
    }


# -- tables of gangs and pods ----------------------------------------------------------------------
def causes_table(found: list[Cause], caption: str, what: str) -> Capped:
    """One row per cause (names and numbers taken out), with one gang or pod to read in full."""
    return Capped(found[:REASON_CAP], len(found), what, REASON_CAP, caption)


def gangs_view(report: dict[str, Any]) -> GangsTable:
    groups = [g for g in report.get("podGroups") or [] if isinstance(g, dict)]
    what = "gangs (those not bound whole first)"
    if not groups:
        return GangsTable([], 0, what)
    waits = {w.get("gang"): w.get("waitSeconds") for w in report.get("gangWaits") or [] if isinstance(w, dict)}
    reasons = {g.get("gang"): g.get("reason") for g in report.get("gangReasons") or [] if isinstance(g, dict)}
    tables = [
        causes_table(found, caption, "distinct causes")
        for started, caption in ((False, "Why gangs never started"), (True, "Why gangs waited before they started"))
        if (found := gang_causes(report, started))
    ]
    # Gangs that did not bind whole come first: on a long replay they are the ones worth reading.
    ordered = sorted(groups, key=lambda g: g.get("phase") in BOUND_PHASES)
    rows = []
    for g in ordered[:ROW_CAP]:
        key = f"{g.get('namespace', '')}/{g.get('name', '')}"
        wait = waits.get(key)
        rows.append(
            {
                "key": key,
                "css": "ok" if g.get("phase") in BOUND_PHASES else "bad",
                "phase": _value(g.get("phase")),
                "bound": _value(g.get("bound")),
                "min": _value(g.get("minMember")),
                "pods": _value(g.get("pods")),
                "timed_out": "yes" if g.get("timedOut") else "",
                "wait": _duration(wait) if wait is not None else "",
                "reason": str(reasons.get(key) or ""),
            }
        )
    return GangsTable(rows, len(groups), what, caption="All gangs" if tables else "", causes=tables)


def unbound_view(report: dict[str, Any]) -> UnboundTable:
    pods = [p for p in report.get("pods") or [] if isinstance(p, dict) and p.get("boundAt") is None]
    rows = [
        {"name": f"{p.get('namespace', '')}/{p.get('name', '')}", "reason": str(p.get("reason") or "")}
        for p in pods[:ROW_CAP]
    ]
    found = causes_table(unbound_causes(report), "By reason", "distinct reasons") if pods else None
    return UnboundTable(rows, len(pods), "unbound pods", causes=found)


# -- plots -----------------------------------------------------------------------------------------
def _gang_mode(report: dict[str, Any]) -> bool:
    """Gangs were scheduled as gangs (in pod mode nothing is ever reserved for one)."""
    s = report.get("summary") or {}
    return s.get("mode") != "pod" and bool(report.get("podGroups") or s.get("gangsTotal"))


def _reserved(runs: list[Run], name: str, x_max: float | None = None) -> Plot | None:
    """Under the allocation plot, on its time axis: what waiting gangs held. Reports from before it was
    recorded show nothing here."""
    if not any("reservedRatio" in (r.report.get("series") or {}) and _gang_mode(r.report) for r in runs):
        return None
    return reserved_chart(runs, name=name, title="capacity reserved for waiting gangs and not bound", x_max=x_max)


def _fragmentation(runs: list[Run], name: str, x_max: float | None = None) -> Plot | None:
    """Under the allocation plot, on its time axis: free GPU that no waiting pod could use. Runs without
    GPUs, and reports from before it was recorded, show nothing here."""
    if not any(fragmentation_summary(r.report) for r in runs):
        return None
    return fragmentation_chart(runs, name=name, title="GPU free but unusable by the waiting pods", x_max=x_max)


def _grid(runs: list[Run]) -> Grid:
    demand = None
    if any(has_demand_sweep(r.report) for r in runs):
        demand = demand_chart(runs, name="demand", title="GPU allocation against arrived GPU demand")
    return Grid(
        pending_chart(runs, name="pending", title="pending pods and gangs"),
        wait_cdf_chart(runs, name="waits", title="gang wait distribution"),
        demand,
    )


# -- pages -----------------------------------------------------------------------------------------
def render_html(report: dict[str, Any], title: str) -> str:
    runs = [Run("", report)]
    cards = [
        c
        for c in (
            summary_card(report),
            waits_card(report),
            demand_card(report),
            fragmentation_card(report),
            capacity_card(report),
        )
        if c
    ]
    return _ENV.get_template("report.html.j2").render(
        title=title,
        lede=_lede(report),
        cards=cards,
        errors=errors_list(report),
        allocation=allocation_chart(runs, name="allocation", title="allocated share of the cluster over virtual time"),
        reserved=_reserved(runs, "reserved"),
        fragmentation=_fragmentation(runs, "fragmentation"),
        grid=_grid(runs),
        gangs=gangs_view(report),
        unbound=unbound_view(report),
    )


def _compare_summary(a: dict[str, Any], b: dict[str, Any], label_a: str, label_b: str) -> CompareTable:
    rows = compare_rows(a, b, label_a, label_b)
    head, body = rows[0], rows[1:]
    extra = [
        (
            "gang wait " + k,
            _duration((a.get("gangWaitPercentiles") or {}).get(k)),
            _duration((b.get("gangWaitPercentiles") or {}).get(k)),
        )
        for k in ("p50", "p90", "p99")
    ]
    for level in DEMAND_LEVELS if has_demand_sweep(a) or has_demand_sweep(b) else ():
        cells = [(r.get("gpuAllocationAtDemand") or {}).get(level) if has_demand_sweep(r) else None for r in (a, b)]
        texts = [units.fmt_percent(c) if isinstance(c, (int, float)) else "–" for c in cells]
        extra.append((f"GPU allocation at {units.fmt_percent(float(level))} demand", texts[0], texts[1]))
    # compare_rows ends with one row per gang; our rows go before that block, which can be long.
    split = next((i for i, r in enumerate(body) if r == ("", "", "")), len(body))
    body = body[:split] + extra + body[split:]
    shown = [
        {"title": t, "a": ca, "b": cb, "sub": t.startswith("gang: ")}
        for t, ca, cb in body[:ROW_CAP]
        if (t, ca, cb) != ("", "", "")
    ]
    return CompareTable(shown, len(body), "rows", head=list(head))


def render_compare_html(a: dict[str, Any], b: dict[str, Any], label_a: str, label_b: str) -> str:
    runs = [Run(label_a, a), Run(label_b, b, dash=(6.0, 3.0))]
    x_max = t_max(runs)  # one time axis for both, so the side-by-side plots line up
    stacked = [
        {
            "label": run.label,
            "allocation": allocation_chart(
                [Run(run.label, run.report)], name=f"allocation-{i}", title=run.label, x_max=x_max, height=300
            ),
            "reserved": _reserved([Run(run.label, run.report)], f"reserved-{i}", x_max),
            "fragmentation": _fragmentation([Run(run.label, run.report)], f"fragmentation-{i}", x_max),
        }
        for i, run in enumerate(runs)
    ]
    return _ENV.get_template("compare.html.j2").render(
        title=f"{label_a} vs {label_b}",
        label_b=label_b,
        summary=_compare_summary(a, b, label_a, label_b),
        runs=stacked,
        grid=_grid(runs),
    )
