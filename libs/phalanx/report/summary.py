"""The one-line summary of a simulation report, and its most common causes of unbound pods, for stderr."""

from __future__ import annotations

from typing import Any

from phalanx.report import causes, units

TEXT_CAUSES = 3  # causes of unbound pods printed under the one-line summary
TEXT_JOBS = 10  # PhalanxJobs printed, one line each


def summary_lines(report: dict[str, Any]) -> list[str]:
    s = report["summary"]
    lines = [
        f"mode {s['mode']}: {s['podsBound']}/{s['podsTotal']} pods bound, {s['podsFinished']} finished; "
        f"gangs {s['gangsBound']}/{s['gangsTotal']} bound, {s['partialGangs']} partial, {s['gangsTimedOut']} timed out; "
        f"virtual {units.fmt_duration(s['virtualSeconds'])} in {units.fmt_duration(s['wallSeconds'])} wall",
    ]
    found = causes.unbound_causes(report)
    for c in found[:TEXT_CAUSES]:
        in_gangs = f" of {units.fmt_number(c.gangs)} gang{'s' if c.gangs != 1 else ''}" if c.gangs else ""
        lines.append(
            f"  not bound: {units.fmt_number(c.pods)} pod{'s' if c.pods != 1 else ''}{in_gangs}: "
            f"{c.cause} (e.g. {c.example})"
        )
    if len(found) > TEXT_CAUSES:
        lines.append(f"  not bound: {len(found) - TEXT_CAUSES} more causes (see the report's pods)")
    jobs = report.get("jobs") or []
    for j in jobs[:TEXT_JOBS]:
        stages = ", ".join(f"{st['stage']} at {units.fmt_duration(st['at'])}" for st in j["stages"])
        times = [
            f"{what} {units.fmt_duration(j[key])}"
            for what, key in (("waited", "waitSeconds"), ("ran", "runSeconds"))
            if j.get(key) is not None
        ]
        if j.get("restarts"):
            times.append(f"{j['restarts']} restart{'s' if j['restarts'] != 1 else ''}")
        lines.append(f"  job {j['namespace']}/{j['name']}: {stages}" + (f"; {', '.join(times)}" if times else ""))
    if len(jobs) > TEXT_JOBS:
        lines.append(f"  job: {len(jobs) - TEXT_JOBS} more (see the report's jobs)")
    for e in s["errors"]:
        lines.append(f"  error: {e}")
    return lines
