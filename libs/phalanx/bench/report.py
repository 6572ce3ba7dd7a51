"""The benchmark's table and the machine description written with its JSON."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

COLUMNS = [
    ("workload", "workload"),
    ("nodes", "nodes"),
    ("pods", "pods"),
    ("gangs", "gangs"),
    ("pods/s", "pods_per_second"),
    ("gangs/s", "gangs_per_second"),
    ("p50 ms", "p50"),
    ("p90 ms", "p90"),
    ("p99 ms", "p99"),
    ("CPU ms/pod", "cpu"),
    ("RSS MiB q/s/b/redis", "rss"),
    ("Redis cmds/pod", "redis_cmds"),
    ("Redis RT/gang", "redis_rt"),
    ("gRPC/gang", "grpc"),
]


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.2f}".rstrip("0").rstrip(".") if v != int(v) else f"{v:.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def row(r: dict[str, Any]) -> dict[str, str]:
    lat = r.get("latency_ms") or {}
    show_latency = r.get("kind") == "latency"  # a throughput run's latency is queueing: JSON only
    rss = r.get("peak_rss_mib") or {}
    gangs = r.get("gangs") or 0
    pods = f"{r['pods_bound']:,}" if r["pods_bound"] == r["pods"] else f"{r['pods_bound']:,}/{r['pods']:,}"
    gang_cell = "-" if not gangs else (f"{gangs:,}" if r["gangs_bound"] == gangs else f"{r['gangs_bound']:,}/{gangs:,}")
    rt_gang = r["redis"].get("round_trips_per_gang")
    return {
        "workload": r["workload"] + (" (lat)" if show_latency else ""),
        "nodes": _fmt(r["nodes"]),
        "pods": pods,
        "gangs": gang_cell,
        "pods_per_second": _fmt(r["pods_per_second"]),
        "gangs_per_second": _fmt(r.get("gangs_per_second")),
        "p50": _fmt(lat.get("p50")) if show_latency else "-",
        "p90": _fmt(lat.get("p90")) if show_latency else "-",
        "p99": _fmt(lat.get("p99")) if show_latency else "-",
        "cpu": _fmt(r.get("cpu_ms_per_pod")),
        "rss": "/".join(f"{rss.get(k) or 0:.0f}" for k in ("queue", "scheduler", "binder", "redis")),
        "redis_cmds": _fmt(r["redis"].get("commands_per_pod")),
        "redis_rt": _fmt(rt_gang),
        "grpc": _fmt(r["grpc"].get("calls_per_gang")),
    }


def table(results: list[dict[str, Any]]) -> str:
    """A Markdown (GitHub) table: the workload's name left, every number right-aligned as formatted by row()."""
    from tabulate import tabulate  # the `bench` extra; `phalanx chaos` reads machine() from here without it

    rows = [[x[k] for _, k in COLUMNS] for x in map(row, results)]
    return tabulate(
        rows,
        [h for h, _ in COLUMNS],
        tablefmt="github",
        disable_numparse=True,
        colalign=["left"] + ["right"] * (len(COLUMNS) - 1),
    )


def notes(results: list[dict[str, Any]]) -> list[str]:
    out = []
    transports = sorted({r.get("transport", "") for r in results} - {""})
    if transports:
        out.append(f"between the services: {', '.join(transports)}")
    for r in results:
        if "gpus" in r:
            g = r["gpus"]
            out.append(
                f"{r['workload']}: {g['bound']:,}/{g['total']:,} GPUs bound ({g['bound_fraction']:.1%}); "
                f"{g['requested']:,} requested"
            )
    return out


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = []
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": model or platform.processor(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "redis_server": _redis_version(),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "load_average_at_start": load,
    }


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], capture_output=True, text=True, timeout=10, cwd=Path(__file__).resolve().parent
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _redis_version() -> str:
    binary = shutil.which("redis-server")
    if not binary:
        return ""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    for part in out.split():
        if part.startswith("v="):
            return part[2:]
    return out.strip()


class LabelledResults:
    """A benchmark's results kept by label across runs: DIR/<name>.json ({"sets": {label: entry}}) and
    DIR/<name>.txt, the table of every label side by side (bench-startup, bench-restart, bench-idle)."""

    def __init__(self, out: Path, name: str) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.json_path, self.text_path = out / f"{name}.json", out / f"{name}.txt"
        self.doc: dict[str, Any] = json.loads(self.json_path.read_text()) if self.json_path.exists() else {"sets": {}}

    def get(self, label: str) -> dict[str, Any] | None:
        entry: dict[str, Any] | None = self.doc["sets"].get(label)
        return entry

    def save(self, label: str, entry: dict[str, Any], table: Callable[[dict[str, Any]], str]) -> str:
        """Records `entry` under `label` (replacing an earlier one) and writes both files; returns the table."""
        self.doc["sets"][label] = entry
        self.json_path.write_text(json.dumps(self.doc, indent=2) + "\n")
        text = table(self.doc)
        self.text_path.write_text(text + "\n")
        return text
