"""The soak: no kills, gangs arriving and ending continuously for a long time, on one stack.

Arrivals are closed-loop: a new gang is created whenever the pods not yet ended fall below what the
cluster holds at once times `load`, so some gangs always wait and the machine is never simply flooded.
Measured: gangs left pending although they fit (continuously, for longer than a grace: must be 0), the
invariants of a trial, and samples of each process's RSS and Redis' key count (flat is the goal).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phalanx.bench.stats import percentile
from phalanx.chaos import invariants as inv
from phalanx.chaos.cluster import PodCreator, core_api, create_namespaces, create_nodes, delete_trial_objects
from phalanx.chaos.invariants import GangWatch, Violation
from phalanx.chaos.kubelet import ApiWriter, Kubelet, finished_gangs
from phalanx.chaos.snapshot import Snapshot, read_snapshot
from phalanx.chaos.trials import final_checks
from phalanx.chaos.workload import (
    CPU_POD_CPU_MILLI,
    GPU_POD_CPU_MILLI,
    GangPlan,
    PodPlan,
    Workload,
    WorkloadShape,
    make_gang,
    size_nodes,
)
from phalanx.testing.apiserver import LocalApiServer
from phalanx.testing.stack import ChaosStack, StackConfig


@dataclass
class SoakOptions:
    duration: float
    shape: WorkloadShape = field(default_factory=lambda: WorkloadShape(run_seconds=(10.0, 30.0)))
    load: float = 1.2  # pods in flight / pods the cluster holds at once
    sample_seconds: float = 30.0
    fit_grace_seconds: float = 15.0
    drain_seconds: float = 120.0  # after arrivals stop, for every gang to end
    gc_seconds: float = 20.0  # Succeeded pods are deleted this long after (else their gangs live on)
    grace_seconds: float = 10.0
    converge_seconds: float = 30.0
    poll_seconds: float = 0.5
    log_level: str = "INFO"
    seed: int = 1


@dataclass
class SoakResult:
    seconds: float
    gangs_created: int
    gangs_bound: int
    pods_created: int
    pending_fit_gangs: list[str]  # gangs that waited although they fitted, longer than the grace
    violations: list[Violation]
    samples: list[dict[str, Any]]
    notes: list[str]
    run_dir: str


def fitting_pods(snap: Snapshot, requests: dict[str, int]) -> int:
    """How many pods of these requests the free capacity holds (pods of a gang are identical, so filling
    nodes one by one is exact)."""
    used: dict[str, dict[str, int]] = {}
    for pod in snap.pods.values():
        if pod.holds_node:
            per = used.setdefault(pod.node, {})
            for res, milli in pod.requests.items():
                per[res] = per.get(res, 0) + milli
    total = 0
    for name, node in snap.nodes.items():
        per = used.get(name, {})
        total += min(
            (node.allocatable.get(res, 0) - per.get(res, 0)) // milli for res, milli in requests.items() if milli > 0
        )
    return total


def gang_requests(plan: GangPlan) -> dict[str, int]:
    return {"cpu": GPU_POD_CPU_MILLI, "nvidia.com/gpu": 1000} if plan.gpu else {"cpu": CPU_POD_CPU_MILLI}


class _Arrivals:
    """Makes gangs as capacity frees up, spread over the trial's namespaces."""

    def __init__(
        self, workload: Workload, shape: WorkloadShape, rng: random.Random, capacity_pods: int, load: float
    ) -> None:
        self.workload = workload
        self.shape = shape
        self.rng = rng
        self.limit = int(capacity_pods * load)
        self.count = 0

    def top_up(self, in_flight: int, now: float) -> list[PodPlan]:
        plans: list[PodPlan] = []
        while in_flight < self.limit:
            ns = self.workload.namespaces[self.count % len(self.workload.namespaces)]
            gang = make_gang(self.rng, self.shape, ns, f"g{self.count:05d}")
            self.count += 1
            self.workload.gangs[gang.key] = gang
            plans += [PodPlan(now, gang, name) for name in gang.pod_names()]
            in_flight += gang.size
        return plans


