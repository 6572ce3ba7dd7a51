"""Puts two simulation reports side by side (e.g. --mode pod against --mode gang, or two profiles)."""

from __future__ import annotations

from typing import Any

from phalanx.report import units

ROWS = [
    ("pods bound", "podsBound"),
    ("pods finished", "podsFinished"),
    ("pods never bound", "podsUnbound"),
    ("gangs bound whole", "gangsBound"),
    ("gangs partially bound (deadlock risk)", "partialGangs"),
    ("gangs timed out", "gangsTimedOut"),
    ("virtual time until quiet", "virtualSeconds"),
]
DURATIONS = {"virtualSeconds"}
FRAGMENTATION_ROW = "GPU free but unusable by waiting pods (mean share)"


def _fmt(value: Any, key: str = "") -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return units.fmt_duration(value) if key in DURATIONS else units.fmt_number(value)


def _fragmentation(report: dict[str, Any]) -> float | None:
    """The run's mean share of free GPU that no waiting pod could use (phalanx.sim.fragmentation)."""
    v = (report.get("gpuFragmentationSummary") or {}).get("meanFragmentedRatio")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def compare_rows(a: dict[str, Any], b: dict[str, Any], label_a: str, label_b: str) -> list[tuple[str, str, str]]:
    sa, sb = a["summary"], b["summary"]
    rows = [("", label_a, label_b), ("", f"({sa.get('podsTotal')} pods)", f"({sb.get('podsTotal')} pods)")]
    rows += [(title, _fmt(sa.get(key, "-"), key), _fmt(sb.get(key, "-"), key)) for title, key in ROWS]
    if _fragmentation(a) is not None or _fragmentation(b) is not None:
        cells = [units.fmt_percent(v) if (v := _fragmentation(r)) is not None else "-" for r in (a, b)]
        rows.append((FRAGMENTATION_ROW, cells[0], cells[1]))
    groups_a = {(g["namespace"], g["name"]): g for g in a.get("podGroups", [])}
    groups_b = {(g["namespace"], g["name"]): g for g in b.get("podGroups", [])}
    keys = sorted(set(groups_a) | set(groups_b))
    if keys:
        rows.append(("", "", ""))
        rows.append(("gang: bound/min phase", label_a, label_b))
        for k in keys:
            cells = [
                "-" if g is None else f"{g['bound']}/{g['minMember']} {g['phase']}"
                for g in (groups_a.get(k), groups_b.get(k))
            ]
            rows.append((f"{k[0]}/{k[1]}", cells[0], cells[1]))
    return rows


def compare_table(a: dict[str, Any], b: dict[str, Any], label_a: str, label_b: str) -> str:
    rows = compare_rows(a, b, label_a, label_b)
    w0 = max(len(r[0]) for r in rows) + 2
    w1 = max(len(r[1]) for r in rows) + 3
    w2 = max(len(r[2]) for r in rows) + 3
    return "\n".join(f"{r[0]:{w0}}{r[1]:>{w1}}{r[2]:>{w2}}".rstrip() for r in rows)
