"""bench-k8s --profile: py-spy on each of Phalanx's Python processes during a run, and the summary of it.

`Profiler` starts `py-spy record --rate 100 --format raw --gil --nonblocking` on the queue, binder and
scheduler as soon as the stack is up (its services healthy: Python start-up before that is not sampled), and
stops each with SIGINT before the stack stops, so py-spy writes its file: DIR/<run>-<process>.txt, one
collapsed stack and its sample count a line. DIR/<run>-meta.json keeps the run's pods bound and the rate.

`summarize_file` reads one such file and `render` prints its top functions by self samples (the function
was running) and by inclusive samples (it was on the stack), as CPU microseconds per bound pod:
samples / rate / pods * 1e6. With --gil py-spy samples only the thread holding the GIL, so this is the
CPU spent running Python (and C called with the GIL held); time in C that released the GIL (socket and TLS
I/O, Redis replies being read) is not in it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RATE = 100
PYTHON_PROCESSES = ("queue", "binder", "scheduler", "combined")  # combined: the one process of that layout
GIL_NOTE = (
    "py-spy --gil: only samples of the thread holding the GIL are counted (Python running, or C called with "
    "the GIL held); C that released the GIL (socket/TLS I/O, waiting) is not in these figures."
)


def py_spy_binary() -> str | None:
    """py-spy next to this Python (the venv's), else on PATH."""
    near = Path(sys.executable).parent / "py-spy"
    return str(near) if os.access(near, os.X_OK) else shutil.which("py-spy")


class Profiler:
    """py-spy recorders of one run's Python processes."""

    def __init__(self, out_dir: Path, run: str, rate: int = RATE) -> None:
        self.out_dir, self.run, self.rate = out_dir, run, rate
        self.binary = py_spy_binary()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.files: dict[str, Path] = {}
        self.errors: list[str] = []

    def attach(self, pids: dict[str, int]) -> None:
        if self.binary is None:
            self.errors.append("py-spy not found (pip install py-spy)")
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        for name in PYTHON_PROCESSES:
            if name not in pids:
                continue
            out = self.out_dir / f"{self.run}-{name}.txt"
            argv = [self.binary, "record", "--pid", str(pids[name]), "--rate", str(self.rate)]
            argv += ["--format", "raw", "--gil", "--nonblocking", "-o", str(out)]
            with open(out.with_suffix(".log"), "wb") as log:
                self.procs[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            self.files[name] = out

    def stop(self, timeout: float = 30.0) -> None:
        """SIGINT to each recorder (it writes its file and exits); killed if it does not within `timeout`."""
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for name, p in self.procs.items():
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                self.errors.append(f"py-spy on {name} did not stop on SIGINT")
            if not self.files[name].exists():
                self.errors.append(f"py-spy on {name} wrote nothing (see {self.files[name].with_suffix('.log')})")
        self.procs = {}

    def write_meta(self, pods_bound: int) -> Path:
        meta = self.out_dir / f"{self.run}-meta.json"
        doc = {
            "run": self.run,
            "rate": self.rate,
            "pods_bound": pods_bound,
            "files": {k: v.name for k, v in self.files.items()},
            "errors": self.errors,
        }
        meta.write_text(json.dumps(doc, indent=2) + "\n")
        return meta


_LINE = re.compile(r":\d+\)$")


def function_of(frame: str) -> str:
    """`name (file:line)` -> `name (file)`: a function, whichever of its lines was running."""
    return _LINE.sub(")", frame)


@dataclass
class StackSummary:
    samples: int = 0
    self_samples: Counter[str] = field(default_factory=Counter)
    inclusive: Counter[str] = field(default_factory=Counter)


def summarize_stacks(lines: list[str]) -> StackSummary:
    """py-spy raw (collapsed) lines `f1;f2;...;fn COUNT`, root first -> samples by function."""
    out = StackSummary()
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [function_of(f) for f in stack.split(";") if f]
        if not frames:
            continue
        out.samples += n
        out.self_samples[frames[-1]] += n
        for fn in set(frames):  # a recursive function counts once per sample
            out.inclusive[fn] += n
    return out


def us_per_pod(samples: int, rate: float, pods: int) -> float:
    """Sampled CPU as microseconds per bound pod: samples / rate / pods * 1e6."""
    return samples / rate / pods * 1e6 if pods > 0 and rate > 0 else 0.0


def render(name: str, s: StackSummary, rate: float, pods: int, top: int = 15) -> str:
    lines = [
        f"== {name}: {s.samples:,} samples at {rate:g}/s = {s.samples / rate:.2f} s of GIL-holding CPU, "
        f"{pods:,} pods bound: {us_per_pod(s.samples, rate, pods):,.0f} us/pod"
    ]
    for title, counter in (("self", s.self_samples), ("inclusive", s.inclusive)):
        lines.append(f"  {f'top {top} by {title} samples':68}{'samples':>9}{'us/pod':>10}")
        for fn, n in counter.most_common(top):
            label = fn if len(fn) <= 66 else "..." + fn[-63:]
            lines.append(f"    {label:66} {n:>8,} {us_per_pod(n, rate, pods):>9,.1f}")
    return "\n".join(lines)


def _meta_for(path: Path) -> dict[str, Any]:
    """The meta file of the run that wrote `path` (same directory), or {}."""
    for meta in sorted(path.parent.glob("*-meta.json")):
        try:
            doc = json.loads(meta.read_text())
        except (OSError, ValueError):
            continue
        if path.name in (doc.get("files") or {}).values():
            return dict(doc)
    return {}


def summary_main(files: list[str], pods: int | None = None, top: int = 15) -> int:
    """`phalanx bench-k8s --profile-summary FILE...`: each file's top functions, then all files together."""
    total = StackSummary()
    rates: set[float] = set()
    pods_seen: set[int] = set()
    print(GIL_NOTE)
    for f in files:
        path = Path(f)
        meta = _meta_for(path)
        rate = float(meta.get("rate") or RATE)
        n = pods if pods is not None else int(meta.get("pods_bound") or 0)
        if n <= 0:
            print(f"{f}: no pods count (no {path.parent}/*-meta.json names it): give --pods N", file=sys.stderr)
            return 2
        s = summarize_stacks(path.read_text().splitlines())
        print(render(path.name, s, rate, n, top))
        rates.add(rate)
        pods_seen.add(n)
        total.samples += s.samples
        total.self_samples.update(s.self_samples)
        total.inclusive.update(s.inclusive)
    if len(files) > 1 and len(rates) == 1 and len(pods_seen) == 1:
        print(render("all files together", total, rates.pop(), pods_seen.pop(), top))
    return 0
