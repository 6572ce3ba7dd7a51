"""The `bench` extra (psutil, tabulate): the benchmarks measure processes and print tables with it. The
services' image leaves it out, so a benchmark command names the extra instead of failing on an import."""

from __future__ import annotations

BENCH_MODULES = ("psutil", "tabulate")


def extra_missing() -> str | None:
    """One line naming what to install when a module of the extra is missing; None when all are there."""
    for module in BENCH_MODULES:
        try:
            __import__(module)
        except ModuleNotFoundError as exc:
            if (exc.name or "").partition(".")[0] != module:
                raise  # installed but broken: its own message says more
            return f"{module} is not installed; the benchmarks need the 'bench' extra: pip install 'phalanx[bench]'"
    return None
