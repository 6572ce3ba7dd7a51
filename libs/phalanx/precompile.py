"""`python -m phalanx.precompile`: builds the cache of the services' generated dataclass code
(phalanx.dataclass_code) beside their bytecode, after `compileall` (`make precompile`, the image's build)."""

from __future__ import annotations

import importlib
import sys

from phalanx import dataclass_code

# What the services import by the time they serve, and what they import on their threads as they start
# (the scheduler's feed and Lease, the binder's backend).
SERVICE_MODULES = (
    "phalanx_queue.__main__",
    "phalanx_binder.__main__",
    "phalanx_scheduler.__main__",
    "phalanx_controller.__main__",
    "phalanx_combined.__main__",
    "phalanx.cluster.feed",
    "phalanx.cluster.leader",
    "phalanx.backends.kubernetes",
    "phalanx.kube.watch",
)


def main() -> int:
    cache = dataclass_code.fresh()  # before any service module defines a dataclass
    if cache is None:
        print("phalanx.precompile: this Python keeps no bytecode cache; nothing to build", file=sys.stderr)
        return 0
    for name in SERVICE_MODULES:
        importlib.import_module(name)
    if not cache.save():
        print(f"phalanx.precompile: could not write {cache.path}", file=sys.stderr)
        return 1
    print(f"{cache.path}: {len(cache.codes)} dataclass methods compiled")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
