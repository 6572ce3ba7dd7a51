"""Runs one benchmark workload against a real-clock Stack (redis-server + queue + binder + scheduler).

1. A fresh stack; nodes and gang declarations registered through SchedulerClient.apply.
2. The initial pods (SchedulingBasic's 1,000) handed to the queue and waited for: not measured.
3. Measured phase. Counters are read before and after it: Redis INFO (commands, read events), each
   service's gRPC message counts (SIGUSR1 dump, see phalanx.rpc.call_stats), CPU time of each process.
   - throughput: every pod at once, in Add batches (the wall time of each batch is recorded just before
     its call); pods/s = measured pods / (last binding - first add).
   - latency: one Add per gang at a steady rate; a gang's latency = its last binding's wall time (the
     bind log's `at`) - the wall time its last pod was added.
   The bind log (the simulated backend's Redis list, one JSON {pod, node, at} per binding) is polled with
   LLEN until it holds every measured pod; a run that stalls fails with the queue's state and log tails.
4. Peak memory (VmHWM) of each service and of redis-server, then the stack is stopped.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from phalanx.bench.procs import cpu_seconds, peak_rss_mib
from phalanx.bench.stats import redis_counters, redis_delta, rpc_delta, rpc_snapshot, summarize_ms
from phalanx.bench.workloads import GPU, BenchWorkload
from phalanx.rpc.call_stats import ENV_DIR
from phalanx.rpc.clients import QueueClient, SchedulerClient
from phalanx.rpc.convert import pod_to_pb
from phalanx.sim.services import Stack
from phalanx.state.keys import Keys
from phalanx.v1 import queue_pb2

log = logging.getLogger(__name__)

SERVICES = ("queue", "scheduler", "binder")


class BenchError(RuntimeError):
    pass


@dataclass
class RunOptions:
    timeout_floor: float = 60.0  # seconds a measured phase may take at least before it fails...
    min_pods_per_second: float = 50.0  # ...plus this: a run slower than this fails rather than hangs
    settle: float = 3.0  # fill workloads: end when no binding arrived for this long after the last add
    poll: float = 0.05
    quiesce: float = 0.25
    log_dir: Path | None = None
    default_wait: float = 600.0
    tls: bool = False  # mutual TLS between the services (and this client), as deployed


def run_workload(w: BenchWorkload, opts: RunOptions | None = None) -> dict[str, Any]:
    opts = opts or RunOptions()
    load = [round(x, 2) for x in os.getloadavg()]
    logs = Path(opts.log_dir or tempfile.mkdtemp(prefix="phalanx-bench-")) / w.name
    rpc_dir = logs / "rpc"
    rpc_dir.mkdir(parents=True, exist_ok=True)
    stack = Stack.launch(
        clock="real", log_dir=logs, env={ENV_DIR: str(rpc_dir)}, default_wait=opts.default_wait, tls=opts.tls
    )
    client = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    queue = QueueClient(stack.queue.address, stack.security)
    sched = SchedulerClient(stack.scheduler.address, stack.security)
    try:
        result = _run(w, opts, stack, client, queue, sched, rpc_dir)
        result["load_average_before"] = load  # other work on the machine shows here
        result["transport"] = "mutual TLS" if opts.tls else "plaintext (loopback)"
        return result
    except BenchError:
        raise
    except Exception as exc:
        raise BenchError(f"{w.name}: {exc!r}\n{_tails(stack)}") from exc
    finally:
        queue.close()
        sched.close()
        client.close()
        stack.stop()


def _run(
    w: BenchWorkload,
    opts: RunOptions,
    stack: Stack,
    client: redis.Redis,
    queue: QueueClient,
    sched: SchedulerClient,
    rpc_dir: Path,
) -> dict[str, Any]:
    binds_key = Keys(stack.prefix).sim_binds
    t = time.time()
    sched.apply(t, nodes=w.nodes, gangs=w.gangs)
    setup_seconds = time.time() - t
    if w.initial:
        queue.add(w.initial, time.time())
        _wait_binds(client, binds_key, len(w.initial), w, opts, stack, "initial pods")
    base = client.llen(binds_key)

    # Every request built before the clock starts: the measurement is the services, not this client.
    if w.kind == "throughput":
        pods = w.pods
        groups = [pods[i : i + w.batch] for i in range(0, len(pods), w.batch)]
    else:
        groups = w.units
    requests = [queue_pb2.AddRequest(pods=[pod_to_pb(p) for p in g]) for g in groups]

    pids = {name: getattr(stack, name).proc.pid for name in SERVICES}
    procs = {**pids, "redis": stack.redis.proc.pid if stack.redis and stack.redis.proc else 0}
    rpc_before = rpc_snapshot(pids, rpc_dir)
    cpu_before = {name: cpu_seconds(pid) for name, pid in procs.items()}
    redis_before = redis_counters(client)

    added_at: list[float] = []
    start = time.time()
    for i, req in enumerate(requests):
        if w.kind == "latency":
            delay = start + i / w.rate - time.time()
            if delay > 0:
                time.sleep(delay)
        now = time.time()
        added_at.append(now)
        req.now = now
        resp = queue.stub.Add(req, timeout=queue.timeout)
        if resp.rejected:
            raise BenchError(f"{w.name}: the queue rejected pods: {list(resp.rejected)[:3]}")
    feed_seconds = time.time() - start

    polls = _wait_binds(client, binds_key, base + w.pod_count, w, opts, stack, "measured pods")
    # The scheduler hands the last verdicts to the queue and its reports to the binder just after the last
    # binding: let that finish so the counts include it (at most one idle long poll of 0.2s lands too).
    time.sleep(opts.quiesce)
    redis_after = redis_counters(client)
    cpu_after = {name: cpu_seconds(pid) for name, pid in procs.items()}
    rpc_after = rpc_snapshot(pids, rpc_dir)

    binds = [json.loads(raw) for raw in client.lrange(binds_key, base, -1)]
    memory = {name: peak_rss_mib(pid) for name, pid in procs.items()}
    return _result(
        w,
        groups,
        added_at,
        binds,
        setup_seconds,
        feed_seconds,
        redis_delta(redis_before, redis_after, own_commands=1 + polls),
        rpc_delta(rpc_before, rpc_after),
        {k: _round(_sub(cpu_after[k], cpu_before[k]), 3) for k in procs},
        memory,
    )


def _wait_binds(
    client: redis.Redis, key: str, target: int, w: BenchWorkload, opts: RunOptions, stack: Stack, what: str
) -> int:
    """Polls the bind log's length until it reaches `target`; returns how many LLENs that took.
    A `fill` workload also ends when bindings stop arriving for `opts.settle` seconds."""
    pods = max(target - client.llen(key), 0)
    timeout = opts.timeout_floor + pods / opts.min_pods_per_second
    start = time.monotonic()
    polls, last_len, last_change = 0, -1, start
    while True:
        n = client.llen(key)
        polls += 1
        now = time.monotonic()
        if n >= target:
            return polls
        if n != last_len:
            last_len, last_change = n, now
        if w.fill and what == "measured pods" and now - last_change >= opts.settle:
            return polls
        if now - start > timeout:
            raise BenchError(
                f"{w.name}: {what}: {n}/{target} bindings in the bind log after {timeout:.0f}s (the run is "
                f"slower than {opts.min_pods_per_second:g} pods/s or stuck); queue: {_queue_state(stack)}\n"
                f"{_tails(stack)}"
            )
        time.sleep(opts.poll)


def _result(
    w: BenchWorkload,
    groups: list[list[Any]],
    added_at: list[float],
    binds: list[dict[str, Any]],
    setup_seconds: float,
    feed_seconds: float,
    redis_stats: dict[str, Any],
    rpc_stats: dict[str, Any],
    cpu: dict[str, float | None],
    memory: dict[str, float | None],
) -> dict[str, Any]:
    bound_at = {b["pod"]: float(b["at"]) for b in binds}
    added = {p.key: added_at[i] for i, g in enumerate(groups) for p in g}
    measured = [p for u in w.units for p in u]
    bound = [p for p in measured if p.key in bound_at]
    first_add = min(added_at)
    last_bind = max((bound_at[p.key] for p in bound), default=first_add)
    span = max(last_bind - first_add, 1e-9)

    # Latency per unit (a gang, or a pod without one): its last binding - when its last pod was added.
    latencies = []
    complete_units = 0
    for unit in w.units:
        if all(p.key in bound_at for p in unit):
            complete_units += 1
            latencies.append(max(bound_at[p.key] for p in unit) - max(added[p.key] for p in unit))
    gangs = len(w.gangs)
    result: dict[str, Any] = {
        "workload": w.name,
        "shape": w.shape,
        "kind": w.kind,
        "nodes": len(w.nodes),
        "initial_pods": len(w.initial),
        "pods": len(measured),
        "pods_bound": len(bound),
        "gangs": gangs,
        "gangs_bound": complete_units if gangs else 0,
        "seconds": round(span, 3),
        "pods_per_second": round(len(bound) / span, 1),
        "gangs_per_second": round(complete_units / span, 1) if gangs else None,
        "add_batches": len(groups),
        "feed_seconds": round(feed_seconds, 3),
        "feed_rate_per_second": w.rate if w.kind == "latency" else None,
        "setup_seconds": round(setup_seconds, 3),
        # Latency includes queueing in a throughput run (everything arrives at once); a latency run's
        # steady feed below capacity makes it service time.
        "latency_ms": summarize_ms(latencies),
        "latency_includes_queueing": w.kind == "throughput",
        "peak_rss_mib": memory,
        "cpu_seconds": cpu,
        # CPU of the three services and redis-server per measured pod: what the work costs, whatever else
        # the machine was doing at the time.
        "cpu_ms_per_pod": _per(1000.0 * sum(v for v in cpu.values() if v), len(bound)),
        "redis": {
            **redis_stats,
            "commands_per_pod": _per(redis_stats["commands"], len(bound)),
            "round_trips_per_pod": _per(redis_stats["round_trips"], len(bound)),
            "commands_per_gang": _per(redis_stats["commands"], complete_units) if gangs else None,
            "round_trips_per_gang": _per(redis_stats["round_trips"], complete_units) if gangs else None,
        },
        "grpc": {
            **rpc_stats,
            "calls_per_pod": _per(rpc_stats["calls"], len(bound)),
            "calls_per_gang": _per(rpc_stats["calls"], complete_units) if gangs else None,
        },
    }
    total_gpus = w.total(GPU)
    if total_gpus:
        used = sum(p.requests.get(GPU, 0) for p in bound)
        asked = sum(p.requests.get(GPU, 0) for p in measured)
        result["gpus"] = {
            "total": total_gpus // 1000,
            "requested": asked // 1000,
            "bound": used // 1000,
            "bound_fraction": round(used / total_gpus, 4),
        }
    return result


def _per(n: float, d: int) -> float | None:
    return round(n / d, 2) if d else None


def _sub(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _round(v: float | None, nd: int) -> float | None:
    return None if v is None else round(v, nd)


def _queue_state(stack: Stack) -> str:
    try:
        q = QueueClient(stack.queue.address, stack.security, timeout=5)
        s = q.stats(time.time())
        q.close()
        return f"active={s.active} backoff={s.backoff} unschedulable={s.unschedulable} in_flight={s.in_flight}"
    except Exception as exc:  # noqa: BLE001 - diagnostics only
        return f"unavailable ({exc.__class__.__name__})"


def _tails(stack: Stack) -> str:
    parts = []
    for svc in (stack.scheduler, stack.binder, stack.queue):
        tail = svc.log_tail(15)
        if tail.strip():
            parts.append(f"--- {svc.name} log ({svc.log_path}) ---\n{tail}")
    return "\n".join(parts)
