"""The mirror: what the API server holds (nodes, and every pod whichever scheduler owns it), as last watched.

It only records and answers; what a change means for the scheduler and the queue is decided elsewhere
(feed.py dispatches, intake_flow.py resolves our pending pods). Reconciliation reads it as the API server's
truth (reconcile_views.ApiServerView), and the scheduler's popped-pod check reads our pending pods from it
(phalanx.scheduling.pod_source.PodSource) and tells it which verdicts the queue took.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from phalanx.model.objects import NodeInfo, PodInfo
from phalanx.queueing.scheduling_queue import FORGETTING
from phalanx.scheduling.ports import Verdict

TERMINAL = ("Succeeded", "Failed")


@dataclass
class MirroredPod:
    """What the feed remembers of one pod between events."""

    uid: str
    ours: bool
    node: str = ""
    phase: str = ""
    gang: str = ""
    queued: bool = False  # handed to the queue and not taken back
    # The queue forgot it after a verdict (assumed, bound, dropped) was delivered, and nothing handed it to
    # the queue again since: taking it back needs no remove.
    queue_forgot: bool = False
    fingerprint: tuple[Any, ...] | None = None  # of what scheduling reads: a change means "queue it again"
    info: PodInfo | None = None  # parsed, for resolving it again when its gang object changes
    queued_as: PodInfo | None = None  # as last handed to the queue (resolved to its gang): what is placed

    @property
    def finished(self) -> bool:
        return self.phase in TERMINAL

    @property
    def in_queue(self) -> bool:
        """Handed to the queue, not taken back, and not let go of by the queue: a remove would find it."""
        return self.queued and not self.queue_forgot

    @property
    def pending_ours(self) -> bool:
        """Handed to the queue, parsed, and not bound: what a lost queue must be handed again."""
        return self.queued and self.info is not None and not self.node


class Mirror:
    def __init__(self) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, MirroredPod] = {}

    # -- nodes -------------------------------------------------------------------------------------------
    def set_node(self, node: NodeInfo) -> bool:
        """Records the node; whether anything scheduling reads changed (status heartbeats change nothing)."""
        if self.nodes.get(node.name) == node:
            return False
        self.nodes[node.name] = node
        return True

    def remove_node(self, name: str) -> None:
        self.nodes.pop(name, None)

    # -- pods --------------------------------------------------------------------------------------------
    def pod(self, key: str) -> MirroredPod | None:
        return self.pods.get(key)

    def put_pod(self, key: str, state: MirroredPod) -> None:
        self.pods[key] = state

    def drop_pod(self, key: str) -> None:
        self.pods.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self.pods

    # -- what reconciliation reads (reconcile_views.ApiServerView) -----------------------------------------
    def mirror_nodes(self) -> dict[str, NodeInfo]:
        return dict(self.nodes)

    def mirror_bound(self) -> dict[str, PodInfo]:
        """Every pod the API server shows bound and not finished, whichever scheduler bound it (copies, on
        their node: PodInfo.copy is a fifth of dataclasses.replace's cost, and a pass reads every bound pod)."""
        out: dict[str, PodInfo] = {}
        for k, p in self.pods.items():
            if p.node and not p.finished and p.info is not None:
                info = out[k] = p.info.copy()
                info.node_name = p.node
        return out

    def mirror_has(self, key: str) -> bool:
        p = self.pods.get(key)
        return p is not None and not p.finished

    def verdicts_delivered(self, verdicts: Iterable[Verdict]) -> None:
        """Verdicts the queue has taken: which of our pods it holds no more (the scheduler's pops and the
        feed's outbox both deliver them). Only the incarnation a verdict names is marked."""
        for v in verdicts:
            state = self.pods.get(v.item.pod.key)
            if state is not None and state.uid == v.item.pod.uid:
                state.queue_forgot = v.outcome in FORGETTING

    # -- the API server's copy of what is placed (phalanx.scheduling.pod_source) ---------------------------
    def schedulable_pod(self, key: str) -> PodInfo | None:
        """The pending pod of ours handed to the queue, as the API server has it; None when there is none
        (deleted, bound, finished, refused by intake, or never seen)."""
        state = self.pods.get(key)
        if state is None or not state.queued or state.node or state.finished or state.queued_as is None:
            return None
        return replace(state.queued_as)  # the scheduler's copy: nothing it does can alter the mirror's record


def succeeded(phase: str, meta: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Whether a pod that reached a terminal phase finished its work: Succeeded, and not stopped by a
    deletion or an eviction (a worker that exits 0 on SIGTERM ends Succeeded too; the kubelet marks a
    disrupted pod with the DisruptionTarget condition). Its gang did not lose it."""
    if phase != "Succeeded" or meta.get("deletionTimestamp"):
        return False
    return not any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True" for c in status.get("conditions") or ()
    )
