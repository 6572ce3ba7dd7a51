"""A simulation report as one self-contained HTML page: tables, and plots drawn as inline SVG.

Nothing is loaded from elsewhere (no script, font, stylesheet or image): the page is read on offline
machines and clusters, and attached to CI runs. Every string from the report is escaped.
"""

from __future__ import annotations

from html import escape
from typing import Any, Iterable, Sequence

from phalanx.sim import units
from phalanx.sim.causes import Cause, gang_causes, unbound_causes
from phalanx.sim.compare import compare_rows
from phalanx.sim.report_charts import (
    DEMAND_LEVELS,
    RESOURCE_NAMES,
    Run,
    allocation_chart,
    demand_chart,
    has_demand_sweep,
    pending_chart,
    reserved_chart,
    t_max,
    wait_cdf_chart,
    wait_values,
)

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

CSS = """
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       margin: 24px auto; max-width: 1180px; padding: 0 16px; color: #212529; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; }
h3 { font-size: 14px; margin: 14px 0 6px; color: #495057; } .cards h3 { margin-top: 0; }
.lede { color: #495057; margin: 0 0 16px; }
.cards { display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; }
.cards > div { flex: 0 1 auto; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 20px; }
table { border-collapse: collapse; font-size: 13px; }
th, td { padding: 3px 10px; border-bottom: 1px solid #e9ecef; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
thead th { background: #f1f3f5; }
tr.sub th { background: #f8f9fa; color: #495057; }
.bad { color: #c92a2a; } .ok { color: #2b8a3e; } .note { color: #868e96; font-size: 12px; }
.empty { color: #868e96; font-style: italic; border: 1px dashed #dee2e6; padding: 24px; text-align: center; }
.errors li { color: #c92a2a; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px; }
td.reason, span.reason { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px;
                         word-break: break-word; }
td.example { max-width: 420px; } td.example summary { cursor: pointer; white-space: nowrap; }
svg.chart { width: 100%; height: auto; display: block; }
svg .tick { font-size: 11px; fill: #495057; } svg .axis { font-size: 12px; fill: #343a40; }
svg .legend { font-size: 12px; fill: #212529; } svg text.marker { font-size: 10px; fill: #868e96; }
footer { margin-top: 32px; color: #adb5bd; font-size: 12px; }
"""


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


def _row(key: str, label: str, cell: str, css: str = "num") -> str:
    return (f'<tr data-key="{escape(key)}"><th>{escape(label)}</th>'
            f'<td class="{css}">{escape(cell)}</td></tr>')


def _table(head: Sequence[str], body: Iterable[str], caption: str = "") -> str:
    cap = f"<h3>{escape(caption)}</h3>" if caption else ""
    cols = "".join(f"<th>{escape(h)}</th>" for h in head)
    thead = f"<thead><tr>{cols}</tr></thead>" if head else ""
    return f"{cap}<table>{thead}<tbody>{''.join(body)}</tbody></table>"


def _capped(total: int, shown: int, what: str) -> str:
    if total <= shown:
        return ""
    return f'<p class="note">Showing the first {shown} of {units.fmt_number(total)} {escape(what)}.</p>'


# -- summary ---------------------------------------------------------------------------------------
def summary_table(report: dict[str, Any]) -> str:
    s = report.get("summary") or {}
    rows = []
    for key, label in SUMMARY_FIELDS:
        if key in s:
            rows.append(_row(key, label, _duration(s[key]) if key in DURATION_KEYS else _value(s[key])))
    known = {k for k, _ in SUMMARY_FIELDS} | {"errors"}
    rows += [_row(k, k, _value(v)) for k, v in s.items() if k not in known and not isinstance(v, (dict, list))]
    rows.append(_row("errors", "errors", units.fmt_number(len(s.get("errors") or []))))
    return _table([], rows, "Run")


