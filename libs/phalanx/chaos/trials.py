"""One chaos trial: a fresh stack and workload on the shared API server, one fault, the checks, a verdict.

Targets: a process SIGKILLed at a random moment of the busy phase (`queue`, `scheduler`, `binder`,
`redis` which comes back with its append-only file, `redis-empty` which comes back on an empty volume),
a deterministic kill point of `phalanx.faults` (the process runs with PHALANX_FAULT from the start and
exits the n-th time it gets there), or `none`. Whatever exits, planned or not, is restarted with its
original command line (and no fault) after 0.2-3 s, as a kubelet restarts a crashed container.

Everything runs on this thread but the pod creator and the kubelet's writers: processes must be
spawned from a thread that lives as long as they do (see stack.py).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phalanx.chaos import invariants as inv
from phalanx.chaos.cluster import PodCreator, core_api, create_namespaces, create_nodes, delete_trial_objects, pod_json
from phalanx.chaos.invariants import GangWatch, Violation
from phalanx.chaos.kubelet import ApiWriter, Kubelet, finished_gangs
from phalanx.chaos.snapshot import Snapshot, read_snapshot
from phalanx.chaos.workload import Workload, WorkloadShape, make_workload
from phalanx.faults import EXIT_CODE
from phalanx.testing.apiserver import LocalApiServer
from phalanx.testing.layouts import SEPARATE
from phalanx.testing.stack import REDIS, SERVICES, ChaosStack, StackConfig

PROCESS_TARGETS = ("queue", "scheduler", "binder", "redis", "redis-empty")
KILL_POINTS = ("binder.between_pods", "binder.before_commit", "scheduler.after_commit")
TARGETS = (*PROCESS_TARGETS, "none", *KILL_POINTS)
# Redis as a primary, 2 replicas and 3 Sentinels: the primary SIGKILLed (it comes back as a replica once a
# replica is promoted), frozen with SIGSTOP (a partition: thawed once a replica is promoted, it runs as a
# deposed primary until the Sentinels demote it), or SIGKILLed together with the scheduler (the leader).
SENTINEL_TARGETS = ("sentinel-primary", "sentinel-freeze", "sentinel-primary+scheduler")
ALL_TARGETS = (*TARGETS, *SENTINEL_TARGETS)


def target_process(target: str) -> str | None:
    """The process a target kills (None for `none`)."""
    if target == "none":
        return None
    if target in KILL_POINTS:
        return target.split(".", 1)[0]
    return REDIS if target.startswith(("redis", "sentinel")) else target


@dataclass
class TrialOptions:
    shape: WorkloadShape = field(default_factory=WorkloadShape)
    time_limit: float = 120.0  # seconds from the first pod's creation
    kill_window: tuple[float, float] = (1.0, 10.0)  # seconds after the first pod is created
    # Sentinel targets: within the busy phase, so that bindings are still due after the kill (what is
    # measured is the time from the kill to the next one).
    sentinel_kill_window: tuple[float, float] = (1.0, 5.0)
    restart_delay: tuple[float, float] = (0.2, 3.0)
    fault_occurrence: tuple[int, int] = (1, 30)  # the n of PHALANX_FAULT=<point>:<n>
    grace_seconds: float = 10.0
    converge_seconds: float = 30.0
    poll_seconds: float = 0.5
    log_level: str = "INFO"
    # "combined": the three services as one process (phalanx_combined); a kill of any of them, or a kill
    # point reached in any, then ends all three at once.
    layout: str = SEPARATE


@dataclass
class TrialResult:
    trial: str
    target: str
    seed: int
    violations: list[Violation]
    gangs_total: int
    gangs_bound: int
    pods_total: int
    seconds: float
    finished: bool  # every gang ended before the time limit
    killed_at: float | None = None  # seconds into the trial
    restarted_at: float | None = None
    recover_seconds: float | None = None  # restart -> first binding after it
    kill_to_binding_seconds: float | None = None  # kill -> first binding after it (Sentinel targets)
    last_binding_at: float | None = None  # seconds into the trial: tells a stuck stack from a slow one
    fault: str = ""
    unplanned_exits: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    run_dir: str = ""

    def violation_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for v in self.violations:
            out[v.kind] = out.get(v.kind, 0) + 1
        return out


class _Chaos:
    """The trial's fault: when to kill what, and restarting whatever has exited."""

    def __init__(self, stack: ChaosStack, target: str, rng: random.Random, options: TrialOptions) -> None:
        self.stack = stack
        self.target = target
        process = target_process(target)
        self.process = None if process is None else stack.process_of(process)
        self.rng = rng
        self.options = options
        self.kill_at: float | None = None
        self.killed_at: float | None = None
        self.restarted_at: float | None = None
        self.restart_due: dict[str, float] = {}
        self.last_restart: float = 0.0
        self.unplanned: list[str] = []

    def schedule(self, first_created: float) -> None:
        if self.kill_at is None and self.process is not None and self.target not in KILL_POINTS:
            window = self.options.sentinel_kill_window if self.target in SENTINEL_TARGETS else self.options.kill_window
            self.kill_at = first_created + self.rng.uniform(*window)

    def tick(self, now: float, t0: float) -> None:
        if self.kill_at is not None and self.killed_at is None and now >= self.kill_at and self.process:
            if self.target == "sentinel-freeze":
                self.stack.freeze(self.process)
            else:
                self.stack.kill(self.process)
            if self.target == "sentinel-primary+scheduler":  # the leader dies at the same moment
                self.stack.kill("scheduler")
                scheduler = self.stack.process_of("scheduler")
                self.restart_due[scheduler] = now + self.rng.uniform(*self.options.restart_delay)
            self.killed_at = now
            self.restart_due[self.process] = now + self.rng.uniform(*self.options.restart_delay)
        for name in self.stack.names():
            if name in self.restart_due:
                continue
            code = self.stack.exit_code(name)
            if code is None:
                continue
            fired = self.target in KILL_POINTS and name == self.process and self.killed_at is None and code == EXIT_CODE
            if fired:
                self.killed_at = now
            else:
                self.unplanned.append(f"{name} exited with {code} at {now - t0:.1f}s")
            self.restart_due[name] = now + self.rng.uniform(*self.options.restart_delay)
        for name, due in list(self.restart_due.items()):
            if now >= due and self.stack.ready_to_restart(name):
                del self.restart_due[name]
                self.stack.restart(name, keep_data=self.target != "redis-empty")
                self.last_restart = time.monotonic()
                if name == self.process and self.restarted_at is None and self.killed_at is not None:
                    self.restarted_at = self.last_restart

    def calm_since(self) -> float | None:
        """None while anything is down; else when the stack was last made whole."""
        return None if self.restart_due else self.last_restart


