"""bench-k8s's report: medians and ratios over the runs, the table (bench/k8s.txt) and its header.

The JSON (bench/k8s.json) holds every run as runner.py returns it and `summarize`'s medians; `table` turns a
summary into the text, so `--render` can print an earlier run's JSON again after a change of format.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

from phalanx.bench.k8s.schedulers import PEER_PERMIT_WAIT_SECONDS
from phalanx.bench.k8s.workloads import PEER, PHALANX, SCHEDULER_NAMES, Shape
from phalanx.testing.layouts import COMBINED


def _pct(values: Iterable[float], q: float) -> float | None:
    xs = sorted(values)
    if not xs:
        return None
    k = min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))
    return xs[k]


def dist(values: list[float], scale: float = 1.0, digits: int = 3) -> dict[str, Any]:
    """n, p50, p95, p99 and max of `values` times `scale`, rounded to `digits` (None for each when empty)."""
    if not values:
        return {"n": 0, "p50": None, "p95": None, "p99": None, "max": None}
    out: dict[str, Any] = {"n": len(values)}
    for key, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
        v = _pct(values, q)
        assert v is not None  # `values` is not empty
        out[key] = round(v * scale, digits)
    out["max"] = round(max(values) * scale, digits)
    return out


LEAD = "cpu_per_bound_pod_ms"  # the first row: its ratio is the median of the repeats' own ratios (PAIRED)
# The lead row split at the first binding: what launching costs (interpreters, imports, connections, the
# first lists), and what each pod costs after it. A fixed start-up cost weighs per pod by the workload's size.
STARTUP_CPU = "cpu_to_first_binding_s"
AFTER_FIRST = "cpu_per_pod_after_first_binding_ms"
P99 = "arrival.latency_ms.p99"
# Steady arrival's p99 is decided by a few bunches of slow pods, which come with the machine's pauses (below):
# its ratio too is the median of the pairs', each run against its neighbour rather than medians of both sides.
PAIRED = (LEAD, AFTER_FIRST, "scheduler_peak_rss_mib", P99)
# The machine's pauses while the gangs arrived (stall_probe.py): what the machine did, not either scheduler,
# so their rows carry no ratio.
STALLS = "arrival.machine_stalls"
STALL_ROWS = [
    ("steady: machine pauses >= 10 ms (idle probe)", "count"),
    ("steady: longest machine pause, ms", "max_ms"),
    ("steady: slowest 1% of pods waiting through one", "slowest_during_stall"),
]
ARRIVAL_FIELDS: list[tuple[str, str, str]] = [
    ("steady: gangs/s created (achieved rate)", "arrival.achieved_gangs_per_s", "{:.2f}"),
    ("steady: gang POSTed after its due time, max ms", "arrival.start_lag_ms.max", "{:,.0f}"),
    ("steady: pod created -> bound, p50 ms", "arrival.latency_ms.p50", "{:,.0f}"),
    ("steady: pod created -> bound, p95 ms", "arrival.latency_ms.p95", "{:,.0f}"),
    ("steady: pod created -> bound, p99 ms", P99, "{:,.0f}"),
    ("steady: pod created -> bound, max ms", "arrival.latency_ms.max", "{:,.0f}"),
    *((label, f"{STALLS}.{key}", "{:,.0f}") for label, key in STALL_ROWS),
]
MEDIAN_FIELDS: list[tuple[str, str, str]] = [
    # (label, dotted path in a run, format)
    ("CPU per bound pod, ms (all scheduler processes)", LEAD, "{:.2f}"),
    ("  CPU launch -> first binding, s (start-up)", STARTUP_CPU, "{:.2f}"),
    ("  CPU per bound pod after the first binding, ms", AFTER_FIRST, "{:.2f}"),
    *ARRIVAL_FIELDS,
    ("pods/s (launch -> last binding)", "pods_per_second", "{:,.1f}"),
    ("launch -> last binding, s", "launch_to_last_binding_s", "{:.2f}"),
    ("launch -> first binding, s", "first_binding_s", "{:.2f}"),
    ("pods/s (first -> last binding)", "pods_per_second_after_first", "{:,.1f}"),
    ("pod bound at, p50 s", "bind_time_s.p50", "{:.2f}"),
    ("pod bound at, p95 s", "bind_time_s.p95", "{:.2f}"),
    ("Scheduled Event lag p50, ms", "status_lag_ms.scheduled_event.p50", "{:,.0f}"),
    ("Scheduled Event lag p95, ms", "status_lag_ms.scheduled_event.p95", "{:,.0f}"),
    ("Scheduled Event lag max, ms", "status_lag_ms.scheduled_event.max", "{:,.0f}"),
    ("PodScheduled condition lag p95, ms", "status_lag_ms.pod_condition.p95", "{:,.0f}"),
    ("PodGroup status lag p50, ms", "status_lag_ms.podgroup_status.p50", "{:,.0f}"),
    ("PodGroup status lag p95, ms", "status_lag_ms.podgroup_status.p95", "{:,.0f}"),
    ("PodGroup status lag max, ms", "status_lag_ms.podgroup_status.max", "{:,.0f}"),
    ("API requests per pod (all)", "api_requests_per_pod", "{:.2f}"),
    ("scheduler CPU, s (all processes)", "scheduler_cpu_s", "{:.1f}"),
    ("scheduler peak RSS, MiB (sum)", "scheduler_peak_rss_mib", "{:,.0f}"),
    ("kube-apiserver CPU, s", "apiserver_cpu_s", "{:.1f}"),
    ("kube-apiserver peak RSS, MiB", "apiserver_peak_rss_mib", "{:,.0f}"),
    ("etcd CPU, s", "etcd_cpu_s", "{:.1f}"),
    ("bench harness CPU, s (its watches)", "harness_cpu_s", "{:.1f}"),
    ("measured window, s (to statuses settled)", "window_s", "{:.1f}"),
    ("other processes' CPU in the window, s", "other_cpu_s", "{:.1f}"),
]

NOTES = [
    "CPU per bound pod: user + system CPU of the scheduler's processes (Phalanx: redis + queue + binder +",
    "scheduler; peer: kube-scheduler) from launch (start-up included) until the statuses settled, divided by",
    "the pods bound; then split at the first binding (the processes' CPU when it was seen, sampled every 50 ms;",
    "the rest over the pods bound), then each process alone. Its ratios (the split's per-pod part's and peak",
    "RSS's too) are the medians over repeats of that repeat's phalanx/peer ratio (the two runs are adjacent;",
    "who goes first alternates); other ratios are",
    "ratios of medians. Steady arrival: gangs created by this harness at a fixed rate once the scheduler has",
    "bound a warm-up gang; created -> bound runs from just before a pod's POST to its binding on the watch;",
    "the harness's own POSTs are left out of its API requests per pod. Its p99's ratio is paired like CPU's.",
    "Machine pauses: an idle process of this harness's (stall_probe.py) sleeps 2 ms at a time while the gangs",
    "arrive; a wake-up 10 ms or more late means both cores were taken meanwhile (the API server, etcd, the",
    "VM's host). 'Slowest 1% waiting through one': of the slowest 1% of pods, those created before such a",
    "pause ended and bound after it began.",
    "Times are from the scheduler's launch (its processes started; Phalanx's include Python start-up, Redis and",
    "the three services becoming healthy) as seen by this harness's watches on the same machine. Status lag: the",
    "pod's `Scheduled` Event (or PodScheduled condition, or its gang's PodGroup status saying scheduled) seen",
    "after the pod's binding was seen; negative: the Event arrived on its watch before the pod update did.",
    "The peer's Coscheduling plugin writes no PodGroup status (scheduler-plugins' separate controller does, and",
    "only counts Running pods, which need a kubelet): '-' there. API requests: kube-apiserver's",
    "apiserver_request_total over the measured window divided by the workload's pods (WATCH counted at its end;",
    "a few are kube-apiserver's own, e.g. its lease). CPU and peak RSS: /proc (VmHWM; kube-apiserver's reset",
    "at launch); Phalanx's processes are redis + queue + binder + scheduler.",
]


def _get(run: dict[str, Any], path: str) -> Any:
    cur: Any = run
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _median(values: list[Any]) -> float | None:
    xs = [float(v) for v in values if isinstance(v, (int, float))]
    return statistics.median(xs) if xs else None


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per workload and scheduler: medians over the repeats; ratios of medians (phalanx / peer)."""
    out: dict[str, Any] = {}
    failed = [r for r in runs if "error" in r]
    runs = [r for r in runs if "error" not in r]
    for wl in dict.fromkeys(r["workload"] for r in runs + failed):
        entry: dict[str, Any] = {}
        for which in (PHALANX, PEER):
            rs = [r for r in runs if r["workload"] == wl and r["scheduler"] == which]
            errors = [r["error"] for r in failed if r["workload"] == wl and r["scheduler"] == which]
            if not rs:
                if errors:
                    entry[which] = {"runs": 0, "failed_runs": len(errors), "errors": errors}
                continue
            med = {path: _median([_get(r, path) for r in rs]) for _, path, _ in MEDIAN_FIELDS}
            kinds = sorted({k for r in rs for k in r["api_requests_per_pod_by_kind"]})
            med_kinds = {k: _median([r["api_requests_per_pod_by_kind"].get(k, 0.0) for r in rs]) for k in kinds}
            procs = sorted({p for r in rs for p in r["processes"]})
            med_procs = {
                p: {
                    m: _median([r["processes"].get(p, {}).get(m) for r in rs])
                    for m in ("cpu_s", "peak_rss_mib", "cpu_per_bound_pod_ms")
                }
                for p in procs
            }
            entry[which] = {
                "runs": len(rs),
                "failed_runs": len(errors),
                "errors": errors,
                "median": med,
                "api_requests_per_pod_by_kind": med_kinds,
                "processes": med_procs,
                "all_correct": all(r["correctness"]["ok"] for r in rs),
                "partial_gangs_max": max(r["correctness"]["partial_gangs"] for r in rs),
                "overcommitted_nodes_max": max(r["correctness"]["overcommitted_nodes"] for r in rs),
                "pods_bound": [r["correctness"]["pods_bound"] for r in rs],
                "gangs_bound": [r["correctness"]["gangs_bound"] for r in rs],
                "event_sources": sorted({s for r in rs for s in r["event_sources"]}),
            }
        if entry.get(PHALANX, {}).get("runs") and entry.get(PEER, {}).get("runs"):
            ratios = {}
            for _, path, _ in MEDIAN_FIELDS:
                a, b = entry[PHALANX]["median"][path], entry[PEER]["median"][path]
                ratios[path] = round(a / b, 3) if a is not None and b is not None and a > 0 and b > 0 else None
            entry["ratio_phalanx_over_peer"] = ratios
            entry["paired_ratio_phalanx_over_peer"] = paired_ratios(runs, wl)
        out[wl] = entry
    return out


