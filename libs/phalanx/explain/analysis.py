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
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from phalanx.explain.capacity import Capacity, Exclusion, needs_of
from phalanx.explain.view import ClusterState, Condition, GangState, Holder, JobStatus, PodGroupStatus, PodState
from phalanx.framework.framework import Framework
from phalanx.model.gpu import GPU
from phalanx.model.objects import GangMode, PodInfo
from phalanx.queueing.hints import fit_count

# GangManager.describe() starts every gang message this way: "gang ns/name: 3/8 pods placed; ...". A Strict
# failure counts before it releases them, and says so: then nothing is placed any more.
_PLACED = re.compile(r"^gang \S+: (\d+)/(?:\d+|\?) pods placed")
_RELEASED = "released the gang's reservations"
# phalanx.scheduling.preemption's part of a gang's message: "preempting ...; nominated node(s) ...",
# "preempting: waiting for ...", or "not preempting: ...".
_PREEMPTION = re.compile(r"((?:not )?preempting\b[^;]*(?:; nominated node\(s\)[^;]*)?)")


class Standing(StrEnum):
    """Where a gang stands, as explain judges it (the `state` of its JSON and text output)."""

    WAITING = "Waiting"
    TIMED_OUT = "TimedOut"
    INVALID = "Invalid"
    UNDECLARED = "Undeclared"
    SATISFIED = "Satisfied"


NOT_RUNNING = (Standing.WAITING, Standing.TIMED_OUT, Standing.INVALID, Standing.UNDECLARED)


@dataclass(slots=True)
class NodeRoom:
    node: str
    free: dict[str, int]  # milli-units of the resources the gang asks for
    pods_fit: int  # pods of the gang this node alone holds now


@dataclass(slots=True)
class HolderGroup:
    kind: str
    key: str
    pods: int
    nodes: list[str]
    holds: dict[str, int]  # milli-units of the gang's resources, on the nodes listed
    ends_at: float | None
    end_basis: str


@dataclass(slots=True)
class CapacityReport:
    pods_to_place: int
    per_pod: dict[str, int]  # the largest pod's needs (equal for every pod when `uniform`)
    uniform: bool
    total: dict[str, int]
    fit_now: int
    short: list[str]
    nodes_total: int
    eligible_nodes: list[str]
    exclusions: list[Exclusion]
    free_on_eligible: dict[str, int]
    best_nodes: list[NodeRoom]
    held_by: list[HolderGroup]  # on the best nodes
    runs_after: list[HolderGroup] | None  # None: not even with every eligible node emptied
    runs_at: float | None  # when the last of runs_after ends; None when one of them has no known end
    fit_when_emptied: int | None = None  # pods placed with every holder on the eligible nodes gone
    min_resources_short: dict[str, tuple[int, int]] = field(default_factory=dict)  # resource -> (wanted, free)


@dataclass(slots=True)
class GangExplanation:
    namespace: str
    name: str
    state: Standing
    declared_by: str
    mode: str
    error: str
    waiting_for: str
    min_member: int | None
    total_number: int | None
    pods: int
    bound: int
    pending: int
    placed: int | None
    waiting_since: float | None
    wait_seconds: float | None
    timer_started: float | None
    timeout_at: float | None
    reason: Condition | None
    reason_pod: str
    podgroup: PodGroupStatus | None
    capacity: CapacityReport | None
    capacity_note: str  # why there is no capacity analysis, or what limits it
    verdict: str  # the answer in one sentence
    preemption: str = ""  # what the scheduler said about preempting for it ("" when it said nothing)
    # The gangs of its deadlock, itself first, each waiting for the next (the last for it); [] when none.
    deadlock: list[str] = field(default_factory=list)
    job: JobStatus | None = None  # the PhalanxJob it is the gang of

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(slots=True)
class Explanation:
    clock: str
    now: float
    source: dict[str, object]
    scheduler_name: str
    gangs: list[GangExplanation]
    errors: list[str]
    notes: list[str]


# --- choosing gangs ----------------------------------------------------------------------------------------


