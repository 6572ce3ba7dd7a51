"""The plain-text form of an explanation: one block per gang, labels in one aligned column."""

from __future__ import annotations

from datetime import datetime, timezone

from phalanx.explain.capacity import Exclusion
from phalanx.explain.explanation import CapacityReport, Explanation, GangExplanation, HolderGroup
from phalanx.model.quantity import format_milli
from phalanx.report.units import fmt_duration

_LABEL = 12  # width of the label column
_NODES_SHOWN = 8  # nodes named per exclusion; the rest are counted


def human_seconds(seconds: float) -> str:
    """A span in whole seconds, in the reports' one duration format (45 s, 12m, 1h 50m, 3d 4h)."""
    return fmt_duration(round(abs(seconds)))


def moment(at: float, now: float, clock: str) -> str:
    """An instant, absolute and relative to now: 2026-01-05T10:00:00Z (12m ago) or t=600s (in 50m)."""
    if clock == "wall":
        stamp = datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    else:
        stamp = f"t={at:g}s"
    delta = at - now
    if abs(delta) < 1:
        return f"{stamp} (now)"
    return f"{stamp} ({'in ' + human_seconds(delta) if delta > 0 else human_seconds(delta) + ' ago'})"


def quantities(resources: dict[str, int]) -> str:
    return ", ".join(f"{format_milli(r, v)} {r}" for r, v in resources.items()) or "nothing"


def render(e: Explanation) -> str:
    lines: list[str] = []
    for error in e.errors:
        lines.append(f"error: {error}")
    for note in e.notes:
        lines.append(f"note: {note}")
    if lines:
        lines.append("")
    if not e.gangs:
        lines.append(f"no waiting gangs of scheduler {e.scheduler_name!r} ({_where(e)})")
    for g in e.gangs:
        lines.extend(_gang(g, e))
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def _where(e: Explanation) -> str:
    src = e.source
    if src.get("kind") == "report":
        return f"report {src.get('report')}"
    namespace = src.get("namespace")
    return f"namespace {namespace}" if namespace else "all namespaces"


def _row(label: str, text: str) -> str:
    return f"  {label:<{_LABEL}}{text}"


def _gang(g: GangExplanation, e: Explanation) -> list[str]:
    how = ", ".join(x for x in (g.mode, f"declared by {g.declared_by}" if g.declared_by else "") if x)
    out = [f"{g.key}  {g.state}" + (f"  ({how})" if how else "")]
    out.append(_row("why", g.verdict))
    if g.min_member is None and g.pods:
        out.append(_row("pods", f"{g.bound} bound, {g.pending} pending"))
    if g.min_member is not None:
        placed = f", {g.placed} placed" if g.placed is not None else ""
        out.append(
            _row(
                "pods",
                f"{g.bound}/{g.min_member} bound (min {g.min_member}"
                + (f", total {g.total_number}" if g.total_number not in (None, g.min_member) else "")
                + f"), {g.pending} pending{placed}",
            )
        )
    if g.waiting_since is not None:
        out.append(_row("waiting", "since " + moment(g.waiting_since, e.now, e.clock)))
    if g.wait_seconds is not None:
        timeout = f"wait {human_seconds(g.wait_seconds)}, counted from its first placement"
        if g.timeout_at is not None:
            timeout += "; ends " + moment(g.timeout_at, e.now, e.clock)
        out.append(_row("timeout", timeout))
    if g.reason is not None and g.reason.message not in g.verdict:
        out.append(_row("scheduler", f"{g.reason.message}  [PodScheduled=False on {g.reason_pod}]"))
    if g.preemption and g.preemption not in g.verdict:
        out.append(_row("preemption", g.preemption))
    if g.podgroup is not None:
        out.append(_row("podgroup", _podgroup(g)))
    if g.job is not None:
        j = g.job
        restarts = f", {j.restarts} restart{'s' if j.restarts != 1 else ''}"
        out.append(
            _row(
                "job", f"PhalanxJob {j.stage} ({j.schedule_state}{restarts})" + (f": {j.message}" if j.message else "")
            )
        )
    if g.capacity is not None:
        out.extend(_capacity(g.capacity, e, g))
    elif g.capacity_note:
        out.append(_row("capacity", g.capacity_note))
    return out


def _podgroup(g: GangExplanation) -> str:
    pg = g.podgroup
    assert pg is not None
    parts = [f"phase {pg.phase or '-'}"]
    for c in pg.conditions:
        parts.append(f"{c.get('type')}={c.get('status')} {c.get('reason') or ''}: {c.get('message') or ''}".strip())
    return f"{pg.api_group}: " + "; ".join(parts)


