"""Queueing hints: what an unschedulable pod waits for, and what a cluster event offers it.

kube-scheduler's idea, reduced to what Phalanx's filters need. A pod answered UNSCHEDULABLE carries a
`Hint`: the capacity one node would need to have free for it (or, for a gang, for its smallest pod), the
resources found short, the nodes its other filters (selector, affinity, taints, cordon) allow, or that only
a node added or changed can help. A Strict gang's hint also says how many of its pods must fit together
(`pods`) and how many of them each node could hold when it failed (`slots`, nodes holding none left out).
A cluster event that frees capacity carries, per node, what it released and what that node has free
afterwards (`Freed`); the scheduler also reports, after each round, what the nodes it placed pods on have
left (`taken_only`), which moves nothing but keeps the gangs' slot counts current. The queue moves an
unschedulable pod only when an event may help it; a node added or changed, or an event that says nothing,
still moves every pod.

Why this never strands a pod: a node's free capacity grows only through events that report it (each with
the node's free amounts after it) or through a node change (which moves everything). So if some node can
fit the pod at any later time, the last release on that node reported at least that much free, and that
event moved the pod. For a gang, the queue keeps, per hint, each node's slots as last reported (an upper
bound of what the node can hold now: its free capacity only shrank since); the gang moves when a freed
node holds at least one of its pods and the slots add up to `pods` (a gang of identical pods fits exactly
when they do). The name test (`insufficient`) is sound
on its own for the same reason: a pod short of R everywhere it may go can fit only after some R is released
there. The queue's periodic flush of the unschedulable sub-queue stays as the safety net for what this
reasoning does not cover (a placement heuristic that fails with more capacity and succeeds with less).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field


class _Tally:
    """A gang hint's slots per node as last known, and their sum (the queue updates it with each event)."""

    __slots__ = ("by_node", "total")

    def __init__(self, slots: Iterable[tuple[str, int]]) -> None:
        self.by_node = dict(slots)
        self.total = sum(self.by_node.values())

    def update(self, node: str, slots: int) -> None:
        self.total += slots - self.by_node.get(node, 0)
        self.by_node[node] = slots


@dataclass(frozen=True, slots=True)
class Hint:
    # (resource, amount) a single node must have free, in milli-units; empty: not known (use `insufficient`).
    needs: tuple[tuple[str, int], ...] = ()
    insufficient: frozenset[str] = frozenset()  # resources found short; empty (with no needs): anything helps
    nodes: frozenset[str] = frozenset()  # nodes the pod's other filters allow; empty: any node
    node_change_only: bool = False  # freed capacity cannot help: only a node added or changed
    pods: int = 1  # how many pods (of at least `needs` each) must fit at once: a Strict gang's
    slots: tuple[tuple[str, int], ...] = ()  # with pods > 1: per node, how many it could hold; others none
    tally: _Tally | None = field(default=None, compare=False, repr=False)  # the queue's running count

    @staticmethod
    def of(
        needs: Mapping[str, int] | None = None,
        insufficient: Iterable[str] = (),
        nodes: Iterable[str] = (),
        node_change_only: bool = False,
        pods: int = 1,
        slots: Mapping[str, int] | None = None,
    ) -> "Hint":
        ordered = tuple(sorted((needs or {}).items(), key=lambda kv: (-kv[1], kv[0])))
        counted = tuple(sorted((n, k) for n, k in (slots or {}).items() if k > 0))
        tally = _Tally(counted) if pods > 1 and ordered else None
        return Hint(ordered, frozenset(insufficient), frozenset(nodes), node_change_only, max(pods, 1), counted, tally)


def still_fits(hint: Hint | None) -> bool:
    """For a gang moved by an event but held back (the queue moves a few gangs at a time): do its slot
    counts, as the reports since have left them, still add up? Hints without counts say yes."""
    return hint is None or hint.tally is None or hint.tally.total >= hint.pods


def fit_count(needs: Sequence[tuple[str, int]] | Mapping[str, int], free: Mapping[str, int]) -> int:
    """How many pods needing `needs` each the free amounts `free` hold (an upper bound: per resource)."""
    items = needs.items() if isinstance(needs, Mapping) else needs
    count: int | None = None
    for resource, amount in items:
        if amount <= 0:
            continue
        k = free.get(resource, 0) // amount
        if k <= 0:
            return 0
        count = k if count is None else min(count, k)
    return count if count is not None else 1 << 30


