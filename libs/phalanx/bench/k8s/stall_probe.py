"""The machine's own pauses during a steady run, and which of the slowest pods they overlap.

Under steady arrival the slowest 1% of pods come in bunches, with either scheduler. To tell a bunch the machine
caused from one the scheduler did, a bare interpreter with nothing else to do sleeps 2 ms at a time and notes
each wake-up that comes late: a late wake-up of an idle process means both cores were taken by something else
(the API server's collector, etcd, the VM's host) for that long. A slow pod whose life spans such a pause waited
on the machine, whichever scheduler ran; the report counts those among the slowest 1%.

The probe runs in a process of its own, not as a thread of this harness, whose own threads (its watches, the
arrivals) would hold its interpreter's lock and be taken for pauses.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from phalanx.testing.children import exit_with_parent_argv, stop_child

STEP_S = 0.002  # the probe's sleep
NOTED_MS = 6.0  # late wake-ups the probe reports at all
STALL_MS = 10.0  # the pauses the report counts: several times a loaded machine's ordinary wake-up delay

# -I -S: no site, no user paths, nothing imported but time; one line per late wake-up, flushed at once.
_PROBE = (
    "import sys, time\n"
    "step, noted = float(sys.argv[1]), float(sys.argv[2]) / 1000\n"
    "while True:\n"
    "    t = time.perf_counter()\n"
    "    time.sleep(step)\n"
    "    late = time.perf_counter() - t - step\n"
    "    if late >= noted:\n"
    "        sys.stdout.write(f'{time.time():.4f} {late * 1000:.1f}\\n')\n"
    "        sys.stdout.flush()\n"
)


@dataclass(frozen=True)
class Stall:
    """A wake-up `ms` late, seen at `ended_unix` (the pause ran up to then)."""

    ended_unix: float
    ms: float

    @property
    def began_unix(self) -> float:
        return self.ended_unix - self.ms / 1000


class StallProbe:
    """The probe process, started and stopped around the arrivals; `stop` returns the pauses it saw."""

    def __init__(self, step_s: float = STEP_S, noted_ms: float = NOTED_MS) -> None:
        self.argv = [sys.executable, "-I", "-S", "-c", _PROBE, repr(step_s), repr(noted_ms)]
        self._stalls: list[Stall] = []
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> StallProbe:
        # Killed with this process should the harness be interrupted (PR_SET_PDEATHSIG).
        self._proc = subprocess.Popen(
            exit_with_parent_argv(self.argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True
        )
        self._reader = threading.Thread(target=self._read, name="bench-k8s-stall-probe", daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            parts = line.split()
            if len(parts) == 2:
                with self._lock:
                    self._stalls.append(Stall(float(parts[0]), float(parts[1])))

    def stalls(self) -> list[Stall]:
        with self._lock:
            return list(self._stalls)

    def stop(self) -> list[Stall]:
        if self._proc is not None:
            stop_child(self._proc)
        if self._reader is not None:
            self._reader.join(timeout=5)
        return self.stalls()


def stall_figures(
    stalls: Sequence[Stall],
    slowest: Sequence[Sequence[float]],
    t0_unix: float,
    window_s: float,
    counted_ms: float = STALL_MS,
) -> dict[str, Any]:
    """The pauses of at least `counted_ms` within the arrivals' window (`t0_unix` on, `window_s` long), and how
    many of the slowest pods (`slowest`: [seconds after t0 the pod was created, its latency in ms], as
    arrival.figures gives them) were waiting for their binding while one happened."""
    counted = [s for s in stalls if s.ms >= counted_ms and t0_unix <= s.ended_unix <= t0_unix + window_s]
    overlapping = 0
    for at, latency_ms in slowest:
        created, bound = t0_unix + at, t0_unix + at + latency_ms / 1000
        if any(s.began_unix <= bound and s.ended_unix >= created for s in counted):
            overlapping += 1
    return {
        "counted_ms": counted_ms,
        "count": len(counted),
        "max_ms": max((s.ms for s in counted), default=0.0),
        "total_ms": round(sum(s.ms for s in counted), 1),
        "slowest": len(slowest),
        "slowest_during_stall": overlapping,
    }
