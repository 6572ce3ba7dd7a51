"""The simulation report: the JSON contract of `phalanx simulate --output`, and a readable summary."""

from __future__ import annotations

from typing import Any

from phalanx.model.keys import KOORD_TIMEOUT
from phalanx.sim.driver import SimResult


def _phase(bound: int, finished: int, minimum: int, timed_out: bool) -> str:
    """PodGroup phases as scheduler-plugins names them."""
    if bound >= minimum > 0:
        return "Finished" if finished >= bound else "Running"
    if timed_out:
        return "Failed"
    if bound > 0:
        return "Scheduling"
    return "Pending"


def build_report(r: SimResult) -> dict[str, Any]:
    pods_out = []
    for key in sorted(r.pods):
        t = r.pods[key]
        annotations = dict(t.annotations)
        annotations.update(r.phalanx_annotations.get(key, {}))
        reason = None
        if t.bound_at is None:
            if t.reason:
                reason = t.reason
            elif annotations.get(KOORD_TIMEOUT) == "true":
                reason = r.conditions.get(key) or "gang timed out"
            elif t.waiting_for:
                reason = t.waiting_for
            else:
                reason = r.conditions.get(key) or "not scheduled before the simulation ended"
        pods_out.append({
            "namespace": t.namespace, "name": t.name, "node": t.node, "boundAt": t.bound_at,
            "startedAt": t.started_at, "finishedAt": t.finished_at, "annotations": annotations, "reason": reason,
        })

    groups_out = []
    gangs_bound = partial = timed_out = 0
    for key in sorted(r.gang_refs):
        members = [t for t in r.pods.values() if t.gang == key]
        bound = sum(1 for t in members if t.bound_at is not None)
        finished = sum(1 for t in members if t.finished_at is not None)
        spec = r.gangs.get(key)
        minimum = spec.min_available if spec is not None else 0
        is_timed_out = key in r.timed_out_gangs
        phase = _phase(bound, finished, minimum, is_timed_out)
        ns, name = key.split("/", 1)
        groups_out.append({"namespace": ns, "name": name, "phase": phase, "bound": bound, "minMember": minimum,
                           "pods": len(members), "timedOut": is_timed_out})
        if minimum and bound >= minimum:
            gangs_bound += 1
        elif bound > 0:
            partial += 1
        timed_out += int(is_timed_out)

    pods_bound = sum(1 for p in pods_out if p["boundAt"] is not None)
    summary = {
        "mode": r.mode,
        "gangsTotal": len(r.gang_refs),
        "gangsBound": gangs_bound,
        "partialGangs": partial,
        "gangsTimedOut": timed_out,
        "podsTotal": len(pods_out),
        "podsBound": pods_bound,
        "podsFinished": sum(1 for p in pods_out if p["finishedAt"] is not None),
        "podsUnbound": len(pods_out) - pods_bound,
        "virtualSeconds": r.end_time,
        "untilReached": r.until_reached,
        "wallSeconds": round(r.wall_seconds, 3),
        "steps": r.steps,
        "schedulingAttempts": r.attempts,
        "errors": r.errors,
    }
    return {"pods": pods_out, "podGroups": groups_out, "summary": summary}


def summary_lines(report: dict[str, Any]) -> list[str]:
    s = report["summary"]
    lines = [
        f"mode {s['mode']}: {s['podsBound']}/{s['podsTotal']} pods bound, {s['podsFinished']} finished; "
        f"gangs {s['gangsBound']}/{s['gangsTotal']} bound, {s['partialGangs']} partial, {s['gangsTimedOut']} timed out; "
        f"virtual {s['virtualSeconds']:g}s in {s['wallSeconds']:g}s wall",
    ]
    for e in s["errors"]:
        lines.append(f"  error: {e}")
    return lines