@dataclass(frozen=True, slots=True)
class Freed:
    """A node's capacity after a change: what was released there, and what it has free now."""

    node: str = ""  # empty: not known (any node)
    resources: frozenset[str] = frozenset()  # released resources; empty: not known
    free: Mapping[str, int] = field(default_factory=dict)  # empty: not known
    # Capacity was only taken (pods placed): helps no pod, but keeps the gang hints' slot counts current.
    taken_only: bool = False


def helps(hint: Hint | None, events: Sequence[Freed]) -> bool:
    """May one of `events` (oldest first) make a pod with this hint schedulable? When in doubt, yes.
    A gang hint's slot counts take in every event, helpful or not."""
    if hint is None:
        return True
    if hint.node_change_only:
        return False
    tally = hint.tally if hint.needs else None
    helped = False
    for ev in events:
        if hint.nodes and ev.node and ev.node not in hint.nodes:
            continue
        if tally is not None and ev.free:
            held = fit_count(hint.needs, ev.free)
            if ev.node:
                tally.update(ev.node, held)
            # A node that holds none of its pods changes nothing for the gang; else the counts decide.
            helped = helped or (not ev.taken_only and held > 0 and (not ev.node or tally.total >= hint.pods))
            continue
        if ev.taken_only:
            continue  # capacity taken helps nobody
        if hint.needs and ev.free:
            free = ev.free
            for resource, amount in hint.needs:  # the largest need first: it is the likeliest to fail
                if free.get(resource, 0) < amount:
                    break
            else:
                return True
            continue
        if not hint.insufficient or not ev.resources or not hint.insufficient.isdisjoint(ev.resources):
            if tally is None:
                return True
            helped = True
    return helped


class FreedCapacity:
    """Capacity changes gathered over a scheduling round (or a batch of cluster events), one entry per
    node: resources released are united; free amounts are the largest seen, or, once `refresh`ed, the
    node's current ones (the scheduler refreshes them just before sending, so a report is exact when sent;
    a largest-seen amount is never below what the node has after its last release, so it never moves
    fewer pods than it should). A node where pods were only placed is reported as `taken_only`."""

    __slots__ = ("_nodes",)

    def __init__(self) -> None:
        self._nodes: dict[str, tuple[set[str], dict[str, int], bool]] = {}  # node -> (released, free, released?)

    def add(self, node: str, released: Iterable[str], free: Mapping[str, int]) -> None:
        """Capacity was released on `node`; `free`: what it has free right after."""
        names, amounts, _ = self._nodes.get(node) or (set(), {}, True)
        names.update(released)
        for r, v in free.items():
            if v > amounts.get(r, -1):
                amounts[r] = v
        self._nodes[node] = (names, amounts, True)

    def taken(self, node: str) -> None:
        """Pods were placed on `node` (its free amounts are filled in by `refresh`)."""
        if node not in self._nodes:
            self._nodes[node] = (set(), {}, False)

    def refresh(self, free_of: Callable[[str], Mapping[str, int] | None]) -> None:
        """Replaces each node's free amounts with its current ones (`free_of`: None for a node that is gone)."""
        for node in list(self._nodes):
            names, _, released = self._nodes[node]
            free = free_of(node)
            if free is None:
                del self._nodes[node]
            else:
                self._nodes[node] = (names, dict(free), released)

    def merge(self, other: "FreedCapacity | None") -> "FreedCapacity":
        if other is not None:
            for node, (names, amounts, released) in other._nodes.items():
                if released:
                    self.add(node, names, amounts)
                elif node not in self._nodes:
                    self._nodes[node] = (set(), dict(amounts), False)
        return self

    def copy(self) -> "FreedCapacity":
        return FreedCapacity().merge(self)

    def events(self) -> list[Freed]:
        return [
            Freed(node, frozenset(names), dict(amounts), not released)
            for node, (names, amounts, released) in sorted(self._nodes.items())
            if released or amounts
        ]

    def released(self) -> bool:
        """Was anything released (as opposed to only taken)?"""
        return any(released for _, _, released in self._nodes.values())

    def __bool__(self) -> bool:
        return bool(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    def __repr__(self) -> str:
        return f"FreedCapacity({sorted(self._nodes)})"