def run_soak(server: LocalApiServer, options: SoakOptions, run_dir: Path, progress: Any = None) -> SoakResult:
    rng = random.Random(options.seed)
    shape = options.shape
    tid = "soak"
    sample = [make_gang(random.Random(options.seed), shape, "x", f"s{i}") for i in range(shape.gangs)]
    workload = Workload(
        tid, "phalanx-chaos-soak", [f"{tid}-ns{i}" for i in range(shape.namespaces)], size_nodes(tid, shape, sample), {}
    )
    capacity_pods = int(shape.fit_fraction * sum(g.size for g in sample))
    core = core_api(server)
    create_namespaces(core, workload)
    create_nodes(core, workload)
    stack = ChaosStack.create(
        StackConfig(str(server.kubeconfig_path), workload.scheduler_name, "chaos-soak", run_dir, options.log_level)
    )
    try:
        stack.start()
        return _soak(server, core, workload, stack, options, rng, capacity_pods, run_dir, progress)
    finally:
        stack.stop()
        delete_trial_objects(core, workload)


def _soak(
    server: LocalApiServer,
    core: Any,
    workload: Workload,
    stack: ChaosStack,
    options: SoakOptions,
    rng: random.Random,
    capacity_pods: int,
    run_dir: Path,
    progress: Any,
) -> SoakResult:
    t0 = time.monotonic()
    arrivals = _Arrivals(workload, options.shape, rng, capacity_pods, options.load)
    creator = PodCreator(core_api(server), workload, [], options.shape.waiting_time, t0).start()
    kubelet = Kubelet(workload.gangs, gc_seconds=options.gc_seconds)
    writer = ApiWriter(lambda: core_api(server))
    min_available: dict[str, int] = {}
    watch = GangWatch(min_available, options.grace_seconds)
    seen: set[tuple[str, str]] = set()
    violations: list[Violation] = []
    notes: list[str] = []
    active: dict[str, GangPlan] = {}
    fits_since: dict[str, float] = {}
    pending_fit: set[str] = set()
    samples: list[dict[str, Any]] = []
    next_sample = t0
    stop_arrivals = t0 + options.duration
    deadline = stop_arrivals + options.drain_seconds
    try:
        while True:
            now = time.monotonic()
            try:
                snap = read_snapshot(core, workload.trial, now)
            except Exception as exc:
                notes.append(f"snapshot failed at {now - t0:.0f}s: {exc}")
                time.sleep(options.poll_seconds)
                continue
            writer.submit(kubelet.observe(snap))
            violations += _stamped(inv.dedupe(seen, watch.observe(snap, 0.0) + inv.check_capacity(snap)), t0)
            created = creator.created_keys()
            for key in finished_gangs(snap, active.values(), created):
                del active[key]
                fits_since.pop(key, None)
            _check_pending_fit(snap, active, watch, created, fits_since, pending_fit, options.fit_grace_seconds)
            if now < stop_arrivals:
                in_flight = sum(g.size for g in active.values())
                plans = arrivals.top_up(in_flight, now - t0)
                for p in plans:
                    active[p.gang.key] = p.gang
                    min_available[p.gang.key] = p.gang.size
                creator.add(plans)
            if now >= next_sample:
                samples.append(_sample(stack, now - t0, watch, arrivals.count, len(active), writer.backlog()))
                next_sample = now + options.sample_seconds
                if progress is not None:
                    progress(samples[-1])
            if now >= stop_arrivals and not active and creator.done():
                break
            if now > deadline:
                notes.append(f"{len(active)} gangs had not ended {options.drain_seconds:g}s after arrivals stopped")
                break
            time.sleep(max(0.0, options.poll_seconds - (time.monotonic() - now)))
    finally:
        creator.stop()
        writer.close()
    samples.append(_sample(stack, time.monotonic() - t0, watch, arrivals.count, len(active), 0))
    if writer.errors:
        notes.append(f"kubelet writes failed: {writer.errors} (last: {writer.last_error})")
    notes += [f"pod creation failed: {e}" for e in creator.errors[:3]]
    violations += _stamped(final_checks(core, workload, stack, watch, options.converge_seconds, seen), t0)
    return SoakResult(
        seconds=time.monotonic() - t0,
        gangs_created=arrivals.count,
        gangs_bound=len(watch.bound_gangs()),
        pods_created=len(creator.created_keys()),
        pending_fit_gangs=sorted(pending_fit),
        violations=violations,
        samples=samples,
        notes=notes,
        run_dir=str(run_dir),
    )