def startup_split(cpu_s: float, startup_cpu: dict[str, float] | None, bound: int) -> dict[str, float | None]:
    """The scheduler's CPU (all processes) split at the first binding: the CPU spent until then (`startup_cpu`:
    each process's when the first binding was seen), and the rest per pod bound."""
    if not startup_cpu or not bound:
        return {STARTUP_CPU: None, AFTER_FIRST: None}
    first = sum(startup_cpu.values())
    return {STARTUP_CPU: round(first, 3), AFTER_FIRST: round(max(0.0, cpu_s - first) * 1000 / bound, 3)}


def derive_cpu_per_pod(runs: list[dict[str, Any]]) -> None:
    """Runs recorded before CPU per bound pod (or its split at the first binding) was a field (`--render` of an
    older JSON): derived from the figures they hold, scheduler_cpu_s, each process's cpu_s and startup_cpu_s,
    over the pods bound."""
    for r in runs:
        bound = (r.get("correctness") or {}).get("pods_bound")
        if "error" in r or not bound:
            continue
        if "cpu_per_bound_pod_ms" not in r:
            r["cpu_per_bound_pod_ms"] = round(r["scheduler_cpu_s"] * 1000 / bound, 3)
            for m in r["processes"].values():
                m["cpu_per_bound_pod_ms"] = round(m["cpu_s"] * 1000 / bound, 3)
        if AFTER_FIRST not in r:
            r.update(startup_split(r["scheduler_cpu_s"], r.get("startup_cpu_s"), bound))


