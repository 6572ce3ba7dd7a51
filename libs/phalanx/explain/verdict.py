"""The one-sentence answer: why a gang waits, from what explain found (phalanx.explain.analysis)."""

from __future__ import annotations

from phalanx.explain.deadlock import deadlock_sentence
from phalanx.explain.explanation import GangExplanation, Standing
from phalanx.explain.view import GangState


def verdict(e: GangExplanation, g: GangState) -> str:
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
