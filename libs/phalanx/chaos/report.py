"""The chaos run's table (per target), its JSON, and one progress line per trial."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from phalanx.bench.stats import percentile
from phalanx.chaos.trials import TrialResult

HEADERS = (
    "target",
    "trials",
    "killed",
    "with violations",
    "violations by kind",
    "gangs bound",
    "recover p50 s",
    "recover p99 s",
    "kill to binding p50 / p99 s",
    "unplanned exits",
    "hit time limit",
)


def summarize(results: Sequence[TrialResult]) -> list[dict[str, Any]]:
    """One row per target, in the order targets first appear."""
    order: list[str] = []
    for r in results:
        if r.target not in order:
            order.append(r.target)
    rows = []
    for target in order:
        mine = [r for r in results if r.target == target]
        kinds: dict[str, int] = {}
        for r in mine:
            for kind, n in r.violation_counts().items():
                kinds[kind] = kinds.get(kind, 0) + n
        recover = [r.recover_seconds for r in mine if r.recover_seconds is not None]
        p50, p99 = percentile(recover, 50), percentile(recover, 99)
        # From the kill (not the restart) to the next binding: what a failover costs (Sentinel targets).
        outage = [r.kill_to_binding_seconds for r in mine if r.kill_to_binding_seconds is not None]
        k50, k99 = percentile(outage, 50), percentile(outage, 99)
        rows.append(
            {
                "target": target,
                "trials": len(mine),
                "killed": sum(1 for r in mine if r.killed_at is not None),
                "trials_with_violations": sum(1 for r in mine if r.violations),
                "violations_by_kind": dict(sorted(kinds.items())),
                "gangs_bound": sum(r.gangs_bound for r in mine),
                "gangs_total": sum(r.gangs_total for r in mine),
                "recover_p50_s": None if p50 is None else round(p50, 2),
                "recover_p99_s": None if p99 is None else round(p99, 2),
                "kill_to_binding_p50_s": None if k50 is None else round(k50, 2),
                "kill_to_binding_p99_s": None if k99 is None else round(k99, 2),
                "unplanned_exits": sum(len(r.unplanned_exits) for r in mine),
                "time_limit_trials": sum(1 for r in mine if not r.finished),
            }
        )
    return rows


def _cells(row: dict[str, Any]) -> list[str]:
    kinds = ", ".join(f"{k} {n}" for k, n in row["violations_by_kind"].items()) or "-"
    fmt = lambda v: "-" if v is None else f"{v:.2f}"
    return [
        row["target"],
        str(row["trials"]),
        str(row["killed"]),
        str(row["trials_with_violations"]),
        kinds,
        f"{row['gangs_bound']}/{row['gangs_total']}",
        fmt(row["recover_p50_s"]),
        fmt(row["recover_p99_s"]),
        "-"
        if row.get("kill_to_binding_p50_s") is None
        else f"{fmt(row['kill_to_binding_p50_s'])} / {fmt(row['kill_to_binding_p99_s'])}",
        str(row["unplanned_exits"]),
        str(row["time_limit_trials"]),
    ]


def table(rows: Sequence[dict[str, Any]]) -> str:
    body = [_cells(r) for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in body)) if body else len(h) for i, h in enumerate(HEADERS)]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(HEADERS, widths)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    for cells in body:
        lines.append(
            "| "
            + " | ".join(c.ljust(w) if i in (0, 4) else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
            + " |"
        )
    return "\n".join(lines)


def examples(results: Sequence[TrialResult]) -> list[str]:
    """The first violation of each kind, with its trial, seed and log directory (to re-run and read)."""
    out, seen = [], set()
    for r in results:
        for v in r.violations:
            if v.kind not in seen:
                seen.add(v.kind)
                out.append(
                    f"{v.kind}: [{r.trial} {r.target} seed {r.seed}, {v.at:.1f}s] {v.message} (logs: {r.run_dir})"
                )
    return out


def progress_line(done: int, total: int, r: TrialResult) -> str:
    counts = r.violation_counts()
    verdict = "ok" if not counts else "VIOLATIONS " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))
    kill = "" if r.killed_at is None else f" killed {r.killed_at:.1f}s"
    if r.restarted_at is not None:
        kill += f" back {r.restarted_at:.1f}s"
    recover = "" if r.recover_seconds is None else f" recover {r.recover_seconds:.2f}s"
    if r.kill_to_binding_seconds is not None:
        recover += f" kill-to-binding {r.kill_to_binding_seconds:.2f}s"
    if not r.finished and r.last_binding_at is not None:
        recover += f" last binding {r.last_binding_at:.1f}s"
    extra = f" unplanned exits: {'; '.join(r.unplanned_exits)}" if r.unplanned_exits else ""
    notes = f" notes: {'; '.join(r.notes)}" if r.notes else ""
    logs = f" logs: {r.run_dir}" if counts else ""
    return (
        f"[{done:>3}/{total}] {r.target:<22} {r.trial} seed {r.seed:<10} gangs {r.gangs_bound}/{r.gangs_total} "
        f"{r.seconds:5.1f}s{kill}{recover} {verdict}{extra}{notes}{logs}"
    )


def write(results: Sequence[TrialResult], header: dict[str, Any], json_path: Path, text_path: Path) -> str:
    """Writes the JSON (machine, options, summary, every trial) and the text table; returns the text."""
    rows = summarize(results)
    extra = [str(line) for line in header.get("notes", [])]
    text = "\n".join([table(rows), "", *extra, *([""] if extra else []), *examples(results)]) + "\n"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(
        json.dumps({**header, "summary": rows, "trials": [asdict(r) for r in results]}, indent=2, default=str) + "\n"
    )
    machine = header.get("machine") or {}
    text_path.write_text(
        f"phalanx chaos on {machine.get('cpu_count')} cores ({machine.get('cpu_model')}), "
        f"commit {str(machine.get('git_commit', ''))[:12]}"
        f"{' (dirty)' if machine.get('git_dirty') else ''}, {machine.get('date')}\n\n{text}"
    )
    return text
