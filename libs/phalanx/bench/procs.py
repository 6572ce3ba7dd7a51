"""CPU time and memory of the processes a benchmark measures, and how busy the whole machine was.

psutil reads them (it is the `bench` extra). Two things psutil does not offer are read here from /proc:
- peak resident memory (VmHWM in /proc/PID/status): psutil reports the current RSS only (giampaolo/psutil#383);
- resetting that peak (writing 5 to /proc/PID/clear_refs), so a long-lived process (kube-apiserver) is
  measured over the benchmark's window only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import psutil

MIB = 1024.0 * 1024.0


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time a live process has used so far; None once it is gone."""
    try:
        t = psutil.Process(pid).cpu_times()
    except (psutil.Error, ValueError):
        return None
    return t.user + t.system


def _vm_hwm_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def peak_rss_mib(pid: int) -> float | None:
    """VmHWM (peak resident set) of a live process, in MiB, one decimal."""
    kib = _vm_hwm_kib(pid)
    return None if kib is None else round(kib / 1024.0, 1)


def reset_peak_rss(pid: int) -> bool:
    """Resets VmHWM to the current RSS (Linux: "5" to clear_refs); False if not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


@dataclass
class ProcSample:
    cpu_s: float = 0.0
    rss_mib: float = 0.0
    peak_rss_mib: float = 0.0
    alive: bool = False


def proc_sample(pid: int) -> ProcSample:
    """CPU seconds, RSS and peak RSS of a process at once; an empty sample once it is gone."""
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            t = proc.cpu_times()
            rss = proc.memory_info().rss / MIB
    except (psutil.Error, ValueError):
        return ProcSample()
    return ProcSample(t.user + t.system, rss, (_vm_hwm_kib(pid) or 0) / 1024.0, True)


def machine_busy_s() -> float:
    """CPU seconds the whole machine has spent busy (all cores), to tell other load apart: everything but
    idle and iowait (guest time is already counted in user)."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0) + getattr(t, "steal", 0.0)