def paired_ratios(runs: list[dict[str, Any]], workload: str) -> dict[str, Any]:
    """For each PAIRED figure: the median over repeats of (phalanx's / the peer's) in the same repeat."""
    by_rep: dict[int, dict[str, dict[str, Any]]] = {}
    for r in runs:
        if r["workload"] == workload and "error" not in r:
            by_rep.setdefault(int(r.get("repeat", 1)), {})[r["scheduler"]] = r
    out: dict[str, Any] = {}
    for path in PAIRED:
        ratios = []
        for pair in by_rep.values():
            a, b = _get(pair.get(PHALANX, {}), path), _get(pair.get(PEER, {}), path)
            if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a > 0 and b > 0:
                ratios.append(a / b)
        out[path] = round(statistics.median(ratios), 3) if ratios else None
        out[path + "_pairs"] = len(ratios)
    return out


def _process_rows(entry: dict[str, Any], cols: list[str], has_ratio: bool) -> list[str]:
    """CPU per bound pod of each process (the lead row's parts), under the lead row."""
    rows = []
    for c in cols:
        for p, m in entry[c]["processes"].items():
            vals = [m.get(LEAD) if c2 == c else None for c2 in cols]
            rows.append(
                f"{'  ' + p + ' (' + c + ')':48}"
                + "".join(f"{fmt('{:.2f}', v):>14}" for v in vals)
                + (f"{'-':>14}" if has_ratio else "")
            )
    return rows