def waits_table(report: dict[str, Any]) -> str:
    pct = report.get("gangWaitPercentiles") or {}
    if not pct:
        has_gangs = report.get("podGroups") or (report.get("summary") or {}).get("gangsTotal")
        return _table([], [_row("gangWaits", "gang waits", "no gang started" if has_gangs else "no gangs", "")],
                      "Gang wait")
    rows = [_row(k, k, _duration(pct[k])) for k in ("p50", "p90", "p99") if k in pct]
    rows.append(_row("gangsStarted", "gangs started", units.fmt_number(len(wait_values(report)))))
    return _table([], rows, "Gang wait (first pod's arrival to min bound)")


def demand_table(report: dict[str, Any]) -> str:
    """The FGD metric, for a run that is its sweep; nothing otherwise."""
    if not has_demand_sweep(report):
        return ""
    at = report.get("gpuAllocationAtDemand") or {}
    rows = []
    for level in DEMAND_LEVELS:
        v = at.get(level)
        cell = "not reached" if not isinstance(v, (int, float)) else units.fmt_percent(v)
        rows.append(_row(f"demand:{level}", f"at {units.fmt_percent(float(level))} arrived demand", cell))
    return _table([], rows, "GPU allocation at arrived demand")


def capacity_table(report: dict[str, Any]) -> str:
    cap = (report.get("series") or {}).get("capacity") or {}
    if not cap:
        return ""
    rows = []
    for res, v in cap.items():
        cell = _bytes(v) if res == "memory" else units.fmt_number(v) + (" cores" if res == "cpu" else "")
        rows.append(_row(f"capacity:{res}", RESOURCE_NAMES.get(res, res), cell))
    return _table([], rows, "Cluster capacity")


def errors_list(report: dict[str, Any]) -> str:
    errors = (report.get("summary") or {}).get("errors") or []
    if not errors:
        return ""
    items = "".join(f"<li>{escape(str(e))}</li>" for e in errors[:ROW_CAP])
    return f'<h3>Errors</h3><ul class="errors">{items}</ul>{_capped(len(errors), ROW_CAP, "errors")}'


# -- tables of gangs and pods ----------------------------------------------------------------------
def causes_table(found: list[Cause], caption: str, what: str) -> str:
    """One row per cause (names and numbers taken out), with one gang or pod to read in full."""
    rows = [f'<tr><td class="num">{units.fmt_number(c.pods)}</td><td class="num">{units.fmt_number(c.gangs)}</td>'
            f'<td class="reason">{escape(c.cause)}</td>'
            f'<td class="example"><details><summary>{escape(c.example)}</summary>'
            f'<span class="reason">{escape(c.example_reason)}</span></details></td></tr>'
            for c in found[:REASON_CAP]]
    return _table(["pods", "gangs", "cause", "example"], rows, caption) + _capped(len(found), REASON_CAP, what)


def gangs_table(report: dict[str, Any]) -> str:
    groups = [g for g in report.get("podGroups") or [] if isinstance(g, dict)]
    if not groups:
        return empty_note("no gangs")
    waits = {w.get("gang"): w.get("waitSeconds") for w in report.get("gangWaits") or [] if isinstance(w, dict)}
    reasons = {g.get("gang"): g.get("reason") for g in report.get("gangReasons") or [] if isinstance(g, dict)}
    out = ""
    for started, caption in ((False, "Why gangs never started"), (True, "Why gangs waited before they started")):
        found = gang_causes(report, started)
        out += causes_table(found, caption, "distinct causes") if found else ""
    # Gangs that did not bind whole come first: on a long replay they are the ones worth reading.
    ordered = sorted(groups, key=lambda g: g.get("phase") in BOUND_PHASES)
    rows = []
    for g in ordered[:ROW_CAP]:
        key = f"{g.get('namespace', '')}/{g.get('name', '')}"
        css = "ok" if g.get("phase") in BOUND_PHASES else "bad"
        wait = waits.get(key)
        rows.append(
            f"<tr><td>{escape(key)}</td><td class=\"{css}\">{escape(_value(g.get('phase')))}</td>"
            f"<td class=\"num\">{escape(_value(g.get('bound')))}/{escape(_value(g.get('minMember')))}</td>"
            f"<td class=\"num\">{escape(_value(g.get('pods')))}</td>"
            f"<td>{'yes' if g.get('timedOut') else ''}</td>"
            f"<td class=\"num\">{escape(_duration(wait)) if wait is not None else ''}</td>"
            f"<td class=\"reason\">{escape(str(reasons.get(key) or ''))}</td></tr>")
    head = ["gang", "phase", "bound/min", "pods", "timed out", "wait", "reason"]
    table = _table(head, rows, "All gangs" if out else "")
    return out + table + _capped(len(groups), ROW_CAP, "gangs (those not bound whole first)")


