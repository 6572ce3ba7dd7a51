"""Pods resolved to their gangs and admitted, for whatever feeds the scheduler: the cluster feed (the API server's
watch) and the simulator (its workload's objects) decide through this one class which pending pods are
schedulable now, which wait for their gang object, and which are refused (`admit`), and keep the same three
records:

- the gang objects seen (PodGroups, gang ConfigMaps), in the GangResolver;
- the pods parked until the gang object they name exists (or, in the cluster feed, until the invalid one
  they were refused for changes), to be resolved again then;
- the gang specs the scheduler has been sent, so a spec goes out when it is new or changed, never twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from phalanx.intake.resolver import GangResolver, Resolution
from phalanx.model.objects import GangSpec, PodInfo
from phalanx.model.policies import with_gang_queue


class Decision(StrEnum):
    QUEUE = "queue"  # schedulable now: handed to the queue
    WAIT = "wait"  # its gang object has not arrived: parked until it does
    REFUSE = "refuse"  # its gang declaration is refused: not scheduled


@dataclass(frozen=True, slots=True)
class Admission:
    decision: Decision
    gang: str  # the gang key the pod names ("" for none), whatever the verdict
    spec: GangSpec | None
    reason: str = ""  # why it waits or is refused
    waiting_for: str = ""  # what it waits for (the resolver's words)


class GangIntake:
    def __init__(self, *, retry_refused: bool) -> None:
        """`retry_refused`: also park a pod refused for its gang's declaration (an invalid PodGroup, say),
        so the object's next version resolves it again. The cluster feed does: a user fixes the object in
        place, and the pod's refusal is a condition on it that the next resolution replaces. The simulator
        does not: its workload declares each object once, and each refusal is listed once among its errors."""
        self.resolver = GangResolver(default_wait_seconds=None)  # None: the scheduler applies its default
        self.retry_refused = retry_refused
        # gang key -> pods waiting for it, in the order they arrived (a dict as an ordered set)
        self._parked: dict[str, dict[str, None]] = {}
        self._sent: dict[str, GangSpec] = {}  # gang key -> the spec the scheduler has

    # -- gang objects ------------------------------------------------------------------------------------
    @staticmethod
    def is_gang_object(obj: Mapping[str, Any]) -> bool:
        return GangResolver.is_gang_object(obj)

    def add_object(self, obj: Mapping[str, Any], *, created_at: float) -> str:
        """Records a PodGroup or gang ConfigMap; returns its gang key (IntakeError: recorded as invalid)."""
        return self.resolver.add_object(obj, created_at=created_at)

    def remove_object(self, kind: str, namespace: str, name: str) -> str | None:
        return self.resolver.remove_object(kind, namespace, name)

    def gang(self, key: str) -> GangSpec | None:
        return self.resolver.gang(key)

    # -- pods --------------------------------------------------------------------------------------------
    def resolve(self, key: str, pod: PodInfo, parked_under: str = "", park: bool = True) -> Resolution:
        """The pod's gang. A pod that must wait for its gang's object (see `retry_refused`) is parked under
        the gang, unless `park` is False (a pod past scheduling, bound or finished, waits for nothing); it
        leaves `parked_under`, the gang it was parked under before, first."""
        res = self.resolver.resolve(pod)
        self.unpark(key, parked_under)
        if park and res.gang_key and (res.waiting_for or (res.error and self.retry_refused)):
            self._parked.setdefault(res.gang_key, {})[key] = None
        return res

    def admit(self, key: str, pod: PodInfo, parked_under: str = "", park: bool = True) -> Admission:
        """The decision on a pod: queue it, let it wait (parked, see `resolve`), or refuse it. A pod not
        refused is resolved in place: its gang and, once the gang's object is known, the gang's creation time
        and queue (spec.queue, for DRF) are set on `pod`."""
        res = self.resolve(key, pod, parked_under, park)
        if res.error:
            return Admission(Decision.REFUSE, res.gang_key, res.spec, res.error)
        pod.gang = res.gang_key
        if res.waiting_for:
            why = f"gang {res.gang_key}: {res.waiting_for}; the pod waits for it"
            return Admission(Decision.WAIT, res.gang_key, res.spec, why, res.waiting_for)
        if res.spec is not None:
            pod.gang_created_at = res.spec.created_at
            with_gang_queue(pod, res.spec.queue)
        return Admission(Decision.QUEUE, res.gang_key, res.spec)

    def unpark(self, key: str, gang: str) -> None:
        waiting = self._parked.get(gang)
        if waiting is not None:
            waiting.pop(key, None)
            if not waiting:
                del self._parked[gang]

    def parked(self, gang: str) -> list[str]:
        """The pods parked under `gang`, in the order they arrived; they stay parked."""
        return list(self._parked.get(gang, ()))

    def take_parked(self) -> list[str]:
        """Every parked pod, gang by gang in the order the gangs were first waited for; none stays parked."""
        taken = [key for waiting in self._parked.values() for key in waiting]
        self._parked = {}
        return taken

    # -- what the scheduler has been sent ------------------------------------------------------------------
    def is_new(self, spec: GangSpec) -> bool:
        """Whether the scheduler lacks this version of the gang's spec."""
        return self._sent.get(spec.key) != spec

    def note_sent(self, spec: GangSpec) -> bool:
        """Records that the scheduler has `spec`; whether it is new to it (to be sent)."""
        new = self.is_new(spec)
        self._sent[spec.key] = spec
        return new

    def was_sent(self, gang: str) -> bool:
        return gang in self._sent

    def forget_sent(self, gang: str | None = None) -> None:
        """The scheduler lost `gang`'s spec (None: every spec, as after Redis was emptied): sent again next."""
        if gang is None:
            self._sent.clear()
        else:
            self._sent.pop(gang, None)