def fmt(spec: str, v: Any) -> str:
    """`v` in the table's format `spec`; "-" for a missing figure."""
    return "-" if v is None else spec.format(v)


def table(summary: dict[str, Any], shapes: dict[str, Shape]) -> str:
    lines: list[str] = []
    for wl, entry in summary.items():
        shape = shapes.get(wl)
        lines.append(f"== {wl}: {shape.describe() if shape else ''}")
        cols = [c for c in (PHALANX, PEER) if entry.get(c, {}).get("runs")]
        for c in (PHALANX, PEER):
            if entry.get(c, {}).get("failed_runs"):
                lines.append(f"  {c}: {entry[c]['failed_runs']} run(s) FAILED: {entry[c]['errors'][0][:300]}")
        if not cols:
            lines.append("")
            continue
        has_ratio = "ratio_phalanx_over_peer" in entry
        head = (
            f"{'median of ' + str(max(entry[c]['runs'] for c in cols)) + ' run(s)':48}"
            + "".join(f"{c:>14}" for c in cols)
            + (f"{'phalanx/peer':>14}" if has_ratio else "")
        )
        lines.append(head)
        for label, path, spec in MEDIAN_FIELDS:
            vals = [entry[c]["median"][path] for c in cols]
            if all(v is None for v in vals):
                continue
            row = f"{label:48}" + "".join(f"{fmt(spec, v):>14}" for v in vals)
            if has_ratio:
                paired = entry.get("paired_ratio_phalanx_over_peer") or {}
                r = paired[path] if path in PAIRED and path in paired else entry["ratio_phalanx_over_peer"][path]
                r = None if path.startswith(STALLS) else r
                row += f"{fmt('{:.2f}x', r):>14}"
            lines.append(row)
            if path == LEAD:
                lines += _process_rows(entry, cols, has_ratio)
        kinds = sorted(
            {k for c in cols for k in entry[c]["api_requests_per_pod_by_kind"]},
            key=lambda k: (-max(entry[c]["api_requests_per_pod_by_kind"].get(k) or 0 for c in cols), k),
        )
        lines.append("  API requests per pod, by verb and resource:")
        other = [0.0 for _ in cols]
        n_other = 0
        for k in kinds:
            vals = [entry[c]["api_requests_per_pod_by_kind"].get(k) or 0.0 for c in cols]
            if max(vals) < 0.02:  # informers' initial LISTs and the like: one line for all of them
                other = [o + v for o, v in zip(other, vals)]
                n_other += 1
                continue
            lines.append(f"    {k:44}" + "".join(f"{v:>14.3f}" for v in vals))
        if n_other:
            lines.append(f"    {f'{n_other} others (< 0.02 each)':44}" + "".join(f"{v:>14.3f}" for v in other))
        lines.append("  processes (CPU s / peak RSS MiB):")
        for c in cols:
            procs = ", ".join(
                f"{p} {fmt('{:.1f}', m['cpu_s'])} / {fmt('{:.0f}', m['peak_rss_mib'])}"
                for p, m in entry[c]["processes"].items()
            )
            lines.append(f"    {c:10} {procs}")
        lines.append("  correctness:")
        for c in cols:
            e = entry[c]
            lines.append(
                f"    {c:10} {'OK' if e['all_correct'] else 'FAILED'}: pods bound {e['pods_bound']}, "
                f"gangs bound {e['gangs_bound']}, partial gangs (max) {e['partial_gangs_max']}, "
                f"over-committed nodes (max) {e['overcommitted_nodes_max']}"
            )
        lines.append("")
    lines += NOTES
    return "\n".join(lines)