def trial_fault(target: str, rng: random.Random, options: TrialOptions) -> dict[str, str]:
    if target not in KILL_POINTS:
        return {}
    return {target.split(".", 1)[0]: f"{target}:{rng.randint(*options.fault_occurrence)}"}


def run_trial(
    server: LocalApiServer, index: int, target: str, seed: int, options: TrialOptions, run_root: Path
) -> TrialResult:
    """Runs one trial; its processes' logs stay in run_root/<trial>-<target>."""
    tid = f"t{index:03d}"
    workload = make_workload(tid, f"phalanx-chaos-{tid}", seed, options.shape)
    run_dir = run_root / f"{tid}-{target}"
    core = core_api(server)
    rng = random.Random(seed ^ 0x5EED)
    create_namespaces(core, workload)
    create_nodes(core, workload)
    stack = ChaosStack.create(
        StackConfig(
            str(server.kubeconfig_path),
            workload.scheduler_name,
            f"chaos-{tid}",
            run_dir,
            options.log_level,
            sentinel=target in SENTINEL_TARGETS,
            layout=options.layout,
        )
    )
    faults = trial_fault(target, rng, options)
    try:
        stack.start(faults)
        return _drive(server, core, workload, stack, target, seed, faults, rng, options, run_dir)
    finally:
        stack.stop()
        delete_trial_objects(core, workload)


