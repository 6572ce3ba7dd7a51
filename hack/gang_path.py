"""The path of one PodGroup gang through Phalanx's modules, measured: how many times the way enters each
module from another one, from the PodGroup's creation to its pods bound and its status Scheduled.

    .venv/bin/python hack/gang_path.py [--top N]

Runs a real kube-apiserver, redis-server and the three services in this process (as tests/k8s does), creates
one node and a scheduler-plugins PodGroup of 3 pods, and records every call that crosses from one Phalanx
module (a file under libs/phalanx or services/) into another, in every thread, until the gang is bound and
its PodGroup says Scheduled. Periodic work runs meanwhile (Lease renewals, the reconcile pass, idle polls),
so counts are of a window of a few seconds, not of the gang alone: compare two trees with the same script
on the same machine. "Returns" to a module = entries - 1.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests")]
_spec = importlib.util.spec_from_file_location("k8s_conftest", ROOT / "tests" / "k8s" / "conftest.py")
assert _spec is not None and _spec.loader is not None
k8s = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(k8s)

from phalanx.testing.apiserver import LocalApiServer  # noqa: E402
from phalanx.testing.redis_server import RedisServer  # noqa: E402

ROOTS = (str(ROOT / "libs" / "phalanx") + "/", str(ROOT / "services") + "/")


def _module(filename: str) -> str | None:
    for base in ROOTS:
        if filename.startswith(base):
            rel = filename[len(base) :]
            return None if rel.startswith("v1/") else ("services/" if "services" in base else "") + rel
    return None


class Entries:
    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self.edges: Counter[tuple[str, str]] = Counter()  # (caller module, callee module)
        self.on = False

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or not self.on:
            return
        callee = _module(frame.f_code.co_filename)
        if callee is None:
            return
        caller = frame.f_back
        # The nearest Phalanx frame below: a call through a library (grpc, the kubernetes client) still
        # counts as the way leaving one module and entering the next.
        while caller is not None and _module(caller.f_code.co_filename) is None:
            caller = caller.f_back
        from_module = _module(caller.f_code.co_filename) if caller is not None else None
        if from_module != callee:
            self.count[callee] += 1
            self.edges[(from_module or "(outside)", callee)] += 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--into", action="append", default=[], help="also list who enters this module (repeatable)")
    args = ap.parse_args()
    entries = Entries()
    # Hooked before any thread of the stack starts (Python 3.11 cannot hook running threads); off until the
    # window opens.
    threading.setprofile(entries.profile)
    sys.setprofile(entries.profile)
    with LocalApiServer() as server, RedisServer() as redis_server:
        k8s._install_crds(server)
        cluster = k8s.Cluster(server, "path", "phalanx-path")
        stack = k8s.Phalanx(server, redis_server.url, "path", cluster.scheduler_name).start()
        try:
            ns = cluster.namespace()
            cluster.node("n1", gpus=4)
            time.sleep(2)  # the node reaches the scheduler before the window opens
            entries.on = True
            started = time.monotonic()
            cluster.podgroup("scheduling.x-k8s.io", ns, "train", 3)
            names = [f"train-{i}" for i in range(3)]
            for name in names:
                cluster.pod(ns, name, labels={"scheduling.x-k8s.io/pod-group": "train"})
            while time.monotonic() - started < 60:
                status = cluster.podgroup_status("scheduling.x-k8s.io", ns, "train")
                if cluster.all_bound(ns, names) and status.get("phase") in ("Scheduled", "Running"):
                    break
                time.sleep(0.05)
            else:
                raise SystemExit("the gang did not bind within 60 s")
            elapsed = time.monotonic() - started
            entries.on = False
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
        finally:
            stack.stop()
            cluster.cleanup()
    print(f"window {elapsed:.2f} s; entries into a module from another, most first (returns = entries - 1):")
    for module, n in entries.count.most_common(args.top):
        print(f"  {n:5d}  {module}")
    for into in args.into:
        print(f"entries into {into}, by the module they came from:")
        for (src, dst), n in entries.edges.most_common():
            if dst == into:
                print(f"  {n:5d}  {src}")


if __name__ == "__main__":
    main()
