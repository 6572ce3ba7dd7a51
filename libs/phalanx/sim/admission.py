"""The simulator's intake: workload objects admitted as the cluster feed admits watched ones, through the same gang intake.

A pod is queued, parked until the gang object it names arrives (as the feed parks it), or refused and
listed among the run's errors (phalanx.cluster.gang_intake.GangIntake.admit decides, for both).
"""

from __future__ import annotations

from typing import Any, Callable

from phalanx.cluster.gang_intake import Decision
from phalanx.intake.errors import IntakeError
from phalanx.intake.pods import parse_pod, scheduler_name
from phalanx.model.objects import GangSpec, PodInfo
from phalanx.sim.state import SimState
from phalanx.sim.steps import Due
from phalanx.sim.tracks import PodTrack
from phalanx.sim.workload import WorkloadObject


class SimAdmission(SimState):
    def _intake(self, obj: WorkloadObject, parse: Callable[[WorkloadObject], Any]) -> Any:
        try:
            return parse(obj)
        except IntakeError as exc:
            self.errors.append(f"{obj.origin}: {exc}")
            return None

    def _admit_pod(self, obj: WorkloadObject, replace: bool = False) -> PodInfo | None:
        """`replace`: a PhalanxJob's pod recreated under the name of the one it replaces (kept in `previous`)."""
        track = PodTrack(
            obj.namespace, obj.name, obj.origin, dict((obj.obj.get("metadata") or {}).get("annotations") or {})
        )
        track.created_at = obj.at
        old = self.pods.get(track.key)
        if old is not None and not replace:
            self.errors.append(f"{obj.origin}: Pod {track.key} appears twice; the later copy is ignored")
            return None
        if old is not None:
            track.previous, old.previous = [*old.previous, old], []
            track.incarnation = old.incarnation + 1
            self.gang_bound[old.gang] = [k for k in self.gang_bound.get(old.gang, []) if k != old.key]
        job = self.job_of.get(track.key)
        if job is not None:
            job.created.append({"pod": obj.name, "at": obj.at})
        self.pods[track.key] = track
        wanted = scheduler_name(obj.obj)
        if wanted != self.opt.scheduler_name:
            track.reason = f"spec.schedulerName is {wanted!r}, not {self.opt.scheduler_name!r}: not Phalanx's pod"
            return None
        try:
            pod = parse_pod(obj.obj, epoch=self.w.epoch)
        except IntakeError as exc:
            track.reason = str(exc)
            self.errors.append(f"{obj.origin}: {exc}")
            return None
        pod.created_at = obj.at
        track.duration = pod.duration
        self.parsed[pod.key] = pod
        resolved = self._resolve(pod, track)
        if resolved is not None or track.waiting_for:  # arrived, queued or parked
            self.series.pod_arrived(pod.requests, track.gang, obj.at)
            life = self._life(track.key, track.duration)
            if life is not None:
                self._waiting_durations[track.key] = life
        return resolved

    def _resolve(self, pod: PodInfo, track: PodTrack) -> PodInfo | None:
        """The pod to hand the scheduler, through the gang intake the cluster feed decides with too; None for a
        pod refused, or parked until its gang's object arrives (resolved again then, in _reresolve_waiting).
        A bound pod waits for nothing, as in the feed."""
        bound = bool(pod.node_name)
        admission = self.intake.admit(pod.key, pod, park=not bound)
        if admission.decision == Decision.REFUSE:
            track.reason = admission.reason
            self.errors.append(f"{track.origin}: {admission.reason}")
            return None
        track.gang = admission.gang
        if admission.gang:
            self.gang_refs.add(admission.gang)
        track.waiting_for = admission.waiting_for
        if admission.spec is None:
            pod.gang_created_at = pod.created_at
        if self.opt.mode == "pod":
            pod.gang = ""  # kube-scheduler alone knows no gangs, nor waits for their objects
            return pod
        return None if admission.decision == Decision.WAIT and not bound else pod

    def _reresolve_waiting(self, due: Due) -> list[PodInfo]:
        """Pods parked for a missing PodGroup/ConfigMap: resolve again (every one, whichever gang object
        arrived), resend those that changed."""
        out = []
        for key in self.intake.take_parked():
            track = self.pods[key]
            if track.bound_at is not None:
                continue
            pod = self.parsed[key]
            resolved = self._resolve(pod, track)
            if resolved is None and track.reason:
                due.deleted.append(key)  # its gang object turned out invalid: out of the queue (pod mode) or parking
            elif resolved is not None and not track.waiting_for:
                out.append(resolved)
        return out

    def _specs_to_send(self, pods: list[PodInfo]) -> list[GangSpec]:
        out = []
        for key in sorted({self.pods[p.key].gang for p in pods} - {""}):
            spec = self.intake.gang(key)
            if spec is None:
                continue
            if self.intake.note_sent(spec) and self.opt.mode == "gang":  # pod mode: the scheduler knows no gangs
                out.append(spec)
        return out