def _check_pending_fit(
    snap: Snapshot,
    active: dict[str, GangPlan],
    watch: GangWatch,
    created: set[str],
    fits_since: dict[str, float],
    pending_fit: set[str],
    grace: float,
) -> None:
    """A gang whose pods all exist, none bound, that the free capacity has held continuously for longer
    than `grace`, is pending although it fits."""
    cache: dict[tuple[tuple[str, int], ...], int] = {}
    for key, plan in active.items():
        waiting = not watch.ever_bound.get(key) and all(f"{plan.namespace}/{n}" in created for n in plan.pod_names())
        if not waiting:
            fits_since.pop(key, None)
            continue
        req = gang_requests(plan)
        shape = tuple(sorted(req.items()))
        if shape not in cache:
            cache[shape] = fitting_pods(snap, req)
        if cache[shape] >= plan.size:
            since = fits_since.setdefault(key, snap.at)
            if snap.at - since > grace:
                pending_fit.add(key)
        else:
            fits_since.pop(key, None)


def _sample(stack: ChaosStack, at: float, watch: GangWatch, created: int, active: int, backlog: int) -> dict[str, Any]:
    keys = None
    try:
        import redis

        client = redis.Redis.from_url(stack.redis.url, socket_timeout=2)
        keys = int(client.dbsize())
        client.close()
    except Exception:
        pass
    return {
        "t": round(at, 1),
        "rss_mib": {k: round(v, 1) for k, v in stack.rss_mib().items()},
        "redis_keys": keys,
        "gangs_created": created,
        "gangs_bound": len(watch.bound_gangs()),
        "gangs_active": active,
        "kubelet_backlog": backlog,
    }


def _stamped(found: list[Violation], t0: float) -> list[Violation]:
    now = round(time.monotonic() - t0, 1)
    return [Violation(v.kind, v.subject, v.message, now) for v in found]


def growth(samples: list[dict[str, Any]], value: Any) -> tuple[float | None, float | None, float | None]:
    """(median of the second quarter, median of the last quarter, change %) of value(sample): the first
    quarter is warm-up; the last sample (after the drain) is left out."""
    series = [value(s) for s in samples[:-1]]
    series = [v for v in series if v is not None]
    if len(series) < 4:
        return None, None, None
    q = len(series) // 4
    early, late = percentile(series[q : 2 * q], 50), percentile(series[-q:], 50)
    if early is None or late is None:
        return early, late, None
    return early, late, (None if early == 0 else round(100.0 * (late - early) / early, 1))


def soak_text(result: SoakResult) -> str:
    lines = [
        f"soak: {result.seconds:.0f}s, {result.gangs_created} gangs created, {result.gangs_bound} bound, "
        f"{result.pods_created} pods",
        f"gangs pending that fit (must be 0): {len(result.pending_fit_gangs)}"
        + (f" (e.g. {', '.join(result.pending_fit_gangs[:5])})" if result.pending_fit_gangs else ""),
        f"violations: {len(result.violations)}",
    ]
    kinds: dict[str, int] = {}
    for v in result.violations:
        kinds[v.kind] = kinds.get(v.kind, 0) + 1
        if kinds[v.kind] == 1:  # one example of each kind
            lines.append(f"  {v.kind}: [{v.at:.0f}s] {v.message}")
    lines.append("")
    lines.append("growth, median of the 2nd quarter -> median of the last quarter (the 1st is warm-up):")
    for name in ("queue", "scheduler", "binder", "redis"):
        early, late, pct = growth(result.samples, lambda s, n=name: s["rss_mib"].get(n))
        lines.append(f"  RSS {name:<10} {_num(early)} -> {_num(late)} MiB ({_pct(pct)})")
    early, late, pct = growth(result.samples, lambda s: s["redis_keys"])
    lines.append(f"  Redis keys     {_num(early)} -> {_num(late)} ({_pct(pct)})")
    lines.append("")
    lines.append("t s     queue sched binder redis MiB  Redis keys  gangs created/bound/active")
    for s in result.samples:
        rss = s["rss_mib"]
        lines.append(
            f"{s['t']:>6.0f}  "
            + " ".join(f"{rss.get(n, 0):>5.0f}" for n in ("queue", "scheduler", "binder", "redis"))
            + f"      {s['redis_keys'] if s['redis_keys'] is not None else '-':>6}  "
            f"{s['gangs_created']}/{s['gangs_bound']}/{s['gangs_active']}"
        )
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines) + "\n"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f}%"
