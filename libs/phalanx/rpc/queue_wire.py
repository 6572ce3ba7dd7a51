"""Queueing hints, freed capacity and pod verdicts to and from their protobuf messages (queue.proto)."""

from __future__ import annotations

from collections.abc import Iterable

from phalanx.queueing.hints import Freed, FreedCapacity, Hint
from phalanx.queueing.scheduling_queue import Outcome
from phalanx.queueing.verdicts import PodVerdict
from phalanx.v1 import queue_pb2

_OUTCOMES = {
    queue_pb2.OUTCOME_ASSUMED: Outcome.ASSUMED,
    queue_pb2.OUTCOME_BOUND: Outcome.BOUND,
    queue_pb2.OUTCOME_UNSCHEDULABLE: Outcome.UNSCHEDULABLE,
    queue_pb2.OUTCOME_BACKOFF: Outcome.BACKOFF,
    queue_pb2.OUTCOME_DROPPED: Outcome.DROPPED,
}


def hint_to_pb(hint: Hint) -> queue_pb2.RetryHint:
    return queue_pb2.RetryHint(
        needs=dict(hint.needs),
        insufficient=sorted(hint.insufficient),
        nodes=sorted(hint.nodes),
        node_change_only=hint.node_change_only,
        pods=hint.pods if hint.pods > 1 else 0,
        slots=dict(hint.slots),
    )


def hint_from_pb(pb: queue_pb2.RetryHint) -> Hint:
    return Hint.of(dict(pb.needs), pb.insufficient, pb.nodes, pb.node_change_only, pb.pods, dict(pb.slots))


class HintDecoder:
    """Decodes the hints of one request; equal hints (a gang's pods share one) become one object, which
    the queue then judges once per event."""

    def __init__(self) -> None:
        self._seen: dict[bytes, Hint] = {}

    def __call__(self, result: queue_pb2.PodResult) -> Hint | None:
        if not result.HasField("hint"):
            return None
        raw = result.hint.SerializeToString(deterministic=True)
        hint = self._seen.get(raw)
        if hint is None:
            hint = self._seen[raw] = hint_from_pb(result.hint)
        return hint


def freed_to_pb(freed: FreedCapacity | None) -> list[queue_pb2.FreedCapacity]:
    if not freed:
        return []
    return [
        queue_pb2.FreedCapacity(node=f.node, resources=sorted(f.resources), free=dict(f.free), taken_only=f.taken_only)
        for f in freed.events()
    ]


def freed_from_pb(items: Iterable[queue_pb2.FreedCapacity]) -> list[Freed]:
    return [Freed(f.node, frozenset(f.resources), dict(f.free), f.taken_only) for f in items]


def verdict_from_pb(result: queue_pb2.PodResult, hint_of: HintDecoder) -> PodVerdict:
    """A validated PodResult as the queue applies it; the protobuf Pod is what later pops hand out. Only an
    unschedulable pod's hint is decoded: the queue keeps no other."""
    outcome = _OUTCOMES[result.outcome]
    pod = result.pod
    hint = hint_of(result) if outcome == Outcome.UNSCHEDULABLE else None
    return PodVerdict.of(f"{pod.namespace}/{pod.name}", outcome, pod, pod, hint)
