"""The simulation report: the JSON contract of `phalanx simulate --output` (phalanx.report renders it)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from phalanx.intake.gangs import timeout_is_final
from phalanx.model.keys import KOORD_TIMEOUT
from phalanx.report import causes
from phalanx.sim.tracks import PodTrack, SimResult


def _phase(bound: int, finished: int, minimum: int, timed_out: bool) -> str:
    """PodGroup phases as scheduler-plugins names them. `timed_out`: for good (Koordinator's forms); a gang
    backing off to retry is Pending, as scheduler-plugins shows it."""
    if bound >= minimum > 0:
        return "Finished" if finished >= bound else "Running"
    if timed_out:
        return "Failed"
    if bound > 0:
        return "Scheduling"
    return "Pending"


def _gang_names(r: SimResult) -> dict[str, dict[str, str]]:
    """For each gang, the names its messages may carry (see phalanx.report.causes)."""
    members: dict[str, list[tuple[str, str]]] = {}
    for t in r.pods.values():
        if t.gang:
            members.setdefault(t.gang, []).append((t.namespace, t.name))
    out = {}
    for gang in r.gang_refs:
        spec = r.gangs.get(gang)
        group = [k for k in (spec.group_keys if spec is not None else ()) if k != gang]
        out[gang] = causes.names_of_gang(gang, members.get(gang, []), {k: members.get(k, []) for k in group})
    return out


def _gang_reason(r: SimResult, key: str, members: list[PodTrack], started: bool) -> str | None:
    """Why the gang waited or never started: its last status message before binding, else what its pods
    were told most often (a gang the scheduler never took up as a whole: undeclared, or pod mode)."""
    if key in r.gang_messages:
        return r.gang_messages[key]
    told = Counter(m for t in members if (m := r.conditions.get(t.key) or t.reason or t.waiting_for))
    if told:
        return sorted(told.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
    return None if started else "not scheduled before the simulation ended"


def _incarnation(t: PodTrack) -> dict[str, Any]:
    return {
        "node": t.node,
        "createdAt": t.created_at,
        "boundAt": t.bound_at,
        "preemptedBy": t.preempted_by or None,
        "startedAt": t.started_at,
        "finishedAt": t.finished_at,
        "ended": t.ended or None,  # a PhalanxJob's pod: Failed (planned) or Deleted (by the controller)
        "deletedAt": t.deleted_at,  # a PhalanxJob's pod the controller deleted (cleanPodPolicy, a restart)
    }


def build_report(r: SimResult) -> dict[str, Any]:
    names = _gang_names(r)
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
        cause = None
        if reason is not None:
            cause = causes.cause_of(reason, names[t.gang] if t.gang else causes.names_of_pod(t.namespace, t.name))
        entry: dict[str, Any] = {
            "namespace": t.namespace,
            "name": t.name,
            "gang": t.gang or None,
            **_incarnation(t),  # its current incarnation, in the same fields as the earlier ones
            "annotations": annotations,
            "reason": reason,
            "cause": cause,
        }
        if t.previous:  # a PhalanxJob's pod recreated: the earlier pods of its name, oldest first
            entry["previous"] = [_incarnation(p) for p in t.previous]
        pods_out.append(entry)

    groups_out = []
    gangs_bound = partial = timed_out = 0
    waits = {w["gang"]: w["waitSeconds"] for w in r.series.get("gangWaits") or []}
    members_of: dict[str, list[PodTrack]] = {}
    for t in r.pods.values():
        members_of.setdefault(t.gang, []).append(t)
    gang_reasons = []
    for key in sorted(r.gang_refs):
        members = members_of.get(key, [])
        bound = sum(1 for t in members if t.bound_at is not None)
        finished = sum(1 for t in members if t.finished_at is not None)
        spec = r.gangs.get(key)
        minimum = spec.min_available if spec is not None else 0
        is_timed_out = key in r.timed_out_gangs
        phase = _phase(bound, finished, minimum, is_timed_out and (spec is None or timeout_is_final(spec.source)))
        ns, name = key.split("/", 1)
        groups_out.append(
            {
                "namespace": ns,
                "name": name,
                "phase": phase,
                "bound": bound,
                "minMember": minimum,
                "pods": len(members),
                "timedOut": is_timed_out,
            }
        )
        if waits.get(key, 1.0) > 0:  # bound the instant it arrived: nothing to explain
            why = _gang_reason(r, key, members, key in waits)
            if why is not None:
                gang_reasons.append({"gang": key, "reason": why, "cause": causes.cause_of(why, names[key])})
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
        # Victims of gang preemption: ended early by the binder's eviction (see phalanx.scheduling.preemption).
        "podsPreempted": sum(1 for t in r.pods.values() if t.preempted_by),
        "virtualSeconds": r.end_time,
        "untilReached": r.until_reached,
        "wallSeconds": round(r.wall_seconds, 3),
        "steps": r.steps,
        "schedulingAttempts": r.attempts,
        "errors": r.errors,
    }
    return {"pods": pods_out, "podGroups": groups_out, "gangReasons": gang_reasons, "summary": summary}