def header(doc: dict[str, Any]) -> str:
    m, v = doc["machine"], doc["versions"]
    peer = v.get("peer") or {}
    lines = [
        f"phalanx bench-k8s{' --quick' if doc['quick'] else ''}: Phalanx vs kube-scheduler + Coscheduling on a real "
        f"kube-apiserver, {doc['repeats']} repeat(s), medians",
        f"machine: {m.get('cpu_count')} cores ({m.get('cpu_model')}), {m.get('platform')}, Python {m.get('python')}, "
        f"redis-server {m.get('redis_server')}",
        f"commit {str(m.get('git_commit'))[:12]}{' (dirty)' if m.get('git_dirty') else ''}, {m.get('date')}"
        + (f" ({m['note']})" if m.get("note") else ""),
        f"API server: {v.get('kube_apiserver')} + etcd (fresh for every run, LocalApiServer), no kubelet",
        f"phalanx {v.get('phalanx')}: ChaosStack (redis + "
        + (
            "queue, binder, scheduler in one phalanx-combined process"
            if doc.get("phalanx_layout") == COMBINED
            else "queue, binder, scheduler processes"
        )
        + ", mutual TLS), "
        f"schedulerName {SCHEDULER_NAMES[PHALANX]}",
        f"peer: kube-scheduler {peer.get('kube_scheduler', '?')} + scheduler-plugins {peer.get('scheduler_plugins', '?')} "
        f"Coscheduling (queueSort, preFilter, postFilter, permit, reserve; permitWaitingTimeSeconds "
        f"{PEER_PERMIT_WAIT_SECONDS}; clientConnection qps/burst 5000; no leader election)"
        + ("" if doc.get("peer_ran") else f" -- NOT RUN: {doc.get('peer_skipped_reason')}"),
        "gangs: scheduling.x-k8s.io/v1alpha1 PodGroup per gang, pods labelled scheduling.x-k8s.io/pod-group",
        f"first row: CPU per bound pod, ms = user+system CPU of all the scheduler's processes (phalanx: redis + "
        f"queue + binder + scheduler; peer: kube-scheduler) from launch to statuses settled / pods bound, "
        f"against that real kube-apiserver on this {m.get('cpu_count')}-core machine, then per process",
        "workloads:",
        *(f"  {s['name']}: {s['describe']}" for s in doc["workloads"]),
        "",
    ]
    return "\n".join(lines)
