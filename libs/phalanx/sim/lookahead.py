"""The look-ahead: quiet instants after a step's own (pods arriving or finishing only), run by the scheduler in the same step."""

from __future__ import annotations

import heapq
from typing import Any

from phalanx.model.objects import PodInfo
from phalanx.rpc.validation import MAX_ITEMS
from phalanx.sim.admission import SimAdmission
from phalanx.sim.steps import Due, Instant
from phalanx.sim.workload import WorkloadObject


class Lookahead(SimAdmission):
    def _gather_later(self, now: float, due: Due) -> list[Instant]:
        """The instants after `now` at which only pods arrive or finish, for the scheduler to run in
        the same step while the cluster stays quiet (so every pod is bound the instant it arrives).

        A pod without a gang bound at t in such a run finishes at t + its duration: that finish is
        added to the run as a foreseen event (kept only if the run gets that far). The run ends before
        any other kind of event, and before a pod of a gang, whose start is not known yet, could end."""
        horizon = float("inf")
        foreseen: list[tuple[float, str]] = []  # (time, pod) finishes of pods bound in the run

        def foresee(pods: list[PodInfo], at: float) -> None:
            nonlocal horizon
            for p in pods:
                life = self._life(p.key, p.duration)
                if life is None:
                    continue
                if self.pods[p.key].gang:  # starts when its gang is complete: not known in advance
                    horizon = min(horizon, at + life)
                else:
                    heapq.heappush(foreseen, (at + life, p.key))

        foresee(due.pods, now)
        # Pods that arrived before this step and have not started (waiting in the queue, or for their
        # gang) may start at any instant of the run: it must end before the earliest could finish.
        arriving = {p.key for p in due.pods}
        earlier = [d for k, d in self._waiting_durations.items() if k not in arriving]
        if earlier:
            horizon = min(horizon, now + min(earlier))
        out: list[Instant] = []
        carried = len(due.pods)  # pods (arriving or finishing) the step request carries so far
        while len(out) < self._later_limit and (self._events or foreseen):
            at = min(self._events[0][0] if self._events else float("inf"), foreseen[0][0] if foreseen else float("inf"))
            if at >= horizon or (self.opt.until is not None and at > self.opt.until):
                break
            batch = []
            while self._events and self._events[0][0] == at:
                batch.append(heapq.heappop(self._events))
            if not all(self._simple(kind, payload) for _, _, kind, payload in batch):
                for entry in batch:
                    heapq.heappush(self._events, entry)
                break
            inst = Instant(at)
            while foreseen and foreseen[0][0] == at:
                inst.foreseen.append(heapq.heappop(foreseen)[1])
            for _, _, kind, payload in batch:
                if kind == "finish":
                    self._note_finished(payload, at)
                    inst.finished.append(payload)
                elif kind == "finished":
                    inst.finished.append(payload)
                elif kind == "admitted":
                    inst.pods.append(payload)
                else:
                    pod = self._admit_pod(payload)
                    if pod is not None:
                        inst.pods.append(pod)
            if (
                self._declares_gang(inst.pods)
                or self._joins_waiting_gang(inst.pods)
                or carried + len(inst.pods) + len(inst.finished) > MAX_ITEMS
            ):
                # Declaring a gang is a cluster event (it retries unschedulable pods): it gets its own step.
                # And one request carries at most MAX_ITEMS pods: the instant waits for the next step.
                self._put_back([inst])
                break
            carried += len(inst.pods) + len(inst.finished)
            foresee(inst.pods, at)
            out.append(inst)
        return out

    def _declares_gang(self, pods: list[PodInfo]) -> bool:
        if self.opt.mode != "gang":
            return False
        for key in {self.pods[p.key].gang for p in pods} - {""}:
            spec = self.intake.gang(key)
            if spec is not None and self.intake.is_new(spec):
                return True
        return False

    def _joins_waiting_gang(self, pods: list[PodInfo]) -> bool:
        """A pod of a gang not started yet may change what gangs hold reserved, which is read as each step
        ends (lives.PodLives._read_gang_reports): it gets its own step, so that reading is exact at every instant. Nothing
        else in a run of quiet instants can (the queue holds nothing but each instant's arrivals)."""
        return self.opt.mode == "gang" and any(
            (g := self.pods[p.key].gang) and g not in self.gang_started for p in pods
        )

    def _simple(self, kind: str, payload: Any) -> bool:
        """An event a quiet run of instants can take: a pod arriving unbound, or a pod finishing; not a
        PhalanxJob's pod, to whose changes the job controller reacts at their instant."""
        if kind == "finish":
            return payload not in self.job_of
        if kind in ("finished", "admitted"):
            return True
        if kind != "object":
            return False
        obj: WorkloadObject = payload
        return obj.kind == "Pod" and not (obj.obj.get("spec") or {}).get("nodeName") and obj.key not in self.job_of

    def _put_back(self, instants: list[Instant]) -> None:
        """Instants the step did not run go back on the timeline, already admitted and noted; their
        foreseen finishes are dropped (those pods' real binds, if any, will schedule them)."""
        for inst in instants:
            for key in inst.finished:
                self._push(inst.at, "finished", key)
            for pod in inst.pods:
                self._push(inst.at, "admitted", pod)
