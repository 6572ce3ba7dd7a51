"""Measurement helpers: percentiles (numpy), Redis counters, gRPC counts. Process CPU and memory: procs.py."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from phalanx.rpc.call_stats import total_calls


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100), linear between closest ranks (numpy's default); None for no values.
    A q outside 0..100 raises ValueError."""
    if not len(values):
        return None
    return float(np.percentile(values, q))


def summarize_ms(seconds: Sequence[float]) -> dict[str, float | int | None]:
    """p50/p90/p99/max of durations given in seconds, in milliseconds."""
    ms = [s * 1000.0 for s in seconds]

    def r(v: float | None) -> float | None:
        return None if v is None else round(v, 2)

    return {
        "count": len(ms),
        "p50": r(percentile(ms, 50)),
        "p90": r(percentile(ms, 90)),
        "p99": r(percentile(ms, 99)),
        "max": r(max(ms) if ms else None),
    }


# -- Redis ---------------------------------------------------------------------------------------------------
def redis_counters(client: Any) -> dict[str, int]:
    """One INFO round trip: every command executed (those run inside Lua scripts included) and the read
    events the server processed (about one per client round trip: a pipeline arrives in one read)."""
    info = client.execute_command("INFO", "stats", "commandstats")
    if isinstance(info, (bytes, str)):  # clients without INFO parsing
        from redis._parsers.helpers import parse_info

        info = parse_info(info)
    commands = sum(v["calls"] for k, v in info.items() if k.startswith("cmdstat_"))
    per_command = {k[len("cmdstat_") :]: int(v["calls"]) for k, v in info.items() if k.startswith("cmdstat_")}
    return {
        "commands": commands,
        "reads": int(info["total_reads_processed"]),
        **{f"cmd:{k}": v for k, v in per_command.items()},
    }


def redis_delta(before: dict[str, int], after: dict[str, int], own_commands: int) -> dict[str, Any]:
    """Counters of the measured phase, without the bench's own commands (one INFO and its polls; each
    is one command and one read)."""
    by_cmd = {k[4:]: after.get(k, 0) - before.get(k, 0) for k in after if k.startswith("cmd:")}
    by_cmd = {k: v for k, v in by_cmd.items() if v}
    return {
        "commands": after["commands"] - before["commands"] - own_commands,
        "round_trips": after["reads"] - before["reads"] - own_commands,
        "by_command": dict(sorted(by_cmd.items(), key=lambda kv: -kv[1])),
    }


# -- gRPC counts ----------------------------------------------------------------------------------------------
def rpc_snapshot(pids: dict[str, int], directory: Path, timeout: float = 10.0) -> dict[str, dict[str, int]]:
    """Asks each service (SIGUSR1) for its per-method message counts and waits for fresh dumps."""
    previous = {name: _read_dump(directory / f"{name}.json").get("seq", 0) for name in pids}
    deadline = time.monotonic() + timeout
    out: dict[str, dict[str, int]] = {}
    asked = 0.0
    while len(out) < len(pids):
        now = time.monotonic()
        if now - asked >= 0.5:  # ask again now and then: a signal can be lost (e.g. under a ptrace profiler)
            for name, pid in pids.items():
                if name not in out:
                    os.kill(pid, signal.SIGUSR1)
            asked = now
        for name in pids:
            if name not in out:
                dump = _read_dump(directory / f"{name}.json")
                if dump.get("seq", 0) > previous[name]:
                    out[name] = dump["calls"]
        if len(out) < len(pids):
            if now > deadline:
                missing = ", ".join(n for n in pids if n not in out)
                raise RuntimeError(f"service(s) {missing} did not write their gRPC counts to {directory}")
            time.sleep(0.005)
    return out


def _read_dump(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def rpc_delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, Any]:
    by_method: dict[str, int] = {}
    for service, calls in after.items():
        old = before.get(service, {})
        for method, n in calls.items():
            d = n - old.get(method, 0)
            if d:
                by_method[method] = by_method.get(method, 0) + d
    return {"calls": total_calls(by_method), "by_method": dict(sorted(by_method.items(), key=lambda kv: -kv[1]))}


def write_results(out_dir: str | Path, name: str, doc: dict[str, Any], text: str) -> None:
    """A benchmark's results, kept in the repository: `name`.json (the data) and `name`.txt (the table),
    and the table printed."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(doc, indent=2) + "\n")
    (out / f"{name}.txt").write_text(text)
    print(text, end="")