def _capacity(c: CapacityReport, e: Explanation, g: GangExplanation) -> list[str]:
    each = "" if c.uniform else " (the largest pod)"
    out = [
        _row(
            "needs",
            f"{c.pods_to_place} pods x ({quantities(c.per_pod)}){each} = {quantities(c.total)}; "
            f"{c.fit_now} of {c.pods_to_place} fit now",
        )
    ]
    out.append(
        _row(
            "free", f"{quantities(c.free_on_eligible)} on the {len(c.eligible_nodes)} eligible of {c.nodes_total} nodes"
        )
    )
    for r in c.short:
        best = ", ".join(format_milli(r, n.free.get(r, 0)) for n in c.best_nodes)
        nodes = f"the best {len(c.best_nodes)} nodes have" if len(c.best_nodes) != 1 else "the one node has"
        out.append(
            _row(
                "short",
                f"{r}: needs {format_milli(r, c.total.get(r, 0))} ({format_milli(r, c.per_pod[r])} "
                f"per pod); {nodes} {best} free",
            )
        )
    for r, (wanted, free) in c.min_resources_short.items():
        out.append(
            _row(
                "short",
                f"{r}: minResources wants {format_milli(r, wanted)}, the cluster has {format_milli(r, free)} free",
            )
        )
    out.extend(_best_nodes(c))
    for x in c.exclusions:
        out.append(_row("excluded", _exclusion(x)))
    for h in c.held_by:
        own = h.kind == "gang" and h.key == g.key
        out.append(_row("held by", ("its own pods, " if own else "") + _holder(h, e)))
    out.append(_row("runs", _runs(c, e, g)))
    return out


def _exclusion(x: Exclusion) -> str:
    """`reason [Filter]: node (detail), ...`; a detail every node shares is said once."""
    shared = {x.details.get(n, "") for n in x.nodes}
    common = f" ({shared.pop()})" if len(shared) == 1 and len(x.nodes) > 1 and "" not in shared else ""
    shown = [n if common or not x.details.get(n) else f"{n} ({x.details[n]})" for n in x.nodes[:_NODES_SHOWN]]
    more = f" and {len(x.nodes) - _NODES_SHOWN} more" if len(x.nodes) > _NODES_SHOWN else ""
    return f"{x.reason}{common} [{x.filter}]: {', '.join(shown)}{more}"


def _best_nodes(c: CapacityReport) -> list[str]:
    """The best nodes' free amounts as a small table under its label."""
    if not c.best_nodes:
        return []
    resources = list(c.per_pod)
    header = ["node", *resources, "pods that fit"]
    rows = [[n.node, *(format_milli(r, n.free.get(r, 0)) for r in resources), str(n.pods_fit)] for n in c.best_nodes]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    table = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows]]
    return [_row("best nodes" if i == 0 else "", line) for i, line in enumerate(table)]


def _holder(h: HolderGroup, e: Explanation) -> str:
    nodes = ", ".join(h.nodes)
    ends = "end unknown" if h.ends_at is None else "ends " + moment(h.ends_at, e.now, e.clock)
    basis = f" [{h.end_basis}]" if h.end_basis and h.ends_at is not None else ""
    if h.kind == "pod":
        return f"pod {h.key} on {nodes} holds {quantities(h.holds)}; {ends}{basis}"
    pods = f"{h.pods} pod{'s' if h.pods != 1 else ''}"
    return f"{h.kind} {h.key}: {pods} on {nodes} hold {quantities(h.holds)}; {ends}{basis}"


def _runs(c: CapacityReport, e: Explanation, g: GangExplanation) -> str:
    if c.fit_now >= c.pods_to_place:
        return "now: it fits as the cluster stands"
    if c.runs_after is None:
        return (
            f"never as the cluster stands: with every pod on its eligible nodes gone, {c.fit_when_emptied} "
            f"of {c.pods_to_place} fit"
        )
    who = ", ".join(f"{h.kind} {h.key}" for h in c.runs_after)
    if g.deadlock:
        waits = " and ".join(f"{a} for {b}" for a, b in zip(g.deadlock[1:], [*g.deadlock[2:], g.deadlock[0]]))
        return f"never as things stand: it waits for {who} to finish, and {waits} in turn (a deadlock)"
    when = "at an unknown time" if c.runs_at is None else moment(c.runs_at, e.now, e.clock)
    return f"once {who} finish{'es' if len(c.runs_after) == 1 else ''}: {when}"
