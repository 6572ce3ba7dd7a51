"""Why each gang waits, and what would let it run: computed from a ClusterState (view.py).

For a gang with pending pods this finds, with the scheduler's own filters and scores (capacity.py):
- which nodes its pods may use at all, and which filter keeps the others out;
- how many of its pods would be placed now, which requested resource is short, and the best nodes' free
  amounts;
- who holds that capacity (grouped by gang, else by controller), and which of them would have to finish
  before the gang fits: holders are released in the order they are expected to finish (unknown last)
  until the gang fits, then the ones not needed are dropped again. The gang's own bound pods are never
  among them: they finish only after it runs;
- whether it is deadlocked: it waits for a gang that waits, in turn (directly or around a longer cycle),
  for it, each holding bound pods with no known end that the other needs (seed-003's two jobs bound pod
  by pod, each holding 4 of the 8 GPUs and wanting a fifth). None of them can run until one gives its
  pods up.
Nothing here plans a preemption itself: what the scheduler said about preempting (whom, where, or why it
could not) is read from its reason message into `preemption`.

This module chooses the gangs and analyses each; the answer's shapes are explanation.py, the holders and
their release plan holders.py, the cycles of waits deadlock.py, and the one-sentence answer verdict.py.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from phalanx.explain.capacity import Capacity, needs_of
from phalanx.explain.deadlock import WaitsFor
from phalanx.explain.explanation import (
    NOT_RUNNING,
    CapacityReport,
    Explanation,
    GangExplanation,
    NodeRoom,
    Standing,
    gang_state,
    resource_order,
)
from phalanx.explain.holders import holder_group, holders_of, release_plan
from phalanx.explain.verdict import verdict
from phalanx.explain.view import ClusterState, Condition, GangState, Holder, PodState
from phalanx.framework.framework import Framework
from phalanx.model.objects import GangMode, PodInfo
from phalanx.queueing.hints import fit_count

# GangManager.describe() starts every gang message this way: "gang ns/name: 3/8 pods placed; ...". A Strict
# failure counts before it releases them, and says so: then nothing is placed any more.
_PLACED = re.compile(r"^gang \S+: (\d+)/(?:\d+|\?) pods placed")
_RELEASED = "released the gang's reservations"
# phalanx.scheduling.preemption's part of a gang's message: "preempting ...; nominated node(s) ...",
# "preempting: waiting for ...", or "not preempting: ...".
_PREEMPTION = re.compile(r"((?:not )?preempting\b[^;]*(?:; nominated node\(s\)[^;]*)?)")


# --- choosing gangs ----------------------------------------------------------------------------------------


def select(state: ClusterState, wanted: str | None, namespace: str | None) -> list[GangState]:
    """The gangs to explain: those with pods still waiting, or the one asked for whatever its state.
    `wanted` is "name" or "namespace/name"."""
    out = []
    for key in sorted(state.gangs):
        g = state.gangs[key]
        if namespace and g.namespace != namespace:
            continue
        if wanted:
            if wanted in (g.key, g.name):
                out.append(g)
            continue
        waits = bool(g.pending_pods) or (g.bound_count is not None and gang_state(g) != Standing.SATISFIED)
        if waits and gang_state(g) in NOT_RUNNING:
            out.append(g)
    return out


# --- one gang ---------------------------------------------------------------------------------------------


def explain(state: ClusterState, gangs: Sequence[GangState], framework: Framework) -> Explanation:
    capacity = _capacity(state, framework) if state.nodes is not None else None
    explained = [_explain_gang(state, g, capacity) for g in gangs]
    if capacity is not None:
        cap = capacity
        waits = WaitsFor(
            state,
            explained,
            lambda g: _capacity_report(state, g, sorted(g.pending_pods, key=lambda p: p.name), cap)[0],
        )
        for g, e in zip(gangs, explained):
            e.deadlock = waits.cycle(e.key)
            if e.deadlock:
                e.verdict = verdict(e, g)
    return Explanation(
        state.clock, state.now, state.source, state.scheduler_name, explained, list(state.errors), list(state.notes)
    )


def _capacity(state: ClusterState, framework: Framework) -> Capacity:
    cap = Capacity(state.nodes or [], framework)
    # Oldest first, so GPU devices are handed out in the order the pods most likely got them.
    for p in sorted(state.pods, key=lambda p: (p.started_at or 0.0, p.key)):
        if p.holds_capacity and p.info is not None:
            cap.hold(p.key, p.info, p.node)
    return cap


def _explain_gang(state: ClusterState, g: GangState, cap: Capacity | None) -> GangExplanation:
    spec = g.spec if g.spec is not None and not g.spec.invalid else None
    pending = sorted(g.pending_pods, key=lambda p: p.name)
    reason, reason_pod = _last_reason(g)
    placed = _placed(reason)
    # A gang declaring no wait gets the scheduler's default; with no readable declaration it has none.
    wait = None if spec is None else spec.wait_seconds if spec.wait_seconds is not None else state.default_wait
    # The PodGroup's scheduleStartTime is when the scheduler's wait for the gang began (or, while no pod
    # was ever placed, its first attempt: the wait itself starts with the first placement).
    started = g.podgroup.schedule_start_time if g.podgroup is not None else None
    gs = gang_state(g)
    since = (
        None
        if gs == Standing.SATISFIED
        else min((p.created_at for p in (pending or g.pods) if p.created_at is not None), default=None)
    )
    report, note = None, ""
    if cap is None:
        note = "node capacity unknown: " + str(state.source.get("capacityNote") or "the source has no nodes")
    elif gs in (Standing.WAITING, Standing.TIMED_OUT) and pending:
        report, note = _capacity_report(state, g, pending, cap)
    out = GangExplanation(
        namespace=g.namespace,
        name=g.name,
        state=gs,
        declared_by=(g.spec.source if g.spec is not None else ""),
        mode=(spec.mode.value if spec is not None else ""),
        error=g.error,
        waiting_for=g.waiting_for,
        min_member=g.minimum,
        total_number=(spec.total_number if spec is not None else None),
        pods=len(g.pods) if g.bound_count is None else max(len(g.pods), g.bound),
        bound=g.bound,
        pending=len(pending),
        placed=placed,
        waiting_since=since,
        wait_seconds=wait if gs in (Standing.WAITING, Standing.TIMED_OUT) else None,
        timer_started=started,
        timeout_at=started + wait if started is not None and wait is not None and gs == Standing.WAITING else None,
        reason=reason,
        reason_pod=reason_pod,
        podgroup=g.podgroup,
        job=g.job,
        capacity=report,
        capacity_note=note,
        verdict="",
    )
    match = _PREEMPTION.search(reason.message) if reason is not None else None
    out.preemption = match.group(1) if match is not None else ""
    out.verdict = verdict(out, g)
    return out


def _last_reason(g: GangState) -> tuple[Condition | None, str]:
    """The scheduler's latest word on the gang: the newest PodScheduled=False message of its pending pods."""
    best: tuple[float, str, Condition] | None = None
    for p in g.pods:
        if p.condition is None or not p.pending:
            continue
        candidate = (p.condition.at if p.condition.at is not None else float("-inf"), p.key, p.condition)
        if best is None or candidate[:2] > best[:2]:
            best = candidate
    return (best[2], best[1]) if best is not None else (None, "")


