"""What must hold however a process dies, checked on API-server snapshots and on Redis' records.

During a trial, at every poll: no gang stays partially bound past a grace period once the stack is whole
again; no node holds more than it has; no pod is bound to a node that does not exist. At the end: every
gang bound, and Redis agrees with the API server about every pod and every node's usage.

Everything here is a pure function of its inputs (snapshots, Redis records as plain tuples), so each
check can be tried on hand-made cases.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from phalanx.chaos.snapshot import Snapshot
from phalanx.model.gpu import GPU

PARTIAL_GANG = "partial-gang"
OVERCOMMIT = "overcommit"
MISSING_NODE = "missing-node"
GANG_UNBOUND = "gang-unbound"
UNHEALTHY = "unhealthy"
REDIS_STALE = "redis-stale-reservation"
REDIS_ORPHAN = "redis-orphan"
REDIS_MISSING = "redis-missing-binding"
REDIS_WRONG_NODE = "redis-wrong-node"
REDIS_USAGE = "redis-usage"

COMPARED_RESOURCES = ("cpu", GPU)
PENDING_STATES = ("assumed", "binding")  # a reservation not (yet) known to be a binding


@dataclass(frozen=True)
class Violation:
    kind: str
    subject: str  # the gang, pod or node it is about (one report per kind and subject)
    message: str
    at: float = 0.0  # seconds into the trial


@dataclass
class GangWatch:
    """Remembers every pod ever seen bound (a gang that was whole stays whole after its pods end), when,
    and how long each gang has been partially bound."""

    min_available: Mapping[str, int]  # gang key -> its minimum
    grace_seconds: float = 10.0
    bound_at: dict[str, float] = field(default_factory=dict)  # pod key -> first seen bound
    ever_bound: dict[str, set[str]] = field(default_factory=dict)  # gang key -> pod keys
    partial_since: dict[str, float] = field(default_factory=dict)

    def observe(self, snap: Snapshot, calm_since: float | None) -> list[Violation]:
        """calm_since: when the stack was last whole again after a kill (None while a process is down,
        when no judgement is made). A gang partial for longer than the grace after both its first partial
        sighting and calm_since is a violation."""
        for key, pod in snap.pods.items():
            if pod.node and key not in self.bound_at:
                self.bound_at[key] = snap.at
                self.ever_bound.setdefault(pod.gang, set()).add(key)
        out = []
        for gang, pods in self.ever_bound.items():
            need = self.min_available.get(gang)
            if need is None:
                continue
            if len(pods) >= need:
                self.partial_since.pop(gang, None)
                continue
            since = self.partial_since.setdefault(gang, snap.at)
            if calm_since is not None and snap.at - max(since, calm_since) > self.grace_seconds:
                out.append(
                    Violation(
                        PARTIAL_GANG,
                        gang,
                        f"gang {gang}: {len(pods)}/{need} pods bound for "
                        f"{snap.at - since:.1f}s ({snap.at - max(since, calm_since):.1f}s since the "
                        f"stack was whole), e.g. {sorted(pods)[0]}",
                    )
                )
        return out

    def bound_gangs(self) -> set[str]:
        return {g for g, pods in self.ever_bound.items() if len(pods) >= self.min_available.get(g, 1)}

    def first_binding_after(self, t: float) -> float | None:
        later = [at for at in self.bound_at.values() if at > t]
        return min(later) if later else None


def check_capacity(snap: Snapshot) -> list[Violation]:
    """Over-committed nodes and pods bound to nodes that do not exist (or are not this trial's)."""
    out = []
    used: dict[str, dict[str, int]] = {}
    for key, pod in snap.pods.items():
        if not pod.holds_node:
            continue
        if pod.node not in snap.nodes:
            out.append(Violation(MISSING_NODE, key, f"pod {key} is bound to node {pod.node}, which does not exist"))
            continue
        per_node = used.setdefault(pod.node, {})
        for res, milli in pod.requests.items():
            per_node[res] = per_node.get(res, 0) + milli
    for node, per_node in sorted(used.items()):
        allocatable = snap.nodes[node].allocatable
        for res, milli in sorted(per_node.items()):
            if milli > allocatable.get(res, 0):
                pods = sorted(
                    k for k, p in snap.pods.items() if p.holds_node and p.node == node and p.requests.get(res)
                )
                out.append(
                    Violation(
                        OVERCOMMIT,
                        f"{node}/{res}",
                        f"node {node} over-committed on {res}: {milli / 1000:g} requested by "
                        f"{len(pods)} running pods > {allocatable.get(res, 0) / 1000:g} allocatable "
                        f"(e.g. {', '.join(pods[:3])})",
                    )
                )
    return out


def check_all_bound(watch: GangWatch) -> list[Violation]:
    out = []
    for gang, need in sorted(watch.min_available.items()):
        got = len(watch.ever_bound.get(gang, ()))
        if got < need:
            out.append(Violation(GANG_UNBOUND, gang, f"gang {gang}: {got}/{need} pods ever bound by the end"))
    return out


def check_redis(
    snap: Snapshot, records: Mapping[str, tuple[str, str]], used: Mapping[tuple[str, str], int]
) -> list[Violation]:
    """Redis against the API server at a quiet moment.

    records: pod key -> (node, state) from Redis (state assumed | binding | bound); used: (node, resource)
    -> milli-units held there according to Redis. A reservation of a pod that still waits, unbound, is
    legitimate and counts in the expected usage.
    """
    out = []
    expected: dict[tuple[str, str], int] = {}

    def hold(node: str, requests: Mapping[str, int]) -> None:
        for res in COMPARED_RESOURCES:
            if requests.get(res):
                expected[(node, res)] = expected.get((node, res), 0) + requests[res]

    for key, (node, state) in sorted(records.items()):
        pod = snap.pods.get(key)
        if pod is None or pod.terminated:
            what = "no longer exists" if pod is None else f"has finished ({pod.phase})"
            out.append(Violation(REDIS_ORPHAN, key, f"Redis still records pod {key} ({state} on {node}), which {what}"))
        elif pod.node and state in PENDING_STATES:
            out.append(
                Violation(
                    REDIS_STALE, key, f"Redis records pod {key} as {state} on {node}, but it is bound to {pod.node}"
                )
            )
        elif pod.node and node != pod.node:
            out.append(
                Violation(
                    REDIS_WRONG_NODE, key, f"Redis records pod {key} bound on {node}, the API server on {pod.node}"
                )
            )
        elif not pod.node and state not in PENDING_STATES:
            out.append(
                Violation(REDIS_STALE, key, f"Redis records pod {key} as {state} on {node}, but it is not bound")
            )
        elif not pod.node:
            hold(node, pod.requests)  # still waiting for its gang: a legitimate reservation
    for key, pod in sorted(snap.pods.items()):
        if not pod.holds_node:
            continue
        hold(pod.node, pod.requests)
        node, state = records.get(key, ("", ""))
        if state != "bound" and key not in {v.subject for v in out}:
            found = f"recorded {state} on {node}" if state else "not recorded at all"
            out.append(
                Violation(REDIS_MISSING, key, f"pod {key} is bound to {pod.node} and running, but Redis has it {found}")
            )
    # This trial's nodes and any node Redis places this trial's pods on (usage of other nodes is not ours).
    nodes = set(snap.nodes) | {n for n, _ in records.values()} | {n for n, _ in expected}
    for node in sorted(nodes):
        for res in COMPARED_RESOURCES:
            have, want = used.get((node, res), 0), expected.get((node, res), 0)
            if have != want:
                out.append(
                    Violation(
                        REDIS_USAGE,
                        f"{node}/{res}",
                        f"Redis says node {node} uses {have / 1000:g} {res}; the pods bound there "
                        f"(and reservations of waiting pods) hold {want / 1000:g}",
                    )
                )
    return out


def dedupe(seen: set[tuple[str, str]], found: list[Violation]) -> list[Violation]:
    """The violations not reported before (by kind and subject); records them as reported."""
    out = []
    for v in found:
        if (v.kind, v.subject) not in seen:
            seen.add((v.kind, v.subject))
            out.append(v)
    return out
