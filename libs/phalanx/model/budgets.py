"""PodDisruptionBudgets as the model holds them: how many of the pods a budget selects may be disrupted.

A budget's `status.disruptionsAllowed` is the disruption controller's count; where there is no controller
(the embedded cluster, or a status not yet written for the current spec) the allowance is computed from the
spec and the selected pods that are running, as the controller would: minAvailable or maxUnavailable,
percentages rounded like the controller's (minAvailable up, maxUnavailable down)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from phalanx.model.objects import PodInfo
from phalanx.model.pod_affinity import LabelSelector


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    namespace: str
    name: str
    selector: LabelSelector
    min_available: str = ""  # an integer or a percentage ("50%"); "" when not given
    max_unavailable: str = ""
    # status.disruptionsAllowed when the controller has written it for the current spec; None: compute it.
    disruptions_allowed: int | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def selects(self, pod: PodInfo) -> bool:
        # An empty selector selects every pod of the namespace (policy/v1).
        return pod.namespace == self.namespace and self.selector.matches(pod.labels)

    def allowance(self, running: int) -> int:
        """How many of the selected pods may go now, `running` of them running (never negative)."""
        if self.disruptions_allowed is not None:
            return max(0, self.disruptions_allowed)
        if self.min_available:
            return max(0, running - _scaled(self.min_available, running, up=True))
        if self.max_unavailable:
            return max(0, _scaled(self.max_unavailable, running, up=False))
        return running  # a budget with neither field protects nothing


def _scaled(value: str, total: int, up: bool) -> int:
    if value.endswith("%"):
        share = int(value[:-1]) * total / 100
        return math.ceil(share) if up else math.floor(share)
    return int(value)


def check_budget_value(value: object) -> str:
    """The budget field as text, or raises ValueError naming what is wrong with it."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{value!r} is not an integer or a percentage")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{value} is negative")
        return str(value)
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit():
        return value
    if isinstance(value, str) and value.isdigit():
        return value
    raise ValueError(f"{value!r} is not an integer or a percentage")