def _drive(
    server: LocalApiServer,
    core: Any,
    workload: Workload,
    stack: ChaosStack,
    target: str,
    seed: int,
    faults: dict[str, str],
    rng: random.Random,
    options: TrialOptions,
    run_dir: Path,
) -> TrialResult:
    t0 = time.monotonic()
    creator = PodCreator(core_api(server), workload, list(workload.pods), options.shape.waiting_time, t0).start()
    kubelet = Kubelet(workload.gangs)
    writer = ApiWriter(lambda: core_api(server))
    watch = GangWatch({g.key: g.size for g in workload.gangs.values()}, options.grace_seconds)
    chaos = _Chaos(stack, target, rng, options)
    seen: set[tuple[str, str]] = set()
    violations: list[Violation] = []
    notes: list[str] = []
    finished = False
    snap: Snapshot | None = None
    baseline: float | None = None  # the first read after the restart
    after_kill: float | None = None  # the first read after the kill
    try:
        while True:
            now = time.monotonic()
            if creator.first_created_at is not None:
                chaos.schedule(creator.first_created_at)
            chaos.tick(now, t0)
            started = creator.first_created_at or t0
            try:
                snap = read_snapshot(core, workload.trial, time.monotonic())
            except Exception as exc:  # the API server is never killed; a hiccup is noted, not judged
                notes.append(f"snapshot failed at {now - t0:.1f}s: {str(exc).splitlines()[0][:200]}")
                if now - started > options.time_limit:  # failing reads must not hold the trial past its limit
                    notes.append(
                        f"time limit: the API server did not answer for the last reads ({options.time_limit:g}s)"
                    )
                    break
                time.sleep(options.poll_seconds)
                continue
            writer.submit(kubelet.observe(snap))
            if chaos.restarted_at is not None and baseline is None:
                baseline = snap.at  # what this read shows bound may have happened while the process was down
            if chaos.killed_at is not None and after_kill is None and snap.at > chaos.killed_at:
                after_kill = snap.at  # what it shows bound may have been bound before the kill
            found = watch.observe(snap, chaos.calm_since()) + inv.check_capacity(snap)
            violations += _stamped(inv.dedupe(seen, found), t0)
            done = finished_gangs(snap, workload.gangs.values(), creator.created_keys())
            if creator.done() and len(done) == len(workload.gangs) and chaos.calm_since() is not None:
                finished = True
                break
            if now - started > options.time_limit:
                notes.append(f"time limit: {len(done)}/{len(workload.gangs)} gangs ended after {options.time_limit:g}s")
                break
            time.sleep(max(0.0, options.poll_seconds - (time.monotonic() - now)))
    finally:
        creator.stop()
        writer.close()
    notes += [f"pod creation failed: {e}" for e in creator.errors[:3]]
    if writer.errors:
        notes.append(f"kubelet writes failed: {writer.errors} (last: {writer.last_error})")
    if chaos.process is not None and chaos.killed_at is None:
        notes.append(f"fault {faults} never fired" if faults else "the kill never happened")
    end = final_checks(core, workload, stack, watch, options.converge_seconds, seen)
    violations += _stamped(end, t0)
    recover = None
    if chaos.restarted_at is not None and baseline is not None:
        first = watch.first_binding_after(baseline)
        recover = None if first is None else first - chaos.restarted_at
    kill_to_binding = None
    if chaos.killed_at is not None and after_kill is not None:
        first_after_kill = watch.first_binding_after(after_kill)
        kill_to_binding = None if first_after_kill is None else first_after_kill - chaos.killed_at
    return TrialResult(
        trial=workload.trial,
        target=target,
        seed=seed,
        violations=violations,
        gangs_total=len(workload.gangs),
        gangs_bound=len(watch.bound_gangs() & set(workload.gangs)),
        pods_total=workload.pod_count,
        seconds=time.monotonic() - t0,
        finished=finished,
        killed_at=None if chaos.killed_at is None else chaos.killed_at - t0,
        restarted_at=None if chaos.restarted_at is None else chaos.restarted_at - t0,
        recover_seconds=recover,
        kill_to_binding_seconds=kill_to_binding,
        last_binding_at=max(watch.bound_at.values(), default=t0) - t0,
        fault=",".join(faults.values()),
        unplanned_exits=chaos.unplanned,
        notes=notes,
        run_dir=str(run_dir),
    )


