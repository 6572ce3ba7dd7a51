"""Who holds the room a gang needs (grouped by gang, else by controller), and which of them would have to
finish before it fits: released in the order they are expected to end until the gang fits, then the ones
not needed after all are put back.
"""

from __future__ import annotations

from phalanx.explain.capacity import Capacity
from phalanx.explain.explanation import HolderGroup, resource_order
from phalanx.explain.view import ClusterState, Holder, PodState
from phalanx.model.objects import PodInfo

Members = list[tuple[Holder, list[PodState]]]


def holders_of(state: ClusterState, cap: Capacity, nodes: set[str], resources: set[str]) -> Members:
    """Running pods on `nodes` holding any of `resources`, by gang or controller, soonest to end first
    (those with no known end last, the biggest first)."""
    members: dict[Holder, list[PodState]] = {}
    for p in state.pods:
        if not p.holds_capacity or p.node not in nodes or p.info is None or p.key not in cap.held:
            continue
        if not any(p.info.requests.get(r, 0) > 0 for r in resources):
            continue
        members.setdefault(p.holder or Holder("pod", p.key), []).append(p)
    groups = {h: holder_group(h, pods, resources) for h, pods in members.items()}
    order = sorted(
        members,
        key=lambda h: (groups[h].ends_at is None, groups[h].ends_at or 0.0, -sum(groups[h].holds.values()), h.key),
    )
    return [(h, members[h]) for h in order]


def holder_group(holder: Holder, pods: list[PodState], resources: set[str]) -> HolderGroup:
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


def release_plan(
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
    return [holder_group(h, members, resources) for h, members in needed], len(pods)