def gang_state(g: GangState) -> Standing:
    if g.error:
        return Standing.INVALID
    if g.waiting_for:
        return Standing.UNDECLARED
    if g.timed_out or any(p.timed_out and p.pending for p in g.pods):
        return Standing.TIMED_OUT
    minimum = g.minimum
    if minimum is not None and g.bound >= minimum:
        return Standing.SATISFIED
    return Standing.WAITING


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
        waits = _WaitsFor(state, capacity, explained)
        for g, e in zip(gangs, explained):
            e.deadlock = waits.cycle(e.key)
            if e.deadlock:
                e.verdict = _verdict(e, g)
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
    out.verdict = _verdict(out, g)
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
    holders = _holders(state, cap, set(eligibility.nodes), set(resources))
    # Its own bound pods hold room too, but it cannot wait for them: they end only once it has run.
    others = [(h, members) for h, members in holders if h != Holder("gang", g.key)]
    held_by = [
        _group(holder, [p for p in members if p.node in best_names], set(resources))
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
        report.runs_after, report.fit_when_emptied = _release_plan(cap, pods, others, set(resources))
        if report.runs_after:
            ends = [h.ends_at for h in report.runs_after]
            report.runs_at = None if any(e is None for e in ends) else max(e for e in ends if e is not None)
    return report, ""


def resource_order(resources: Iterable[str]) -> list[str]:
    """GPUs first (usually what a gang waits for), then by name."""
    return sorted(resources, key=lambda r: (r != GPU, r))


# --- who holds the room -----------------------------------------------------------------------------------


Members = list[tuple[Holder, list[PodState]]]


def _holders(state: ClusterState, cap: Capacity, nodes: set[str], resources: set[str]) -> Members:
    """Running pods on `nodes` holding any of `resources`, by gang or controller, soonest to end first
    (those with no known end last, the biggest first)."""
    members: dict[Holder, list[PodState]] = {}
    for p in state.pods:
        if not p.holds_capacity or p.node not in nodes or p.info is None or p.key not in cap.held:
            continue
        if not any(p.info.requests.get(r, 0) > 0 for r in resources):
            continue
        members.setdefault(p.holder or Holder("pod", p.key), []).append(p)
    groups = {h: _group(h, pods, resources) for h, pods in members.items()}
    order = sorted(
        members,
        key=lambda h: (groups[h].ends_at is None, groups[h].ends_at or 0.0, -sum(groups[h].holds.values()), h.key),
    )
    return [(h, members[h]) for h in order]


def _group(holder: Holder, pods: list[PodState], resources: set[str]) -> HolderGroup:
    holds: dict[str, int] = {}
    for p in pods:
        assert p.info is not None
        for r in resource_order(resources):
            holds[r] = holds.get(r, 0) + p.info.requests.get(r, 0)
    ends = [p.ends_at for p in pods]
    known = None if any(e is None for e in ends) else max(e for e in ends if e is not None)
    bases = sorted({p.end_basis for p in pods if p.end_basis})
    return HolderGroup(
        holder.kind,
        holder.key,
        len(pods),
        sorted({p.node for p in pods}),
        {r: v for r, v in holds.items() if v},
        known,
        ", ".join(bases),
    )


MAX_PRUNED = 32  # holders tried one by one for "not needed after all"; beyond, the soonest-ending set stands


def _release_plan(
    cap: Capacity, pods: list[PodInfo], holders: Members, resources: set[str]
) -> tuple[list[HolderGroup] | None, int]:
    """The holders that must finish before the gang fits, and how many of its pods fit once they have.

    Holders finish in the order given: the shortest prefix after which the gang fits is found by bisection
    (more room never fits fewer pods, to the scheduler's scoring's approximation), then each holder of it
    that is not needed after all is put back. None when the gang does not fit even with all of them gone."""

    def fitted(chosen: Members) -> int:
        snap = cap.copy()
        cap.release(snap, [p.key for _, members in chosen for p in members])
        return cap.place(pods, snap)

    emptied = fitted(holders)
    if emptied < len(pods):
        return None, emptied
    low, high = 1, len(holders)
    while low < high:
        middle = (low + high) // 2
        if fitted(holders[:middle]) == len(pods):
            high = middle
        else:
            low = middle + 1
    needed = holders[:low]
    if len(needed) <= MAX_PRUNED:
        for entry in list(needed[:-1]):  # the last one is needed: without it the gang did not fit
            if fitted([other for other in needed if other is not entry]) == len(pods):
                needed.remove(entry)
    return [_group(h, members, resources) for h, members in needed], len(pods)


# --- deadlocks -------------------------------------------------------------------------------------------


class _WaitsFor:
    """Which gangs each gang waits for and that cannot finish first: gangs in its runs_after that are not
    running themselves (they wait too) and hold pods with no known end. A cycle among them is a deadlock.
    A gang not explained (only one was asked for) is analysed when a cycle passes through it."""

    def __init__(self, state: ClusterState, cap: Capacity, explained: list[GangExplanation]) -> None:
        self.state = state
        self.cap = cap
        self.reports: dict[str, CapacityReport | None] = {e.key: e.capacity for e in explained}
        self.edges: dict[str, list[str]] = {}

    def of(self, key: str) -> list[str]:
        if key not in self.edges:
            report = self.reports[key] if key in self.reports else self._report(key)
            after = report.runs_after if report is not None else None
            self.edges[key] = [
                h.key for h in after or () if h.kind == "gang" and h.ends_at is None and self._stuck(h.key)
            ]
        return self.edges[key]

    def cycle(self, start: str) -> list[str]:
        """The shortest cycle of waits from `start` back to it, `start` first; [] when there is none."""
        parent: dict[str, str] = {}
        frontier = [start]
        while frontier:
            following: list[str] = []
            for key in frontier:
                for nxt in self.of(key):
                    if nxt == start:
                        path = [key]
                        while path[-1] != start:
                            path.append(parent[path[-1]])
                        return path[::-1]
                    if nxt not in parent:
                        parent[nxt] = key
                        following.append(nxt)
            frontier = following
        return []

    def _stuck(self, key: str) -> bool:
        g = self.state.gangs.get(key)
        return g is not None and gang_state(g) in (Standing.WAITING, Standing.TIMED_OUT) and bool(g.pending_pods)

    def _report(self, key: str) -> CapacityReport | None:
        g = self.state.gangs.get(key)
        if g is None or not self._stuck(key):
            return None
        return _capacity_report(self.state, g, sorted(g.pending_pods, key=lambda p: p.name), self.cap)[0]


def deadlock_sentence(cycle: Sequence[str]) -> str:
    """Names every gang of the deadlock; `cycle[0]` is the one explained."""
    if len(cycle) == 2:
        return (
            f"deadlock: gangs {cycle[0]} and {cycle[1]} each hold capacity the other needs, and neither can run "
            "until the other finishes; one of them must give its pods up"
        )
    chain = " -> ".join([*cycle, cycle[0]])
    return (
        f"deadlock: gangs {', '.join(cycle[:-1])} and {cycle[-1]} each wait for the next to finish, which holds "
        f"capacity it needs ({chain}); one of them must give its pods up"
    )


# --- the one-sentence answer ------------------------------------------------------------------------------


def _verdict(e: GangExplanation, g: GangState) -> str:
    if e.state == Standing.INVALID:
        return f"refused: {e.error}"
    if e.state == Standing.UNDECLARED:
        return f"{e.waiting_for}; its pods wait for it"
    if e.state == Standing.SATISFIED:
        return f"not waiting: {e.bound}/{e.min_member} pods bound"
    prefix = (
        "timed out: Phalanx will not schedule it again until its pods are recreated; "
        if e.state == Standing.TIMED_OUT
        else ""
    )
    if e.min_member is not None and e.bound + e.pending < e.min_member and g.bound_count is None:
        return (
            f"{prefix}only {e.bound + e.pending} of its {e.min_member} pods exist; "
            f"it waits for {e.min_member - e.bound - e.pending} more to be created"
        )
    if e.preemption.startswith("preempting"):
        return prefix + e.preemption  # lower-priority pods are being evicted for it: that is why it waits
    c = e.capacity
    if c is None:
        return prefix + (e.reason.message if e.reason is not None else "no reason reported yet")
    if c.min_resources_short:
        return prefix + "its minResources exceed what the cluster has free"
    if e.deadlock:
        return prefix + deadlock_sentence(e.deadlock)
    if c.runs_after is None:
        return (
            prefix + f"it cannot fit as the cluster stands: even with its {len(c.eligible_nodes)} eligible "
            f"node{'s' if len(c.eligible_nodes) != 1 else ''} emptied, {c.fit_when_emptied} of "
            f"{c.pods_to_place} pods fit"
        )
    if c.fit_now >= c.pods_to_place:
        return (
            prefix + f"all {c.pods_to_place} pending pods fit now; the scheduler has not placed them yet "
            "(it retries after a backoff, or other gangs are ahead)"
        )
    if not c.eligible_nodes:
        return prefix + "no node may take its pods (see excluded)"
    what = ", ".join(c.short) if c.short else "no single resource, but no node has all it needs at once"
    return prefix + f"{c.fit_now} of {c.pods_to_place} pods fit now; short of {what}"
