"""`make bench-restart`: Phalanx restarted on a real kube-apiserver holding 30,000 bound pods, to scheduling.

One run (issue 25's shape by default): a fresh etcd + kube-apiserver with the PodGroup CRD, 5,000 fake Nodes,
10,000 scheduling.x-k8s.io PodGroups of 3 pods with Phalanx's schedulerName, every pod bound (a Binding each,
as Phalanx would have bound them; bench-k8s's workloads.create_objects makes the objects), so every gang is
satisfied. Then:

1. the whole stack launched (ChaosStack: a fresh redis-server, queue, binder, scheduler as processes, mutual
   TLS, leader election; Redis empty, so the scheduler rebuilds from the API server), a new gang of 3 pods
   pending since before the launch: launch -> its pods bound, and the scheduler process's start -> that
   first binding; then a second gang created once the first is bound: created -> bound;
2. the scheduler alone SIGKILLed and started again (Redis and its state kept, the queue and binder up), a
   new gang pending meanwhile: the restart -> its pods bound;
3. with --peer, kube-scheduler + Coscheduling (bench-k8s's peer) launched on the same cluster, a gang of its
   own pending: launch -> bound, and its peak memory, the issue's yardstick (2x).

Each process's peak resident memory (VmHWM) and CPU are sampled every 100 ms until its work after the
binding settles (the PodGroup statuses and reconciliation that follow a rebuild), at most `--settle` s.
Bindings are timed by a watch of the new gangs' pods (the arrival of the event showing spec.nodeName).
The services log at INFO; the steps of each start come from their log lines (phalanx.bench.startup.phases).

With `--profile DIR`, py-spy (--gil) records the Python processes from the moment each is serving to its
first binding: the queue, binder and scheduler of step 1, the restarted scheduler of step 2 (files
DIR/launch-<process>.txt and DIR/restart-scheduler.txt, summarised by `phalanx bench-k8s --profile-summary`).

Run as `python -m phalanx.bench.restart [--nodes N --gangs G] [--peer] [--label NAME] [--out DIR]
[--profile DIR]`; results by label in DIR/restart.json and DIR/restart.txt. Needs `make tools` (and the
peer for --peer).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from phalanx.bench.k8s.kubeapi import BenchK8sError, call, connect, lister
from phalanx.bench.k8s.workloads import (
    NAMESPACE,
    PEER,
    PG_GROUP,
    PG_LABEL,
    PG_VERSION,
    PHALANX,
    POD_CPU_MILLI,
    POD_MEMORY,
    PODGROUPS_PATH,
    PODS_PATH,
    SCHEDULER_NAMES,
    Shape,
    create_objects,
    install_podgroup_crd,
)
from phalanx.bench.report import LabelledResults, machine

NEW_LABEL = "bench-restart/new"  # the gangs created during the measurement
GOAL_S = 10.0


def bind_all(api: Any, gangs: dict[str, int], nodes: int, workers: int) -> int:
    """Binds every gang's pods, round robin over the nodes (a gang's pods on consecutive nodes)."""
    names = [f"{g}-{i}" for g, size in gangs.items() for i in range(size)]

    def bind(item: tuple[int, str]) -> None:
        i, name = item
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "target": {"apiVersion": "v1", "kind": "Node", "name": f"node-{i % nodes:05d}"},
        }
        call(api, "POST", f"{PODS_PATH}/{name}/binding", body)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(bind, enumerate(names)))
    return len(names)


def new_gang(api: Any, name: str, scheduler: str, size: int = 3) -> None:
    """A PodGroup and its pods, the workload's pod shape, labelled NEW_LABEL (watched by BindingClock)."""
    call(
        api,
        "POST",
        PODGROUPS_PATH,
        {
            "apiVersion": f"{PG_GROUP}/{PG_VERSION}",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"minMember": size},
        },
    )
    for i in range(size):
        requests = {"cpu": f"{POD_CPU_MILLI}m", "memory": POD_MEMORY}
        container = {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": requests}}
        labels = {PG_LABEL: name, NEW_LABEL: "1"}
        meta = {"name": f"{name}-{i}", "namespace": NAMESPACE, "labels": labels}
        spec = {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0, "containers": [container]}
        call(api, "POST", PODS_PATH, {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})


class BindingClock:
    """A watch of the new gangs' pods: when each was first seen bound (monotonic, the event's arrival)."""

    def __init__(self, api: Any) -> None:
        from phalanx.kube.watch import Collection, Watcher

        self.bound: dict[str, float] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        collection = Collection("pods", lister(api, PODS_PATH), "Pod", "v1", kwargs={"label_selector": NEW_LABEL})
        self.watcher = Watcher(collection, None, self.stop, timed_sink=self._event, watch_timeout=3600)

    def _event(self, arrived: float, collection: str, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if (obj.get("spec") or {}).get("nodeName"):
            with self.lock:
                self.bound.setdefault(name, arrived)

    def start(self) -> None:
        self.watcher.start()
        if not self.watcher.synced.wait(30):
            raise BenchK8sError("the pods' watch did not sync")

    def gang_bound(self, gang: str, size: int = 3) -> float | None:
        """When the gang's last pod was seen bound; None until all are."""
        with self.lock:
            times = [self.bound.get(f"{gang}-{i}") for i in range(size)]
        return None if None in times else max(t for t in times if t is not None)

    def wait(self, gang: str, timeout: float, sampler: Sampler) -> float | None:
        deadline = time.monotonic() + timeout
        while (t := self.gang_bound(gang)) is None and time.monotonic() < deadline:
            sampler.sample()
            time.sleep(0.05)
        return t

    def close(self) -> None:
        self.stop.set()
        self.watcher.interrupt()


class Sampler:
    """Each process's latest CPU and peak RSS (VmHWM), by name and pid, while it lives."""

    def __init__(self, pids: Any) -> None:
        self.pids = pids  # () -> {name: pid}
        self.rows: dict[tuple[str, int], dict[str, float]] = {}

    def sample(self) -> float:
        """Samples every process; returns their CPU seconds in all."""
        from phalanx.bench.procs import proc_sample

        for name, pid in self.pids().items():
            s = proc_sample(pid)
            if s.alive:
                self.rows[(name, pid)] = {"cpu_s": round(s.cpu_s, 2), "peak_rss_mib": round(s.peak_rss_mib, 1)}
        return sum(r["cpu_s"] for r in self.rows.values())

    def settle(self, limit: float, quiet_s: float = 3.0, quiet_cpu: float = 0.1) -> float:
        """Samples until the processes spent under `quiet_cpu` CPU s over `quiet_s` s, or `limit` s; the time taken."""
        start = time.monotonic()
        marks = [(start, self.sample())]
        while time.monotonic() - start < limit:
            time.sleep(0.1)
            now, cpu = time.monotonic(), self.sample()
            marks.append((now, cpu))
            old = [m for m in marks if now - m[0] >= quiet_s]
            if old and cpu - old[-1][1] < quiet_cpu:
                break
        return round(time.monotonic() - start, 1)

    def of(self, pid_names: dict[int, str]) -> dict[str, dict[str, float]]:
        return {pid_names[pid]: row for (_, pid), row in self.rows.items() if pid in pid_names}


def _rnd(t: float | None, since: float) -> float | None:
    return None if t is None else round(t - since, 3)


def _start_of(pid: int) -> float | None:
    """A process's start on the monotonic clock, to the clock tick (/proc/PID/stat's starttime, since boot)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    ticks = int(stat.rpartition(")")[2].split()[19])  # field 22, counted after the command's closing paren
    since_boot = ticks / os.sysconf("SC_CLK_TCK")
    return time.monotonic() - (time.clock_gettime(time.CLOCK_BOOTTIME) - since_boot)


def run(
    shape: Shape,
    *,
    peer: bool,
    settle: float,
    workers: int,
    profile_dir: Path | None = None,
    progress: Any = print,
) -> dict[str, Any]:
    from phalanx.bench.startup import phases
    from phalanx.testing.apiserver import LocalApiServer
    from phalanx.testing.stack import ChaosStack, StackConfig

    out: dict[str, Any] = {"shape": shape.describe()}
    with tempfile.TemporaryDirectory(prefix="bench-restart-") as tmp, LocalApiServer() as server:
        kubeconfig = str(server.kubeconfig_path)
        api = connect(kubeconfig)
        t0 = time.monotonic()
        install_podgroup_crd(api)
        gangs = create_objects(api, shape, SCHEDULER_NAMES[PHALANX], workers)
        progress(f"  created {shape.nodes:,} nodes, {len(gangs):,} PodGroups, {shape.pods:,} pods")
        bound = bind_all(api, gangs, shape.nodes, workers)
        out["setup_s"] = round(time.monotonic() - t0, 1)
        progress(f"  bound {bound:,} pods ({out['setup_s']}s of setup)")
        clock = BindingClock(api)
        clock.start()
        run_dir = Path(tmp) / "phalanx"
        stack = ChaosStack.create(
            StackConfig(kubeconfig, SCHEDULER_NAMES[PHALANX], "bench-restart", run_dir, log_level="INFO")
        )
        sampler = Sampler(stack.pids)
        try:
            # -- 1. the whole stack, Redis empty ------------------------------------------------------------
            new_gang(api, "new-launch", SCHEDULER_NAMES[PHALANX])
            wall, launch = time.time(), time.monotonic()
            stack.start(timeout=300)
            pids = {pid: name for name, pid in stack.pids().items()}
            profiler = _profile(profile_dir, "launch", stack.pids())
            first = clock.wait("new-launch", 300, sampler)
            _stop_profile(profiler, shape.pods)
            sched_start = _start_of(stack.pids()["scheduler"])
            created = time.monotonic()
            new_gang(api, "new-after-launch", SCHEDULER_NAMES[PHALANX])
            second = clock.wait("new-after-launch", 120, sampler)
            settled = sampler.settle(settle)
            out["launch"] = {
                "launch_to_new_gang_bound_s": _rnd(first, launch),
                "scheduler_start_to_new_gang_bound_s": _rnd(first, sched_start or launch),
                "next_gang_created_to_bound_s": _rnd(second, created),
                "settled_after_s": settled,
                "phases_s": phases(lambda service: run_dir / f"{service}.log", wall),
                "processes": sampler.of(pids),
            }
            progress(f"  launch: {json.dumps(out['launch'])}")
            # -- 2. the scheduler alone, SIGKILLed and started again --------------------------------------------
            stack.kill("scheduler")
            new_gang(api, "new-restart", SCHEDULER_NAMES[PHALANX])
            (run_dir / "scheduler.log").rename(run_dir / "scheduler-1.log")  # phases() reads the new one's
            wall, restart = time.time(), time.monotonic()
            stack.restart("scheduler")
            pid = stack.pids()["scheduler"]
            profiler = _profile(profile_dir, "restart", {"scheduler": pid})
            first = clock.wait("new-restart", 300, sampler)
            _stop_profile(profiler, shape.pods)
            settled = sampler.settle(settle)
            steps = phases(lambda service: run_dir / f"{service}.log", wall)
            out["scheduler_restart"] = {
                "restart_to_new_gang_bound_s": _rnd(first, restart),
                "settled_after_s": settled,
                "phases_s": {k: v for k, v in steps.items() if k not in ("queue serving", "binder serving")},
                "processes": sampler.of({pid: "scheduler"}),
            }
            progress(f"  scheduler restart: {json.dumps(out['scheduler_restart'])}")
        finally:
            clock.close()
            stack.stop()
        if peer:
            out["peer"] = _peer(api, kubeconfig, Path(tmp), settle, progress)
    return out


def _profile(out_dir: Path | None, run: str, pids: dict[str, int]) -> Any:
    """py-spy on `pids` from now (None without --profile). The scheduler's first seconds (interpreter start
    and imports) are before this; bench-k8s's profile and bench-startup cover those."""
    if out_dir is None:
        return None
    from phalanx.bench.k8s.profile import Profiler

    profiler = Profiler(out_dir, run)
    profiler.attach(pids)
    return profiler


def _stop_profile(profiler: Any, pods: int) -> None:
    if profiler is None:
        return
    profiler.stop()
    profiler.write_meta(pods)
    for error in profiler.errors:
        print(f"bench-restart: profile: {error}", file=sys.stderr)


def _peer(api: Any, kubeconfig: str, tmp: Path, settle: float, progress: Any) -> dict[str, Any]:
    from phalanx.bench.k8s.schedulers import PeerUnderTest, peer_binary_path

    binary = peer_binary_path()
    if binary is None:
        return {"missing": "no peer-scheduler binary (make peer-scheduler)"}
    clock = BindingClock(api)
    clock.start()
    sut = PeerUnderTest(binary, kubeconfig, tmp / "peer")
    sampler = Sampler(sut.pids)
    try:
        new_gang(api, "new-peer", SCHEDULER_NAMES[PEER])
        launch = time.monotonic()
        sut.launch()
        first = clock.wait("new-peer", 300, sampler)
        settled = sampler.settle(settle)
        row = {
            "launch_to_new_gang_bound_s": _rnd(first, launch),
            "settled_after_s": settled,
            "processes": {name: r for (name, _), r in sampler.rows.items()},
        }
    finally:
        clock.close()
        sut.stop()
    progress(f"  peer: {json.dumps(row)}")
    return row


def table(doc: dict[str, Any]) -> str:
    lines = [
        "phalanx bench-restart: Phalanx (re)started on a real kube-apiserver holding bound gangs -> a new gang bound",
        f"goal (issue 25): scheduling again within {GOAL_S:g} s; peak memory of Phalanx's processes within 2x "
        "kube-scheduler's",
        "",
    ]
    for label, s in doc["sets"].items():
        r, m = s["result"], s["machine"]
        lines.append(
            f"[{label}] commit {str(m.get('git_commit'))[:12]}{' (dirty)' if m.get('git_dirty') else ''}, "
            f"{m.get('date')}, {m.get('cpu_count')} cores, load {m.get('load_average_at_start')}"
            + (f"; {s['note']}" if s.get("note") else "")
        )
        lines.append(f"  workload: {r['shape']}, every pod bound before the launch (setup {r.get('setup_s')}s)")
        for part, title in (
            ("launch", "whole stack launched, Redis empty"),
            ("scheduler_restart", "scheduler SIGKILLed, restarted alone"),
        ):
            p = r.get(part)
            if not p:
                continue
            lines.append(f"  {title}:")
            for key, value in p.items():
                if key == "processes":
                    total = sum(v["peak_rss_mib"] for v in value.values())
                    cells = ", ".join(
                        f"{n} {v['peak_rss_mib']:.0f} MiB / {v['cpu_s']:.1f} CPU s" for n, v in sorted(value.items())
                    )
                    lines.append(f"    peak RSS / CPU (until settled): {cells}; peak RSS summed {total:.0f} MiB")
                elif key == "phases_s":
                    lines.append("    steps (s): " + ", ".join(f"{k} {v}" for k, v in value.items()))
                else:
                    lines.append(f"    {key}: {value}")
        if (peer := r.get("peer")) is not None:
            lines.append(f"  kube-scheduler + Coscheduling on the same cluster: {json.dumps(peer)}")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m phalanx.bench.restart", description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--gangs", type=int, default=10000, help="bound gangs of 3 pods (default 10000)")
    p.add_argument("--peer", action="store_true", help="also measure kube-scheduler + Coscheduling")
    p.add_argument("--settle", type=float, default=120.0, help="seconds at most to sample after each binding")
    p.add_argument("--workers", type=int, default=16, help="threads creating the objects")
    p.add_argument("--label", default="now")
    p.add_argument("--note", default="")
    p.add_argument("--out", default="bench")
    p.add_argument("--profile", type=Path, default=None, help="py-spy the processes to their first binding, into DIR")
    args = p.parse_args(argv)
    from phalanx.bench.extra import extra_missing
    from phalanx.testing.apiserver import APISERVER_MISSING_REASON, apiserver_available

    if (missing := extra_missing()) is not None or not apiserver_available():
        print(f"bench-restart: {missing or APISERVER_MISSING_REASON}", file=sys.stderr)
        return 2
    shape = Shape(
        f"restart-{args.nodes}n-{args.gangs}x3",
        nodes=args.nodes,
        gangs=args.gangs,
        gang_size=3,
        timeout=600,
        expected_bound=3 * args.gangs,
    )
    info = machine()
    print(f"bench-restart '{args.label}': {shape.describe()} (load {info['load_average_at_start']})", flush=True)
    result = run(
        shape,
        peer=args.peer,
        settle=args.settle,
        workers=args.workers,
        profile_dir=args.profile,
        progress=lambda s: print(s, flush=True),
    )
    info["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    results = LabelledResults(Path(args.out), "restart")
    print(results.save(args.label, {"machine": info, "note": args.note, "result": result}, table))
    first = (result.get("launch") or {}).get("launch_to_new_gang_bound_s")
    return 0 if first is not None else 1


if __name__ == "__main__":
    sys.exit(main())