def _stamped(found: list[Violation], t0: float) -> list[Violation]:
    now = time.monotonic() - t0
    return [Violation(v.kind, v.subject, v.message, round(now, 1)) for v in found]


def final_checks(
    core: Any,
    workload: Workload,
    stack: ChaosStack,
    watch: GangWatch,
    converge_seconds: float,
    seen: set[tuple[str, str]],
) -> list[Violation]:
    """Every gang bound, every service SERVING, Redis equal to the API server (after convergence)."""
    out = [_explained(core, v) for v in inv.check_all_bound(watch)]
    for name in SERVICES:
        if not _serving_within(stack, name, 15.0):
            out.append(
                Violation(
                    inv.UNHEALTHY,
                    name,
                    f"{name} does not answer gRPC health SERVING at the end (log: {stack.log_path(name)})",
                )
            )
    out += _redis_converged(core, workload, stack, converge_seconds)
    return inv.dedupe(seen, out)


def _explained(core: Any, v: Violation, limit: int = 1) -> Violation:
    """An unbound gang's violation with what its first pod's PodScheduled condition says."""
    namespace, gang = v.subject.split("/", 1)
    try:
        pod = pod_json(core, namespace, f"{gang}-0")
    except Exception:
        return v
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled":
            said = f"PodScheduled={c.get('status')} {c.get('reason') or ''}: {c.get('message') or ''}".strip(": ")
            return Violation(v.kind, v.subject, f"{v.message}; {gang}-0: {said}", v.at)
    return Violation(v.kind, v.subject, f"{v.message}; {gang}-0 has no PodScheduled condition", v.at)


def _serving_within(stack: ChaosStack, name: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not stack.serving(name):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def _redis_converged(core: Any, workload: Workload, stack: ChaosStack, seconds: float) -> list[Violation]:
    """Redis against the API server, retried until they agree or `seconds` pass (the scheduler's periodic
    reconciliation may still be catching up). A comparison counts only if Redis did not change while the
    API server was read."""
    from phalanx.state.store import StateStore

    store = StateStore.from_url(stack.state_url(), stack.config.redis_prefix)
    deadline = time.monotonic() + seconds
    found: list[Violation] = []
    try:
        while True:
            try:
                before = _redis_view(store)
                snap = read_snapshot(core, workload.trial, time.monotonic())
                after = _redis_view(store)
            except Exception as exc:
                found = [Violation(inv.UNHEALTHY, "redis", f"Redis could not be read at the end: {exc}")]
            else:
                if before == after:
                    found = inv.check_redis(snap, after[0], after[1])
                    if not found:
                        return []
            if time.monotonic() > deadline:
                return found
            time.sleep(1.0)
    finally:
        store.redis.close()


def _redis_view(store: Any) -> tuple[dict[str, tuple[str, str]], dict[tuple[str, str], int]]:
    records = {k: (r.node, r.state) for k, r in store.load_pods().items()}
    used = {k: v for k, v in store.load_used().items() if k[1] in inv.COMPARED_RESOURCES}
    return records, used
