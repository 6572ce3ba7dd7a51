"""One batch of watch events: what it asks of the scheduler, the queue and the report path, collected before any is asked."""

from __future__ import annotations

from dataclasses import dataclass, field

from phalanx.model.objects import GangSpec, NodeInfo, PodInfo


@dataclass
class Batch:
    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    nodes_removed: set[str] = field(default_factory=set)
    gangs: dict[str, GangSpec] = field(default_factory=dict)
    # Of `gangs`: sent to the scheduler for the first time (with their first pod): the queue holds no pod of
    # them that an activation could move, their pods join it active.
    first_sent: set[str] = field(default_factory=set)
    changed_gangs: set[str] = field(default_factory=set)  # gang keys whose PodGroup/ConfigMap changed
    released: set[str] = field(default_factory=set)
    succeeded: set[str] = field(default_factory=set)  # of `released`: finished their work (mirror.succeeded)
    bound: dict[str, PodInfo] = field(default_factory=dict)
    queue_add: dict[str, PodInfo] = field(default_factory=dict)
    queue_remove: set[str] = field(default_factory=set)
    reports: dict[str, str] = field(default_factory=dict)  # pod key -> why it is not scheduled
    counted: set[str] = field(default_factory=set)  # gangs whose pods changed (for PodGroup counters)
    unreferenced: set[str] = field(default_factory=set)  # gangs that lost their last pod or their object
    deleted: set[str] = field(default_factory=set)  # pods deleted

    def queue(self, key: str, pod: PodInfo) -> None:
        self.queue_add[key] = pod
        self.queue_remove.discard(key)
