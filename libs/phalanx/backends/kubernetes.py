"""The binder's side of a real cluster: bindings, pod conditions, annotations, Events and PodGroup status,
written through the Kubernetes API.

Binding goes through the pods/binding subresource, as kube-scheduler's does, with the pod's UID as a
precondition (a pod deleted and recreated under the same name is not bound by mistake). Pods of a batch are
bound concurrently. What an answer means:
- 201: bound; a `Scheduled` Event follows, as kube-scheduler writes it.
- 404, or 409 because the UID differs: the pod is gone. Not an error for the rest of its gang.
- 409 otherwise: the pod is read back; already bound to the same node (our earlier attempt did succeed, its
  answer was lost) counts as success, bound elsewhere is a failure.
- 429, 5xx, timeouts, connection errors: retried with capped exponential backoff, a bounded number of times.

Reports (conditions, annotations, Events, PodGroup status) are written off the bind path by several
threads, in order per object (write_lanes): scheduling does not wait for the API server, and a slow API
server only delays messages.

Nothing is taken on trust from the caller (kube_guard): `precheck` refuses pods of other schedulers, pods
gone or being deleted, and nodes that do not exist, from a watch-fed cache; reports write only on pods
naming our scheduler (`component`) and on PodGroups such a pod names, only the annotations and Event
reasons Phalanx itself writes.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

from phalanx import faults
from phalanx.backends.api_calls import api_message, json_or_none, release, transient
from phalanx.backends.base import BindFailure
from phalanx.backends.kube_guard import (
    NORMAL_EVENT_REASONS,
    ClusterView,
    event_reason_allowed,
    report_annotations,
    unreserved,
)
from phalanx.backends.write_lanes import WriteLanes
from phalanx.kube import podgroups
from phalanx.model.binding import Assignment, EvictResult, EvictStatus, GangReport, PodReport, Victim
from phalanx.model.keys import DEFAULT_SCHEDULER_NAME
from phalanx.model.status import EventReason
from phalanx.state.txn import Txn

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
_MAX_EVENT_MESSAGE = 1024  # what the API server keeps of an Event's message


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 6
    initial_delay: float = 0.1
    max_delay: float = 2.0
    request_timeout: float = 15.0


class _Retry(Exception):
    """A transient answer: try again after the backoff."""


class KubernetesBackend:
    name = "kubernetes"
    transactional = False  # bindings are API calls made before the commit, not writes inside it

    def __init__(
        self,
        api_client: Any,
        *,
        component: str = DEFAULT_SCHEDULER_NAME,
        retry: RetryPolicy | None = None,
        bind_workers: int = 8,
        report_workers: int = 8,
        eviction_grace_seconds: int | None = None,
        eviction_mode: str = "api",
    ) -> None:
        from phalanx.kube.api import KubeApi

        # Not the client's generated API classes (their import costs the binder's start-up most of a second,
        # and pydantic checks every call): the same requests, made raw (kube/api.py).
        self.core = self.custom = KubeApi(api_client)
        # The pods' spec.schedulerName this binder binds and reports on, and the Events' source, like
        # kube-scheduler's "default-scheduler".
        self.component = component
        self.instance = socket.gethostname()[:128]
        self.retry = retry or RetryPolicy()
        self._binders = ThreadPoolExecutor(bind_workers, thread_name_prefix="k8s-bind")
        # Started by from_args (the binder), else on first use: a backend built only to bind needs no watch.
        self.view = ClusterView(self.core, component, request_timeout=self.retry.request_timeout)
        self._writes = WriteLanes(report_workers)  # status writes, in order per object
        self._pruned: dict[str, frozenset[str]] = {}  # API group -> PodGroup status fields its CRD lacks
        # Preemption: the grace period an eviction gives its victims; None: each pod's own
        # terminationGracePeriodSeconds, as kube-scheduler leaves it.
        self.eviction_grace_seconds = eviction_grace_seconds
        self.eviction_mode = eviction_mode  # "api": the Eviction API; "delete": condition, then delete

    @classmethod
    def from_args(cls, args: Any) -> KubernetesBackend:
        from phalanx.kube.client import api_client

        component = getattr(args, "scheduler_name", "") or os.environ.get("PHALANX_SCHEDULER_NAME", "")
        grace = getattr(args, "eviction_grace_seconds", None)
        backend = cls(
            api_client(getattr(args, "kubeconfig", "") or ""),
            component=component or DEFAULT_SCHEDULER_NAME,
            eviction_grace_seconds=grace if isinstance(grace, int) and grace >= 0 else None,
            eviction_mode=getattr(args, "eviction_mode", "api") or "api",
        )
        backend.view.start()  # warm by the first bind; until then misses are GETs
        return backend

    def close(self) -> None:
        self._writes.close()
        self._binders.shutdown(wait=True)
        self.view.stop()

    # -- checks ----------------------------------------------------------------------------------------
    def precheck(self, assignments: list[Assignment]) -> dict[str, BindFailure]:
        self.view.start()
        return self.view.check(assignments, self._binders.map)

    def unreserved(self, a: Assignment, held: Mapping[str, int]) -> BindFailure | None:
        try:
            spec = self.view.spec_requests(a.pod_key)
        except Exception as exc:  # not checked is not bound; asked again later
            return BindFailure(f"could not read pod {a.pod_key}'s requests: {exc}", retryable=transient(exc))
        if spec is None:
            return None  # gone: the precheck has said so already
        why = unreserved(a.pod_key, spec, held)
        return BindFailure(why) if why else None

    # -- binding ---------------------------------------------------------------------------------------
    def bind(self, assignments: list[Assignment], now: float, commit: Txn) -> dict[str, BindFailure]:
        outcomes = list(self._binders.map(self._bind_one, assignments))
        return {a.pod_key: failure for a, failure in zip(assignments, outcomes) if failure is not None}

    def _bind_one(self, a: Assignment) -> BindFailure | None:
        namespace, name = a.pod_key.split("/", 1)
        uid = a.uid
        if not uid:  # every binding names the incarnation checked as ours: take the uid from the view
            found = self._our_uid(a.pod_key)
            if isinstance(found, BindFailure):
                return found
            uid = found
        # Precondition: only this incarnation of the pod (and schedulerName is immutable: only one of ours).
        meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": a.node},
        }
        delay, last = self.retry.initial_delay, ""
        for attempt in range(self.retry.attempts):
            if attempt:
                time.sleep(delay)
                delay = min(delay * 2, self.retry.max_delay)
            try:
                # _preload_content=False: the answer (a Status) is read raw.
                release(
                    self.core.create_namespaced_pod_binding(
                        name,
                        namespace,
                        body,
                        _preload_content=False,
                        _request_timeout=self.retry.request_timeout,
                    )
                )
            except Exception as exc:
                try:
                    failure = self._bind_error(a, exc)
                except _Retry as retry:
                    last = str(retry)
                    continue
                except Exception as unexpected:  # a failed pod, never a failed batch
                    return BindFailure(f"binding {a.pod_key} to {a.node} failed: {unexpected}")
                if failure is not None:
                    return failure
            # The Event is written by the report thread: the bind (and the bind mutex) does not wait for it.
            faults.reached("binder.between_pods")
            target = {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name, "uid": uid}
            self._writes.put(
                a.pod_key,
                partial(
                    self._event_safe, target, EventReason.SCHEDULED, f"Successfully assigned {a.pod_key} to {a.node}"
                ),
            )
            return None
        return BindFailure(
            f"binding {a.pod_key} to {a.node} failed after {self.retry.attempts} attempts: {last}", retryable=True
        )

    def _our_uid(self, pod_key: str) -> str | BindFailure:
        try:
            facts = self.view.pod(pod_key)
        except Exception as exc:
            return BindFailure(f"could not check pod {pod_key}: {exc}", retryable=transient(exc))
        if facts is None:
            return BindFailure(f"pod {pod_key} does not exist", gone=True)
        if not self.view.ours(facts):
            return BindFailure(
                f'pod {pod_key} names scheduler "{facts.scheduler}", not "{self.component}": not Phalanx\'s to bind'
            )
        return facts.uid

    def _bind_error(self, a: Assignment, exc: Exception) -> BindFailure | None:
        """None: the pod is bound where we wanted it after all. Raises _Retry for transient errors."""
        from kubernetes.client.rest import ApiException

        if not isinstance(exc, ApiException):
            if transient(exc):
                raise _Retry(f"{type(exc).__name__}: {exc}")
            raise exc
        if exc.status == 404:
            return BindFailure(f"pod {a.pod_key} no longer exists", gone=True)
        if exc.status == 409:
            return self._after_conflict(a, api_message(exc))
        if exc.status == 429 or (exc.status or 0) >= 500:
            raise _Retry(f"{exc.status} {api_message(exc)}")
        return BindFailure(f"binding {a.pod_key} to {a.node} was refused: {exc.status} {api_message(exc)}")

    def _after_conflict(self, a: Assignment, message: str) -> BindFailure | None:
        namespace, name = a.pod_key.split("/", 1)
        try:
            pod = self._read_pod(namespace, name)
        except Exception as exc:
            if transient(exc):
                raise _Retry(f"conflict ({message}); reading the pod failed: {exc}") from None
            raise
        if pod is None or (a.uid and (pod.get("metadata") or {}).get("uid") != a.uid):
            return BindFailure(f"pod {a.pod_key} no longer exists (deleted or recreated)", gone=True)
        node = (pod.get("spec") or {}).get("nodeName") or ""
        if node == a.node:
            return None
        if node:
            return BindFailure(f"pod {a.pod_key} is already bound to {node}")
        raise _Retry(f"conflict: {message}")

    # -- reports ---------------------------------------------------------------------------------------
    def report(self, pods: list[PodReport], gangs: list[GangReport], now: float) -> None:
        if not (pods or gangs):
            return
        self.view.start()  # reports are checked against it too
        for p in pods:
            self._writes.put(p.pod_key, partial(self._report_pod_safe, p))
        for g in gangs:
            self._writes.put(g.gang_key, partial(self._report_gang_safe, g))

    def flush(self, timeout: float = 10.0) -> bool:
        """Waits until every report handed in so far is written."""
        return self._writes.flush(timeout)

    def _report_pod_safe(self, p: PodReport) -> None:
        try:
            self._report_pod(p)
        except Exception as exc:  # best effort: the next report of the pod says it again
            log.warning("reporting on pod %s failed: %s", p.pod_key, exc)

    def _report_gang_safe(self, g: GangReport) -> None:
        try:
            self._report_gang(g)
        except Exception as exc:
            log.warning("reporting on gang %s failed: %s", g.gang_key, exc)

    def _report_pod(self, p: PodReport) -> None:
        if p.waiting and not p.annotations and not p.nominated_node:
            # Placed, waiting for the rest of its gang: kube-scheduler writes nothing on a pod it holds in
            # Permit, and neither does Phalanx. Any False PodScheduled condition, whatever its reason, is
            # repeated by Kubeflow's training-operator as a Warning Event on the job (pkg/core/job.go, v1.8.1),
            # and the gang's own GangWaiting Event and PodGroup status already say it. One API write less, too.
            return
        namespace, name = p.pod_key.split("/", 1)
        facts = self.view.pod(p.pod_key)
        if facts is None:
            return  # gone: nothing to report on
        if not self.view.ours(facts):
            log.warning(
                'report on pod %s dropped: it names scheduler "%s", not "%s"',
                p.pod_key,
                facts.scheduler,
                self.component,
            )
            return
        annotations = report_annotations(p.pod_key, p.annotations)
        pod: dict[str, Any] | None = None
        if annotations:
            # The uid makes the patch fail on another incarnation of the pod (possibly not ours) than the one checked.
            pod = self._patch_pod(namespace, name, {"metadata": {"uid": facts.uid, "annotations": annotations}})
            if pod is None:
                return
        if p.nominated_node:
            pod = pod or self._read_pod(namespace, name)
            if pod is not None and not (pod.get("spec") or {}).get("nodeName") and self.view.ours(pod):
                self._nominate(pod, p.nominated_node)
        if p.unschedulable_message:
            pod = pod or self._read_pod(namespace, name)
            reason = p.condition_reason
            for _ in range(3):
                if pod is None or (pod.get("spec") or {}).get("nodeName"):
                    return  # gone, or bound since: the report is stale
                if not self.view.ours(pod):
                    return  # recreated since the check, by someone else's scheduler
                if _scheduled_condition(pod) == ("False", reason, p.unschedulable_message):
                    if not annotations:
                        return  # nothing new to say: no second condition write, no second Event
                    break
                if self._set_not_scheduled(pod, reason, p.unschedulable_message):
                    break
                pod = self._read_pod(namespace, name)  # it changed meanwhile (bound, perhaps): look again
        if p.event_reason and event_reason_allowed(p.event_reason, f"pod {p.pod_key}"):
            uid = (pod.get("metadata") or {}).get("uid", "") if pod is not None else facts.uid
            if pod is None or self.view.ours(pod):
                self._event(
                    {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name, "uid": uid},
                    p.event_reason,
                    p.event_message or p.unschedulable_message,
                )

    # -- preemption ------------------------------------------------------------------------------------
    def evict(self, victims: list[Victim], now: float) -> list[EvictResult]:
        """Through the Eviction API (the default: PodDisruptionBudgets are checked by the API server, a 429 is
        a refusal, and the API server sets the DisruptionTarget condition, reason EvictionByEvictionAPI), or,
        with eviction_mode "delete", kube-scheduler's way: the DisruptionTarget condition (reason
        PreemptionByScheduler) first, so whoever watches the pod knows why it goes, then a delete. Then a
        Preempted Event naming the preemptor. In order; after a refusal the rest are not tried."""
        out: list[EvictResult] = []
        refused = ""
        for v in victims:
            if refused:
                out.append(EvictResult(v.pod_key, EvictStatus.REFUSED, f"not tried: {refused}"))
                continue
            result = self._evict_one(v)
            if result.status == EvictStatus.REFUSED:
                refused = f"the eviction of {v.pod_key} was refused"
            out.append(result)
        return out

    def _evict_one(self, v: Victim) -> EvictResult:
        from kubernetes.client.rest import ApiException

        namespace, name = v.pod_key.split("/", 1)
        try:
            pod = self._read_pod(namespace, name)
        except Exception as exc:
            return EvictResult(v.pod_key, EvictStatus.RETRY, f"reading the pod failed: {exc}")
        if pod is None or (v.uid and (pod.get("metadata") or {}).get("uid") != v.uid):
            return EvictResult(v.pod_key, EvictStatus.GONE, "no longer exists")
        uid = (pod.get("metadata") or {}).get("uid", "")
        message = f"{self.component}: {v.message}"
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": message,
            "lastTransitionTime": podgroups.rfc3339(time.time()),
        }
        delete_options: dict[str, Any] = {"preconditions": {"uid": uid}}
        if self.eviction_grace_seconds is not None:
            delete_options["gracePeriodSeconds"] = self.eviction_grace_seconds
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": delete_options,
        }
        try:
            if self.eviction_mode == "delete":
                json_or_none(
                    lambda: self.core.patch_namespaced_pod_status(
                        name,
                        namespace,
                        {"status": {"conditions": [condition]}},
                        _content_type=STRATEGIC_MERGE_PATCH,
                        _preload_content=False,
                        _request_timeout=self.retry.request_timeout,
                    )
                )
                release(
                    self.core.delete_namespaced_pod(
                        name,
                        namespace,
                        body=delete_options,
                        _preload_content=False,
                        _request_timeout=self.retry.request_timeout,
                    )
                )
            else:
                release(
                    self.core.create_namespaced_pod_eviction(
                        name,
                        namespace,
                        body,
                        _preload_content=False,
                        _request_timeout=self.retry.request_timeout,
                    )
                )
        except ApiException as exc:
            if exc.status == 404:
                return EvictResult(v.pod_key, EvictStatus.GONE, "no longer exists")
            if exc.status == 429:  # a PodDisruptionBudget allows no disruption now
                return EvictResult(v.pod_key, EvictStatus.REFUSED, api_message(exc))
            if exc.status == 409 or (exc.status or 0) >= 500:
                return EvictResult(v.pod_key, EvictStatus.RETRY, f"{exc.status} {api_message(exc)}")
            return EvictResult(v.pod_key, EvictStatus.REFUSED, f"{exc.status} {api_message(exc)}")
        except Exception as exc:
            if transient(exc):
                return EvictResult(v.pod_key, EvictStatus.RETRY, str(exc))
            raise
        target = {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name, "uid": uid}
        self._writes.put(v.pod_key, partial(self._event_safe, target, EventReason.PREEMPTED, v.message))
        return EvictResult(v.pod_key, EvictStatus.EVICTED)

    def _nominate(self, pod: dict[str, Any], node: str) -> None:
        """status.nominatedNodeName, as kube-scheduler sets it on a preemptor while its victims go."""
        meta = pod.get("metadata") or {}
        json_or_none(
            lambda: self.core.patch_namespaced_pod_status(
                meta["name"],
                meta["namespace"],
                {"metadata": {"uid": meta.get("uid")}, "status": {"nominatedNodeName": node}},
                _content_type=MERGE_PATCH,
                _preload_content=False,
                _request_timeout=self.retry.request_timeout,
            )
        )

    def _report_gang(self, g: GangReport) -> None:
        namespace, _, name = g.gang_key.partition("/")
        group = podgroups.group_of(g.source)
        target: dict[str, Any] | None = None
        # Its pods (ours) all deleted, no pod names it any more: only the counters saying so are written.
        gone = g.has_counts and not (g.running or g.scheduled)
        if (
            group is not None
            and not (gone and self.view.vacated(group, namespace, name))
            and not self.view.owns_podgroup(group, namespace, name)
        ):
            log.warning(
                'report on PodGroup %s (%s) dropped: no pod naming scheduler "%s" names it',
                g.gang_key,
                group,
                self.component,
            )
            group = None
        if group is not None:
            body = podgroups.status_patch(group, g, time.time(), self.view.occupied_by(group, namespace, name))
            pruned = self._pruned.get(group, frozenset())
            body["status"] = {k: v for k, v in body["status"].items() if k not in pruned}
            obj = json_or_none(
                lambda: self.custom.patch_namespaced_custom_object_status(
                    group,
                    podgroups.VERSIONS[group],
                    namespace,
                    podgroups.PLURAL,
                    name,
                    body,
                    _content_type=MERGE_PATCH,
                    _preload_content=False,
                )
            )
            if obj is not None:
                self._learn_schema(group, body["status"], obj.get("status") or {})
                target = {
                    "apiVersion": podgroups.api_version(group),
                    "kind": "PodGroup",
                    "namespace": namespace,
                    "name": name,
                    "uid": (obj.get("metadata") or {}).get("uid", ""),
                }
        if not g.event_reason or not g.message or not event_reason_allowed(g.event_reason, f"gang {g.gang_key}"):
            return
        if target is None and g.pod_key:  # no PodGroup: the Event goes on a pod of the gang, if it is ours
            pod_namespace, pod_name = g.pod_key.split("/", 1)
            facts = self.view.pod(g.pod_key)
            if facts is not None and self.view.ours(facts):
                target = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "namespace": pod_namespace,
                    "name": pod_name,
                    "uid": facts.uid,
                }
            elif facts is not None:
                log.warning(
                    'gang report %s: no Event on pod %s: it names scheduler "%s", not "%s"',
                    g.gang_key,
                    g.pod_key,
                    facts.scheduler,
                    self.component,
                )
        if target is not None:
            self._event(target, g.event_reason, g.message)

    def _learn_schema(self, group: str, sent: dict[str, Any], kept: dict[str, Any]) -> None:
        """Fields the installed CRD's schema does not have are pruned from what the API server stores: seen
        once in its answer, they are no longer sent (upstream scheduler-plugins' CRD has no
        status.scheduled, Phalanx's copy in deploy/crds does)."""
        dropped = {k for k in sent if k not in kept}
        if dropped - self._pruned.get(group, frozenset()):
            log.info(
                "PodGroup status in %s: the installed CRD has no %s; not written from now on",
                group,
                ", ".join(f"status.{k}" for k in sorted(dropped)),
            )
            self._pruned[group] = self._pruned.get(group, frozenset()) | dropped

    # -- API calls -------------------------------------------------------------------------------------
    def _read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return json_or_none(
            lambda: self.core.read_namespaced_pod(
                name, namespace, _preload_content=False, _request_timeout=self.retry.request_timeout
            )
        )

    def _patch_pod(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any] | None:
        return json_or_none(
            lambda: self.core.patch_namespaced_pod(
                name,
                namespace,
                body,
                _content_type=MERGE_PATCH,
                _preload_content=False,
                _request_timeout=self.retry.request_timeout,
            )
        )

    def _set_not_scheduled(self, pod: dict[str, Any], reason: str, message: str) -> bool:
        """PodScheduled=False (with `reason`) on the pod as it was read; False when it changed since (409).

        The resourceVersion is a precondition: the binder binds pods concurrently with reporting, and an
        unschedulable condition written just after a binding would overwrite the PodScheduled=True the
        binding set."""
        from kubernetes.client.rest import ApiException

        meta = pod.get("metadata") or {}
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": reason,
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": podgroups.rfc3339(time.time()),
        }
        # Strategic merge: conditions merge by type, so the pod's other conditions are kept.
        body = {"metadata": {"resourceVersion": meta.get("resourceVersion")}, "status": {"conditions": [condition]}}
        try:
            json_or_none(
                lambda: self.core.patch_namespaced_pod_status(
                    meta["name"],
                    meta["namespace"],
                    body,
                    _content_type=STRATEGIC_MERGE_PATCH,
                    _preload_content=False,
                    _request_timeout=self.retry.request_timeout,
                )
            )
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def _event(self, target: dict[str, Any], reason: str, message: str) -> None:
        stamp = podgroups.rfc3339(time.time())
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{target['name']}.{uuid.uuid4().hex[:16]}", "namespace": target["namespace"]},
            "involvedObject": {k: v for k, v in target.items() if v},
            "reason": reason,
            "message": message[:_MAX_EVENT_MESSAGE],
            "type": "Normal" if reason in NORMAL_EVENT_REASONS else "Warning",
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        release(
            self.core.create_namespaced_event(
                target["namespace"],
                body,
                _preload_content=False,
                _request_timeout=self.retry.request_timeout,
            )
        )

    def _event_safe(self, target: dict[str, Any], reason: str, message: str) -> None:
        try:
            self._event(target, reason, message)
        except Exception as exc:  # an Event is worth a log line, never a failed bind
            log.warning("event %s on %s/%s failed: %s", reason, target["namespace"], target["name"], exc)


def _scheduled_condition(pod: dict[str, Any]) -> tuple[str, str, str] | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled":
            return c.get("status", ""), c.get("reason", ""), c.get("message", "")
    return None
