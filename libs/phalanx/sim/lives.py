"""The pods' lives in a simulation, as the kubelets would live them: bound, started with their gang, finished or preempted.

What the binder did is read back from Redis after each step (bindings, evictions, gang reports).
"""

from __future__ import annotations

import json

from phalanx.sim.state import SimState
from phalanx.sim.tracks import PodTrack


class PodLives(SimState):
    def _read_bindings(self, now: float) -> None:
        raw = self.redis.lrange(self.keys.sim_binds, self._bind_cursor, -1)
        self._bind_cursor += len(raw)
        for item in raw:
            b = json.loads(item)
            self._record_bind(b["pod"], b["node"], float(b["at"]))

    def _read_preemptions(self, now: float) -> None:
        """Victims the binder evicted since the last step: each ends at `now` (the kubelet's part), once."""
        raw = self.redis.lrange(self.keys.sim_preempted, self._preempt_cursor, -1)
        self._preempt_cursor += len(raw)
        for item in raw:
            event = json.loads(item)
            track = self.pods.get(event["pod"])
            if track is None or track.preempted_by or (track.finished_at is not None and track.finished_at <= now):
                continue
            track.preempted_by = event["by"]
            if track.finished_at is not None:  # its finish was noted ahead, with a run of later instants
                self.series.pod_finish_moved(self.parsed[track.key].requests, track.finished_at, now, track.node or "")
                track.finished_at = now
                self._push(now, "finished", track.key)  # noted already: only the release is left
            else:
                self._push(now, "preempt", track.key)

    def _read_gang_reports(self) -> None:
        """The gang-level reports the scheduler sent since the last step (the PodGroup status a cluster shows):
        each gang's last word before it bound (why it waits), and, for each gang whose state changed, what it
        holds reserved now, counted from its reserved pods in Redis, from the instant of its last report. That
        is exact: a gang changes only at a step's first instant (see lookahead.Lookahead._joins_waiting_gang)."""
        raw = self.redis.lrange(self.keys.sim_events, self._events_cursor, -1)
        self._events_cursor += len(raw)
        changed: dict[str, float] = {}
        for item in raw:
            if "PodGroup/" not in item:  # pod events, most of the list: not parsed
                continue
            event = json.loads(item)
            if not event["object"].startswith("PodGroup/"):
                continue
            gang = event["object"].removeprefix("PodGroup/")
            changed[gang] = float(event["at"])
            if event["reason"] != "Scheduled":  # the phase; once scheduled, the reason it waited stays
                self.gang_messages[gang] = event["message"]
        if not changed:
            return
        pipe = self.redis.pipeline(transaction=False)
        for gang in changed:
            pipe.smembers(self.keys.gang_assumed(gang))
        for (gang, at), members in zip(changed.items(), pipe.execute()):
            held: dict[str, int] = {}
            for key in members:
                pod = self.parsed.get(key)
                for r, v in (pod.requests if pod is not None else {}).items():
                    held[r] = held.get(r, 0) + v
            self.series.gang_reserved(gang, held, at)

    def _record_bind(self, key: str, node: str, at: float) -> None:
        track = self.pods.get(key)
        if track is None or track.bound_at is not None:
            return
        track.node, track.bound_at = node, at
        self.bound_count += 1
        job = self.job_of.get(key)
        if job is not None:
            self._push(at, "job", (job.key, at))
        self.series.pod_bound(self.parsed[key].requests, at, node)  # per node: GPU fragmentation
        if not track.gang:
            self._start(track, at)
            return
        bound = self.gang_bound.setdefault(track.gang, [])
        bound.append(key)
        if track.gang in self.gang_started:
            self._start(track, at)
            return
        spec = self.intake.gang(track.gang)
        if spec is not None and len(bound) >= spec.min_available:
            self.gang_started[track.gang] = at
            self.series.gang_started(track.gang, at)
            for k in bound:
                self._start(self.pods[k], at)

    def _start(self, track: PodTrack, at: float) -> None:
        track.started_at = at
        self._waiting_durations.pop(track.key, None)
        self.running += 1
        if track.duration is not None and track.key not in self._finished_early:
            self._push(at + track.duration, "finish", track.key)
        job = self.job_of.get(track.key)
        if job is not None:
            self._push(at, "job", (job.key, at))
            failures = job.failures.get(track.key)
            if failures:
                self._push(at + failures.pop(0), "fail", (track.key, track.incarnation))
