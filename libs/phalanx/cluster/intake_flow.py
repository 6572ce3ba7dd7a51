"""The intake flow: watched nodes, pods and gang objects turned into scheduler and queue work, through the intake the simulator shares.

Each object goes into the mirror, and what it changes for scheduling into the batch (batch.Batch), which the
feed commits. Our pending pods are admitted by the gang intake (gang_intake.GangIntake.admit, the
simulator's too): queued when schedulable, parked while the gang object they name is missing, refused with
the reason (a refusal the user can fix in place, an invalid PodGroup say, is parked too, and resolved again
when the object changes). Pods past scheduling (bound or finished), whichever scheduler's, hold or give
back capacity; ours also join their gang, for its counters.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from phalanx.cluster.batch import Batch
from phalanx.cluster.gang_counts import GangCounts
from phalanx.cluster.gang_intake import Decision, GangIntake
from phalanx.cluster.mirror import TERMINAL, Mirror, MirroredPod, succeeded
from phalanx.intake.errors import IntakeError
from phalanx.intake.gangs import timeout_mark_holds
from phalanx.intake.nodes import parse_node
from phalanx.intake.pods import parse_pod, scheduler_name
from phalanx.kube.watch import object_key
from phalanx.model.keys import KOORD_TIMEOUT
from phalanx.model.objects import GangSpec, PodInfo
from phalanx.model.policies import with_gang_queue

log = logging.getLogger(__name__)

_PHALANX_WRITTEN = (KOORD_TIMEOUT,)  # annotations Phalanx itself writes: not a change by the user

# A pod parsed before the feed's lock (parse_early), or the error its parse gave; None: not parsed yet.
Early = PodInfo | IntakeError | None


def parse_early(kind: str, obj: Mapping[str, Any], scheduler: str, node_before: str | None) -> Early:
    """The parse on_pod will need, done by the caller's thread before the event waits for the feed's lock:
    for a pending pod of `scheduler`'s, and for a pod seen bound to another node than `node_before` (the
    node the mirror last recorded for it, None for a pod it does not know: a list's pods, a binding). Other
    events (a bound pod's status changes, deletions, finished pods) are parsed by on_pod only when it needs
    them, so they cost no parse here. `node_before` is read without the feed's lock: a stale value costs at
    most a parse not needed or one left to on_pod, never a wrong pod, as the parse is of this very event.
    Parsing is 40-50 us a pod: on a restart 30,000 bound pods' worth leave the rebuild's batch, and under
    steady arrival the scheduler's lock is not held for a new pod's parse nor for its binding's."""
    if kind == "DELETED":
        return None
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    if status.get("phase") in TERMINAL:
        return None
    node = spec.get("nodeName")
    if node:
        if node == node_before:
            return None
    elif scheduler_name(obj) != scheduler or (obj.get("metadata") or {}).get("deletionTimestamp"):
        return None
    try:
        return parse_pod(obj)
    except IntakeError as exc:
        return exc
    except Exception:  # left to on_pod, which reports it where the feed reports what it cannot handle
        return None


_SPEC_READ = ("nodeName", "schedulerName")  # what on_pod reads of a parsed pod's spec


def parsed_skeleton(obj: dict[str, Any], early: Early) -> dict[str, Any]:
    """What on_pod reads of a pod parse_early parsed: its metadata, status, node and scheduler. The rest of its
    spec (containers, volumes, tolerations: most of a decoded pod, 4 of 6.5 KB for a bench pod) is in the
    PodInfo, and a first list holds every event until all its lists are in (30,000 pods at a restart).
    A pod not parsed (an error, or left to on_pod) keeps all of it."""
    if not isinstance(early, PodInfo):
        return obj
    spec = obj.get("spec")
    kept = {k: spec[k] for k in _SPEC_READ if k in spec} if isinstance(spec, dict) else spec
    return {"metadata": obj.get("metadata"), "spec": kept, "status": obj.get("status")}


def _parsed(obj: Mapping[str, Any], early: Early) -> PodInfo:
    """The pod of `obj`: parsed early, or now; raises the IntakeError either gave."""
    if isinstance(early, PodInfo):
        return early
    if isinstance(early, IntakeError):
        raise early
    return parse_pod(obj)


class IntakeFlow:
    def __init__(self, mirror: Mirror, counts: GangCounts, scheduler_name: str) -> None:
        self.mirror = mirror
        self.counts = counts
        self.name = scheduler_name  # our pods name it (spec.schedulerName)
        self.intake = GangIntake(retry_refused=True)

    def on_node(self, kind: str, obj: Mapping[str, Any], b: Batch) -> None:
        """A node added, changed or deleted: into the mirror, and into the batch when scheduling reads the change."""
        name = object_key(obj)
        if kind == "DELETED":
            self.mirror.remove_node(name)
            b.nodes.pop(name, None)
            b.nodes_removed.add(name)
            return
        try:
            node = parse_node(obj)
        except IntakeError as exc:
            log.warning("cluster feed: %s; the node is not used", exc)
            return
        if self.mirror.set_node(node):  # else status heartbeats and the like: nothing scheduling reads
            b.nodes[name] = node
            b.nodes_removed.discard(name)

    # -- gang objects ------------------------------------------------------------------------------------
    def on_gang_object(self, kind: str, ref_kind: str, obj: Mapping[str, Any], b: Batch) -> str:
        """A PodGroup or gang ConfigMap added, changed or deleted (`kind`), as `ref_kind` names its kind; the
        gang's key ("" for an object that declares none)."""
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace") or "", meta.get("name") or ""
        if kind == "DELETED":
            key = self.intake.remove_object(ref_kind, namespace, name)
            if key:
                b.unreferenced.add(key)
        else:
            try:
                key = self.intake.add_object(obj, created_at=_created(obj))
            except IntakeError as exc:  # recorded as invalid: its pods are refused with this text
                log.warning("cluster feed: %s", exc)
                key = f"{namespace}/{name}"
        if key:
            b.changed_gangs.add(key)
        return key or ""

    def reresolve(self, b: Batch) -> None:
        """Gangs whose object changed: a spec in use is sent again, and the pods parked for them resolved again."""
        for gang in sorted(b.changed_gangs):
            spec = self.intake.gang(gang)
            if spec is not None and self.intake.was_sent(gang):
                self._send_spec(spec, b)  # a gang in use changed (or became invalid)
            for key in sorted(self.intake.parked(gang)):
                state = self.mirror.pod(key)
                if state is not None and state.info is not None and not state.node:
                    self._admit(key, state.info.copy(), state, b)

    def _send_spec(self, spec: GangSpec, b: Batch) -> None:
        first = not self.intake.was_sent(spec.key)
        if self.intake.note_sent(spec):
            b.gangs[spec.key] = spec
            if first:
                b.first_sent.add(spec.key)

    def specs_in_use(self) -> list[GangSpec]:
        """After Redis was emptied: every gang in use, all to be sent again."""
        self.intake.forget_sent()
        b = Batch()
        for gang in self.counts.gangs():
            spec = self.intake.gang(gang)
            if spec is not None:
                self._send_spec(spec, b)
        return list(b.gangs.values())

    # -- pods --------------------------------------------------------------------------------------------
    def on_pod(self, kind: str, obj: Mapping[str, Any], b: Batch, early: Early = None) -> None:
        """A pod, any scheduler's, added, changed or deleted: into the mirror, and into the batch what it changes.
        `early`: parse_early's result for this very event."""
        key = object_key(obj)
        prev = self.mirror.pod(key)
        if kind == "DELETED":
            self._forget(key, prev, b)
            return
        meta, spec, status = (obj.get(k) or {} for k in ("metadata", "spec", "status"))
        uid = meta.get("uid") or ""
        if prev is not None and prev.uid and uid and prev.uid != uid:
            self._forget(key, prev, b)  # deleted and recreated under the same name between two events
            prev = None
        state = prev or MirroredPod(uid, scheduler_name(obj) == self.name)
        self.mirror.put_pod(key, state)
        phase, node = status.get("phase") or "", spec.get("nodeName") or ""
        was_finished, state.phase = state.finished, phase
        if state.ours and state.gang:
            b.counted.add(state.gang)
        if state.finished:
            if not was_finished:  # the kubelet stopped it: its resources are free
                b.released.add(key)
                if succeeded(phase, meta, status):
                    b.succeeded.add(key)
                b.bound.pop(key, None)
                if state.ours and not state.gang:  # first seen finished (a restart): count it in its gang
                    try:
                        self._join_gang(key, parse_pod(obj), state, b)
                    except IntakeError:
                        pass
            self._take_back(key, state, b)
            return
        if node:
            if state.node != node:
                state.node = node
                self._on_bound(key, obj, state, b, early)
            self._take_back(key, state, b)
            return
        if state.ours:
            self._on_pending(key, obj, state, b, early)

    def _on_bound(self, key: str, obj: Mapping[str, Any], state: MirroredPod, b: Batch, early: Early) -> None:
        try:
            pod = _parsed(obj, early)
        except IntakeError as exc:
            log.warning("cluster feed: %s; its resources are not counted", exc)
            return
        if state.ours:
            self._join_gang(key, pod, state, b)
        state.info = pod  # what it holds: reconciliation re-counts it if Redis lost it
        b.bound[key] = pod

    def _forget(self, key: str, prev: MirroredPod | None, b: Batch) -> None:
        b.released.add(key)
        b.deleted.add(key)
        b.bound.pop(key, None)
        b.queue_add.pop(key, None)
        b.reports.pop(key, None)  # what it was told is forgotten with it (ClusterChange.forgotten)
        if prev is not None:
            self._leave(key, prev, b)
            self.mirror.drop_pod(key)

    def _on_pending(self, key: str, obj: Mapping[str, Any], state: MirroredPod, b: Batch, early: Early) -> None:
        """A pending pod of ours, added or changed."""
        meta = obj.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        if meta.get("deletionTimestamp") or (
            annotations.get(KOORD_TIMEOUT) == "true" and _timed_out_for_good(obj, early)
        ):
            # Being deleted, or its gang timed out for good: not scheduled again (until the user recreates it).
            self._take_back(key, state, b)
            return
        try:
            pod = _parsed(obj, early)
        except IntakeError as exc:
            self._refuse(key, str(exc), state, b)
            state.fingerprint = None
            return
        fingerprint = _fingerprint(pod)
        if state.queued and state.fingerprint == fingerprint:
            return  # our own writes (condition, annotations) or a change scheduling does not read
        state.fingerprint, state.info = fingerprint, pod
        self._admit(key, pod.copy(), state, b)

    def _admit(self, key: str, pod: PodInfo, state: MirroredPod, b: Batch) -> None:
        # Parked when it waits, or is refused, for its gang: a new or corrected PodGroup/ConfigMap resolves it again.
        admission = self.intake.admit(key, pod, parked_under=state.gang)
        self._set_gang(key, state, admission.gang, b)
        if admission.decision != Decision.QUEUE:
            self._refuse(key, admission.reason, state, b)
            return
        if admission.spec is not None:
            self._send_spec(admission.spec, b)
        b.queue(key, pod)
        state.queued, state.queued_as, state.queue_forgot = True, pod, False

    def _join_gang(self, key: str, pod: PodInfo, state: MirroredPod, b: Batch) -> None:
        """Records which gang a pod that is past scheduling (bound or finished) belongs to."""
        res = self.intake.resolve(key, pod, parked_under=state.gang, park=False)  # past scheduling: never waits
        pod.gang = res.gang_key if not res.error else ""
        self._set_gang(key, state, pod.gang, b)
        if res.spec is not None:  # a rebuild after a lost Redis: the scheduler learns the gang too
            with_gang_queue(pod, res.spec.queue)  # what it holds counts against its gang's queue (DRF)
            self._send_spec(res.spec, b)

    def _take_back(self, key: str, state: MirroredPod, b: Batch) -> None:
        """The pod is not to be scheduled (any more): out of the queue if it was handed to it."""
        b.queue_add.pop(key, None)
        if state.in_queue:  # a pod the scheduler holds (assumed, bound) is not
            b.queue_remove.add(key)
        state.queued = False

    def _leave(self, key: str, prev: MirroredPod, b: Batch) -> None:
        """A pod deleted (or recreated under its name): out of the queue, its parking and its gang."""
        if prev.in_queue:
            b.queue_remove.add(key)
        self.intake.unpark(key, prev.gang)
        self._set_gang(key, prev, "", b)

    def _set_gang(self, key: str, state: MirroredPod, gang: str, b: Batch) -> None:
        for g in {state.gang, gang} - {""}:
            b.counted.add(g)
        if self.counts.move(key, state.gang, gang):
            b.unreferenced.add(state.gang)
        state.gang = gang

    def unheld(self, held: Collection[str]) -> Batch:
        """A batch with every pending pod of ours not in `held` (the pods the scheduler holds: reserved ones
        wait for their gang in Redis, not in the queue), resolved to its gang as when it was first handed over."""
        b = Batch()
        for key, state in sorted(self.mirror.pods.items()):
            if state.pending_ours and key not in held:
                assert state.info is not None  # pending_ours says so
                self._admit(key, state.info.copy(), state, b)
        return b

    def forget_unreferenced(self, gangs: Collection[str]) -> list[str]:
        """Gangs with no pod left forget their first pod's declaration; returns those no object declares
        either (to be dropped from the scheduler)."""
        idle = sorted(g for g in gangs if not self.counts.in_use(g))
        for gang in idle:
            self.intake.resolver.forget_link(gang)
        return [g for g in idle if not self.intake.resolver.has_object(g)]

    def _refuse(self, key: str, message: str, state: MirroredPod, b: Batch) -> None:
        self._take_back(key, state, b)
        b.reports[key] = message


def _timed_out_for_good(obj: Mapping[str, Any], early: Early) -> bool:
    """A pod marked timed out: whether the mark holds (phalanx.intake.gangs.timeout_mark_holds). One that
    cannot be read is left alone, as every marked pod was."""
    try:
        return timeout_mark_holds(_parsed(obj, early))
    except IntakeError:
        return True


def _fingerprint(pod: PodInfo) -> tuple[Any, ...]:
    annotations = tuple(sorted((k, v) for k, v in pod.annotations.items() if k not in _PHALANX_WRITTEN))
    return (
        pod.uid,
        pod.priority,
        tuple(sorted(pod.requests.items())),
        pod.placement,
        tuple(sorted(pod.labels.items())),
        annotations,
    )


def _created(obj: Mapping[str, Any]) -> float:
    raw = (obj.get("metadata") or {}).get("creationTimestamp")
    if isinstance(raw, str) and raw:
        try:
            return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    return time.time()