def unbound_pods(report: dict[str, Any]) -> str:
    pods = [p for p in report.get("pods") or [] if isinstance(p, dict) and p.get("boundAt") is None]
    if not pods:
        return empty_note("every pod was bound")
    out = causes_table(unbound_causes(report), "By reason", "distinct reasons")
    rows = [f"<tr><td>{escape(str(p.get('namespace', '')))}/{escape(str(p.get('name', '')))}</td>"
            f"<td class=\"reason\">{escape(str(p.get('reason') or ''))}</td></tr>" for p in pods[:ROW_CAP]]
    out += _table(["pod", "reason"], rows, "Pods")
    return out + _capped(len(pods), ROW_CAP, "unbound pods")


def empty_note(message: str) -> str:
    return f'<p class="empty">{escape(message)}</p>'


# -- pages -----------------------------------------------------------------------------------------
def _page(title: str, body: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{escape(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n{body}\n"
            "<footer>Generated by phalanx. Self-contained: no scripts, fonts or network.</footer>\n"
            "</body>\n</html>\n")


def _lede(report: dict[str, Any]) -> str:
    s = report.get("summary") or {}
    if not s:
        return ""
    return (f'<p class="lede">mode {escape(_value(s.get("mode")))}: {escape(_value(s.get("podsBound")))}/'
            f'{escape(_value(s.get("podsTotal")))} pods bound, {escape(_value(s.get("gangsBound")))}/'
            f'{escape(_value(s.get("gangsTotal")))} gangs bound whole, over '
            f'{escape(_duration(float(s.get("virtualSeconds") or 0)))} of virtual time.</p>')


def _section(heading: str, content: str) -> str:
    return f"<section><h2>{escape(heading)}</h2>\n{content}\n</section>"


def render_html(report: dict[str, Any], title: str) -> str:
    runs = [Run("", report)]
    cards = "".join(f"<div>{t}</div>" for t in (summary_table(report), waits_table(report), demand_table(report),
                                               capacity_table(report)) if t)
    body = [
        f"<h1>{escape(title)}</h1>", _lede(report),
        _section("Summary", f'<div class="cards">{cards}</div>{errors_list(report)}'),
        _section("Allocation over virtual time",
                 allocation_chart(runs, name="allocation", title="allocated share of the cluster over virtual time")
                 + _reserved(runs, "reserved")),
        _secondary_charts(runs),
        _section("Gangs", gangs_table(report)),
        _section("Unbound pods", unbound_pods(report)),
    ]
    return _page(title, "\n".join(body))


def _reserved(runs: list[Run], name: str, x_max: float | None = None) -> str:
    """Under the allocation plot, on its time axis: what waiting gangs held. Reports from before it was
    recorded show nothing here."""
    if not any("reservedRatio" in (r.report.get("series") or {}) and _gang_mode(r.report) for r in runs):
        return ""
    return ("<h3>Reserved for waiting gangs, not bound</h3>"
            + reserved_chart(runs, name=name, title="capacity reserved for waiting gangs and not bound",
                             x_max=x_max)
            + '<p class="note">Capacity placed for pods of gangs short of their minimum (or waiting for their '
              'GangGroup): held, idle, and closed to every other pod until the gang binds or times out.</p>')


def _gang_mode(report: dict[str, Any]) -> bool:
    """Gangs were scheduled as gangs (in pod mode nothing is ever reserved for one)."""
    s = report.get("summary") or {}
    return s.get("mode") != "pod" and bool(report.get("podGroups") or s.get("gangsTotal"))


def _secondary_charts(runs: list[Run]) -> str:
    """The pending and gang-wait plots, in a grid (one run, or two overlaid), and GPU allocation against
    arrived demand for runs that are that sweep."""
    parts = [
        '<div class="grid">',
        _section("Pending over time", pending_chart(runs, name="pending", title="pending pods and gangs")),
        _section("Gang wait (CDF)", wait_cdf_chart(runs, name="waits", title="gang wait distribution")),
    ]
    if any(has_demand_sweep(r.report) for r in runs):
        parts.append(_section("GPU allocation against arrived GPU demand",
                              demand_chart(runs, name="demand", title="GPU allocation against arrived GPU demand")))
    return "\n".join(parts + ["</div>"])


def _compare_table(a: dict[str, Any], b: dict[str, Any], label_a: str, label_b: str) -> str:
    rows = compare_rows(a, b, label_a, label_b)
    head, body = rows[0], rows[1:]
    extra = [("gang wait " + k, _duration((a.get("gangWaitPercentiles") or {}).get(k)),
              _duration((b.get("gangWaitPercentiles") or {}).get(k))) for k in ("p50", "p90", "p99")]
    for level in DEMAND_LEVELS if has_demand_sweep(a) or has_demand_sweep(b) else ():
        cells = [(r.get("gpuAllocationAtDemand") or {}).get(level) if has_demand_sweep(r) else None for r in (a, b)]
        texts = [units.fmt_percent(c) if isinstance(c, (int, float)) else "–" for c in cells]
        extra.append((f"GPU allocation at {units.fmt_percent(float(level))} demand", texts[0], texts[1]))
    # compare_rows ends with one row per gang; our rows go before that block, which can be long.
    split = next((i for i, r in enumerate(body) if r == ("", "", "")), len(body))
    body = body[:split] + extra + body[split:]
    html_rows = []
    for title, ca, cb in body[:ROW_CAP]:
        if (title, ca, cb) == ("", "", ""):
            continue
        if title.startswith("gang: "):
            html_rows.append(f'<tr class="sub"><th>{escape(title)}</th><th>{escape(ca)}</th><th>{escape(cb)}</th></tr>')
            continue
        html_rows.append(f'<tr><th>{escape(title)}</th><td class="num">{escape(ca)}</td>'
                         f'<td class="num">{escape(cb)}</td></tr>')
    return _table(list(head), html_rows) + _capped(len(body), ROW_CAP, "rows")


def render_compare_html(a: dict[str, Any], b: dict[str, Any], label_a: str, label_b: str) -> str:
    title = f"{label_a} vs {label_b}"
    runs = [Run(label_a, a), Run(label_b, b, dash="6 3")]
    x_max = t_max(runs)  # one time axis for both, so the side-by-side plots line up
    stacked = "\n".join(
        _section(f"Allocation over virtual time: {run.label}",
                 allocation_chart([Run(run.label, run.report)], name=f"allocation-{i}", title=run.label, x_max=x_max, height=300)
                 + _reserved([Run(run.label, run.report)], f"reserved-{i}", x_max))
        for i, run in enumerate(runs))
    body = [
        f"<h1>{escape(title)}</h1>",
        f'<p class="lede">Two simulation reports side by side; in overlaid plots {escape(label_b)} is dashed.</p>',
        _section("Summary", _compare_table(a, b, label_a, label_b)),
        stacked,
        _secondary_charts(runs),
    ]
    return _page(title, "\n".join(body))