def _placed(reason: Condition | None) -> int | None:
    if reason is None:
        return None
    match = _PLACED.match(reason.message)
    if match is None:
        return None
    return 0 if _RELEASED in reason.message else int(match.group(1))


def _pods_to_place(g: GangState, pending: list[PodState]) -> list[PodInfo]:
    """Strict gangs are tried whole (every pending pod must fit); NonStrict ones up to their minimum."""
    infos = [p.info for p in pending if p.info is not None]
    spec = g.spec
    if spec is not None and spec.mode == GangMode.NON_STRICT:
        return infos[: max((g.minimum or 0) - g.bound, 0)]
    return infos


def _capacity_report(
    state: ClusterState, g: GangState, pending: list[PodState], cap: Capacity
) -> tuple[CapacityReport | None, str]:
    pods = _pods_to_place(g, pending)
    if not pods:
        unreadable = [p.key for p in pending if p.info is None]
        return None, (f"its pending pods could not be read ({', '.join(unreadable)})" if unreadable else "")
    needs = [needs_of(p) for p in pods]
    resources = resource_order({r for n in needs for r in n})
    per_pod = {r: max(n.get(r, 0) for n in needs) for r in resources}
    smallest = {r: min(n.get(r, 0) for n in needs) for r in resources}
    total = {r: sum(n.get(r, 0) for n in needs) for r in resources}
    eligibility = cap.eligibility(pods[0])  # a gang's pods come from one template: its first speaks for all
    free = {n: cap.free(n) for n in eligibility.nodes}
    short = [
        r for r in resources if smallest[r] > 0 and sum(f.get(r, 0) // smallest[r] for f in free.values()) < len(pods)
    ]
    fit_now = cap.place(pods)
    primary = short[0] if short else (resources[0] if resources else "")
    rooms = sorted(
        (NodeRoom(n, {r: f.get(r, 0) for r in resources}, fit_count(smallest, f)) for n, f in free.items()),
        key=lambda room: (-room.pods_fit, -room.free.get(primary, 0), room.node),
    )
    best = rooms[: len(pods)]
    best_names = {room.node for room in best}
    holders = holders_of(state, cap, set(eligibility.nodes), set(resources))
    # Its own bound pods hold room too, but it cannot wait for them: they end only once it has run.
    others = [(h, members) for h, members in holders if h != Holder("gang", g.key)]
    held_by = [
        holder_group(holder, [p for p in members if p.node in best_names], set(resources))
        for holder, members in holders
        if any(p.node in best_names for p in members)
    ]
    report = CapacityReport(
        pods_to_place=len(pods),
        per_pod=per_pod,
        uniform=all(n == needs[0] for n in needs),
        total=total,
        fit_now=fit_now,
        short=short,
        nodes_total=len(cap.snap),
        eligible_nodes=eligibility.nodes,
        exclusions=eligibility.exclusions,
        free_on_eligible={r: sum(f.get(r, 0) for f in free.values()) for r in resources},
        best_nodes=best,
        held_by=held_by,
        runs_after=[],
        runs_at=None,
    )
    if g.spec is not None and g.spec.min_resources:
        everywhere = cap.snap.free_total()
        report.min_resources_short = {
            r: (v, everywhere.get(r, 0)) for r, v in g.spec.min_resources.items() if everywhere.get(r, 0) < v
        }
    if fit_now < len(pods):
        report.runs_after, report.fit_when_emptied = release_plan(cap, pods, others, set(resources))
        if report.runs_after:
            ends = [h.ends_at for h in report.runs_after]
            report.runs_at = None if any(e is None for e in ends) else max(e for e in ends if e is not None)
    return report, ""
