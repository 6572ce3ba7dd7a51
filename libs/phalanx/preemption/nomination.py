"""A preempting gang's nomination: where its pods go once its victims are gone, and who those victims are.

Kept in Redis (one hash field per gang) from before the first eviction until the gang reaches its minimum,
so a scheduler that restarts in between still holds the place (the snapshot filters keep lower-priority pods
off it) and still sends the evictions that were not accepted yet. While it exists the gang does not preempt
again: one set of victims per gang at a time, which also bounds what a crash can cost.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from phalanx.framework.holds import CapacityHold
from phalanx.framework.snapshot import Snapshot
from phalanx.model.binding import Victim
from phalanx.model.objects import Resources


@dataclass
class Nomination:
    gang: str
    priority: int
    at: float
    placements: dict[str, tuple[str, Resources]]  # preemptor pod -> (node, what it will hold there)
    victims: list[Victim]
    accepted: set[str] = field(default_factory=set)  # victims whose eviction was accepted (or who are gone)

    @property
    def unsent(self) -> list[Victim]:
        return [v for v in self.victims if v.pod_key not in self.accepted]

    def nodes(self) -> list[str]:
        return sorted({node for node, _ in self.placements.values()})

    def nodes_by_pod(self) -> dict[str, str]:
        """The node nominated for each of the gang's pods (their status.nominatedNodeName)."""
        return {pod: node for pod, (node, _) in self.placements.items()}

    def to_json(self) -> str:
        return json.dumps(
            {
                "gang": self.gang,
                "priority": self.priority,
                "at": self.at,
                "placements": {k: [n, r] for k, (n, r) in sorted(self.placements.items())},
                "victims": [[v.pod_key, v.uid, v.node, v.message] for v in self.victims],
                "accepted": sorted(self.accepted),
            }
        )

    @classmethod
    def from_json(cls, raw: str | bytes) -> Nomination:
        d = json.loads(raw)
        return cls(
            gang=d["gang"],
            priority=int(d["priority"]),
            at=float(d["at"]),
            placements={k: (n, {r: int(v) for r, v in res.items()}) for k, (n, res) in d["placements"].items()},
            victims=[Victim(k, uid, node, d["gang"], msg) for k, uid, node, msg in d["victims"]],
            accepted=set(d.get("accepted", [])),
        )

    def hold(self, snap: Snapshot) -> CapacityHold | None:
        """The nomination as the reservation filter sees it: what the gang's pods need on each nominated
        node, kept from pods of lower priority. None when none of its nodes exists any more."""
        per_node: dict[int, Resources] = {}
        for node, held in self.placements.values():
            i = snap.index.get(node)
            if i is None:
                continue
            into = per_node.setdefault(i, {})
            for r, v in held.items():
                into[r] = into.get(r, 0) + v
        if not per_node:
            return None
        rows = sorted(per_node)
        amounts = np.zeros((len(rows), len(snap.resources)), dtype=np.int64)
        for n, i in enumerate(rows):
            for r, v in per_node[i].items():
                j = snap.column.get(r)
                if j is not None:
                    amounts[n, j] = v
        mask = np.zeros(len(snap), dtype=bool)
        mask[rows] = True
        # The victims may end at any moment: no pod can be sure to finish before the gang starts.
        return CapacityHold(
            self.gang,
            np.array(rows, dtype=np.intp),
            mask,
            amounts,
            earliest_start=self.at,
            now=self.at,
            generation=snap.generation,
            priority=self.priority,
            kind="preempting gang",
        )
