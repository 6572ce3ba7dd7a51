"""PhalanxJobs in a simulation: their controller played on the virtual clock, reacting to its pods' changes."""

from __future__ import annotations

from phalanx.jobs.api import FINISHED
from phalanx.jobs.objects import desired_pods
from phalanx.sim import jobs as simjobs
from phalanx.sim.state import SimState
from phalanx.sim.steps import Due
from phalanx.sim.tracks import PodTrack


class JobControl(SimState):
    def _job_changed(self, key: str, at: float, dirty: dict[str, set[float]]) -> None:
        job = self.job_of.get(key)
        if job is not None:
            dirty.setdefault(job.key, set()).add(at)

    def _run_controller(self, dirty: dict[str, set[float]], now: float, due: Due) -> None:
        """The controller's reconcile of each job whose pods changed, at each instant they did (binds and
        starts read after a step may be a little before `now`), doing what it plans at `now`: pods it deletes
        end now (their capacity freed in this step), pods it creates arrive at this instant, in the next
        step (after the deletion of the pod they replace)."""
        for key in sorted(dirty):
            job = self._jobs[key]
            for at in sorted(dirty[key]):
                tracks = {k: self.pods[k] for k in job.pods if k in self.pods}
                plan = simjobs.observe(job, tracks, at)
                stage = str(plan.status.get("stage") or "")
                deleted = set()
                for name, uid in plan.delete:
                    track = self.pods.get(f"{job.namespace}/{name}")
                    if track is not None and simjobs.uid(track) == uid and track.deleted_at is None:
                        self._deleted_by_controller(track, now, due, f"job {stage}")
                        deleted.add(name)
                if plan.spec is None or stage in (s.value for s in FINISHED):
                    continue
                # As the controller's _apply: a failed pod deleted now is recreated in the same pass.
                restarts = dict(plan.create) | {
                    str(e["name"]): int(e.get("restarts") or 0)
                    for e in [plan.status["leader"], *plan.status["workers"]]
                    if e["name"] in deleted and e["name"] not in job.creating
                }
                for name in [n for n, _, _ in desired_pods(job.name, plan.spec) if n in restarts]:  # leader first
                    job.creating.add(name)
                    self._push(now, "recreate", (job, simjobs.pod_body(job, name, restarts[name])))

    def _deleted_by_controller(self, track: PodTrack, now: float, due: Due, why: str) -> None:
        """The job controller deleted the pod: a running or bound one ends now, a waiting one leaves the queue."""
        track.deleted_at = now
        if track.finished_at is not None or (track.bound_at is None and track.reason):
            return  # over already (succeeded, failed, preempted), or never admitted
        track.ended = "Deleted"
        if track.bound_at is not None:
            track.finished_at = now
            if track.started_at is not None:
                self.running -= 1
            self.series.pod_finished(self.parsed[track.key].requests, now, track.node or "")
            self._drop_finish(track.key)
        else:
            track.reason = f"deleted by phalanx-controller: {why}"
            self._waiting_durations.pop(track.key, None)
        due.deleted.append(track.key)
