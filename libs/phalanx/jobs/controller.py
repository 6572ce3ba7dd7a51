"""The PhalanxJob controller loop: watches jobs and their pods, and reconciles one job at a time from a fresh
read of the API server (`phalanx.jobs.reconcile` decides; this applies).

Machinery: the project's own list-then-watch (phalanx.kube.watch) and the `kubernetes` client, not kopf.
The controller is level-triggered: every reconcile reads the job, its pods, Service and PodGroup afresh and
recomputes the status, so a watch event is only a hint of *which* job to look at. kopf's model is the
opposite (a handler per change, with progress kept in annotations on the object and a finalizer), which
would add its own writes to every job, the RBAC for its peering objects and an asyncio runtime to a
codebase whose other services are threads; what kopf adds over the watch the scheduler already trusts
(410 re-lists, bookmarks, resumption) is nothing this controller uses.

Crash safety (phalanx.jobs.reconcile says what the status keeps): the status is written, with the job's
resourceVersion as a precondition, before any pod is deleted or created; pods are created under fixed names
(a second create is a 409, taken as done) and deleted with the uid seen as a precondition (never a newer pod
of the same name). One reconcile at a time per process; the Deployment runs one replica (Recreate).
Fault points (phalanx.faults): `controller.between_pods`, after each pod the controller creates for a job;
`controller.mid_restart`, after a lost pod's restart is counted in the status and the failed pod deleted,
before its replacement is created.
"""

from __future__ import annotations

import heapq
import json
import logging
import threading
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from phalanx import faults
from phalanx.jobs import api, objects
from phalanx.jobs.reconcile import COND_CREATE_FAILED, Plan, PodView, reconcile, set_condition
from phalanx.kube.watch import Collection, Watcher
from phalanx.metrics import catalog
from phalanx.telemetry.tracing import tracer

if TYPE_CHECKING:
    import kubernetes.client

log = logging.getLogger(__name__)

PODGROUPS = (objects.GROUP_VOLCANO, objects.VOLCANO_VERSION, "podgroups")
BETWEEN_PODS = "controller.between_pods"
MID_RESTART = "controller.mid_restart"


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class _WorkQueue:
    """Job keys to reconcile: each key at most once, soonest first; a key being reconciled that is added
    again is reconciled again after."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    def add(self, key: str, delay: float = 0.0) -> None:
        at = time.monotonic() + delay
        with self._cond:
            if key in self._due and self._due[key] <= at:
                return
            self._due[key] = at
            heapq.heappush(self._heap, (at, key))
            self._cond.notify()

    def get(self, stop: threading.Event, timeout: float = 0.5) -> str | None:
        with self._cond:
            while not stop.is_set():
                while self._heap and self._due.get(self._heap[0][1]) != self._heap[0][0]:
                    heapq.heappop(self._heap)  # superseded by an earlier due time
                if self._heap:
                    at, key = self._heap[0]
                    wait = at - time.monotonic()
                    if wait <= 0:
                        heapq.heappop(self._heap)
                        del self._due[key]
                        return key
                else:
                    wait = timeout
                self._cond.wait(min(wait, timeout))
        return None


class JobController:
    def __init__(
        self,
        api_client: kubernetes.client.ApiClient,
        *,
        scheduler_name: str = "phalanx",
        namespace: str = "",
        priority_class_prefix: str = objects.DEFAULT_PRIORITY_CLASS_PREFIX,
        resync: float = 30.0,
    ) -> None:
        from kubernetes import client

        self.core: Any = client.CoreV1Api(api_client)  # raw dicts in and out (its stubs want models)
        self.custom: Any = client.CustomObjectsApi(api_client)
        self.scheduler_name = scheduler_name
        self.namespace = namespace
        self.priority_class_prefix = priority_class_prefix
        self.resync = resync
        self.queue = _WorkQueue()
        self.stop = threading.Event()
        self._watchers: list[Watcher] = []
        self._known: set[str] = set()
        self._errors: dict[str, str] = {}  # job key -> the API server's final refusal of one of its pods
        self._warnings: dict[str, str] = {}  # job key -> a refusal that may pass (a PriorityClass missing)
        self._stages: dict[str, str] = {}
        self._thread: threading.Thread | None = None

    # -- running ---------------------------------------------------------------------------------------
    def start(self) -> JobController:
        if self.namespace:
            jobs = Collection(
                "phalanxjobs",
                self.custom.list_namespaced_custom_object,
                api.KIND,
                api.API_VERSION,
                args=(api.GROUP, api.VERSION, self.namespace, api.PLURAL),
            )
            pods = Collection(
                "pods",
                self.core.list_namespaced_pod,
                "Pod",
                "v1",
                args=(self.namespace,),
                kwargs={"label_selector": objects.JOB_LABEL},
            )
        else:
            jobs = Collection(
                "phalanxjobs",
                self.custom.list_cluster_custom_object,
                api.KIND,
                api.API_VERSION,
                args=(api.GROUP, api.VERSION, api.PLURAL),
            )
            pods = Collection(
                "pods",
                self.core.list_pod_for_all_namespaces,
                "Pod",
                "v1",
                kwargs={"label_selector": objects.JOB_LABEL},
            )
        self._watchers = [Watcher(c, self._event, self.stop).start() for c in (jobs, pods)]
        self._thread = threading.Thread(target=self.run, name="job-controller", daemon=True)
        self._thread.start()
        return self

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all(w.synced.wait(max(0.0, deadline - time.monotonic())) for w in self._watchers)

    def close(self) -> None:
        self.stop.set()
        for w in self._watchers:
            w.interrupt()
        if self._thread is not None:
            self._thread.join(10)

    def _event(self, collection: str, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        if collection == "phalanxjobs":
            key = f"{namespace}/{meta.get('name')}"
            if kind == "DELETED":
                self._known.discard(key)
                self._stages.pop(key, None)
                return
            self._known.add(key)
        else:
            job = (meta.get("labels") or {}).get(objects.JOB_LABEL)
            if not job:
                return
            key = f"{namespace}/{job}"
        self.queue.add(key)

    def run(self, stop: threading.Event | None = None) -> None:
        stop = stop or self.stop
        next_resync = time.monotonic() + self.resync
        while not stop.is_set():
            if time.monotonic() >= next_resync:
                for known in list(self._known):
                    self.queue.add(known)
                next_resync = time.monotonic() + self.resync
            key = self.queue.get(stop, timeout=min(0.5, self.resync))
            if key is None:
                continue
            try:
                self.reconcile_key(key)
            except Exception as exc:
                from kubernetes.client.rest import ApiException

                result = "conflict" if isinstance(exc, ApiException) and exc.status == 409 else "error"
                catalog.CONTROLLER_RECONCILES.labels(result).inc()
                if result == "conflict":  # the job changed under us: read it again now
                    self.queue.add(key)
                else:
                    log.warning("reconciling %s failed: %s; again in 2s", key, exc, exc_info=True)
                    self.queue.add(key, 2.0)

    # -- one job ---------------------------------------------------------------------------------------
    def reconcile_key(self, key: str) -> Plan | None:
        """Reads job `key` (namespace/name) and its objects, decides, applies; None when the job is gone."""
        from kubernetes.client.rest import ApiException

        namespace, _, name = key.partition("/")
        with tracer().start_as_current_span("controller.reconcile", attributes={"phalanx.job": key}) as span:
            try:
                job = self._json(
                    self.custom.get_namespaced_custom_object(
                        api.GROUP, api.VERSION, namespace, api.PLURAL, name, _preload_content=False
                    )
                )
            except ApiException as exc:
                if exc.status == 404:
                    return None
                raise
            uid = job["metadata"]["uid"]
            listed = self._json(
                self.core.list_namespaced_pod(
                    namespace, label_selector=f"{objects.JOB_LABEL}={name}", _preload_content=False
                )
            )
            pods = {p.name: p for p in (PodView.of(i) for i in listed.get("items") or [] if _owned_by(i, uid))}
            plan = reconcile(
                job,
                pods,
                service=self._exists(
                    lambda: self.core.read_namespaced_service(name, namespace, _preload_content=False)
                ),
                podgroup=self._exists(
                    lambda: self.custom.get_namespaced_custom_object(
                        *PODGROUPS[:2], namespace, PODGROUPS[2], name, _preload_content=False
                    )
                ),
                now=_now(),
                create_error=self._errors.get(key, ""),
            )
            _warn(plan.status, self._warnings.get(key, ""), _now())
            span.set_attribute("phalanx.job.stage", plan.status.get("stage", ""))
            span.set_attribute("phalanx.job.creates", len(plan.create))
            span.set_attribute("phalanx.job.deletes", len(plan.delete))
            self._apply(job, plan, key)
            catalog.CONTROLLER_RECONCILES.labels("ok").inc()
            return plan

    def _apply(self, job: Mapping[str, Any], plan: Plan, key: str) -> None:
        from kubernetes.client.rest import ApiException

        meta = job["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        old = job.get("status") or {}
        if plan.status != old:
            # The commit point: restarts counted here before anything they justify is done.
            self.custom.patch_namespaced_custom_object_status(
                api.GROUP,
                api.VERSION,
                namespace,
                api.PLURAL,
                name,
                {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": plan.status},
                _content_type="application/merge-patch+json",
                _preload_content=False,
            )
        stage = str(plan.status.get("stage") or "")
        if self._stages.get(key) != stage:
            catalog.CONTROLLER_STAGE_TRANSITIONS.labels(stage).inc()
            log.info("job %s: %s (%s)", key, stage, plan.status.get("scheduleState"))
        self._stages[key] = stage
        catalog.CONTROLLER_RESTARTS.inc(len(plan.counted))
        for pod_name, uid in plan.delete:
            try:
                self.core.delete_namespaced_pod(
                    pod_name, namespace, body={"preconditions": {"uid": uid}}, _preload_content=False
                )
                catalog.CONTROLLER_POD_WRITES.labels("delete").inc()
            except ApiException as exc:
                if exc.status not in (404, 409):  # gone already, or a newer pod of that name
                    raise
        if plan.counted:
            faults.reached(MID_RESTART)
        if plan.spec is None or stage in (s.value for s in api.FINISHED):
            return
        spec = plan.spec
        if plan.create_podgroup:
            self._create(lambda: self.custom.create_namespaced_custom_object(
                *PODGROUPS[:2], namespace, PODGROUPS[2], objects.podgroup(job, spec), _preload_content=False
            ))  # fmt: skip
        if plan.create_service:
            self._create(
                lambda: self.core.create_namespaced_service(namespace, objects.service(job), _preload_content=False)
            )
        # A failed pod deleted just now (terminal pods go at once) is recreated in the same pass.
        deleted = {n for n, _ in plan.delete}
        restarts = dict(plan.create) | {
            e["name"]: int(e.get("restarts") or 0)
            for e in [plan.status["leader"], *plan.status["workers"]]
            if e["name"] in deleted
        }
        roles = {n: (role, i) for n, role, i in objects.desired_pods(name, spec)}
        for pod_name in [n for n in roles if n in restarts]:  # the leader first
            role, index = roles[pod_name]
            body = objects.pod(
                job,
                spec,
                role,
                index,
                restarts=restarts[pod_name],
                scheduler_name=self.scheduler_name,
                priority_class_prefix=self.priority_class_prefix,
            )
            try:
                self.core.create_namespaced_pod(namespace, body, _preload_content=False)
            except ApiException as exc:
                if exc.status == 409:  # created before (or not yet gone): the next event tells
                    continue
                message = f"creating pod {pod_name}: {exc.status} {_reason(exc)}"
                if exc.status == 403 and "PriorityClass" in str(exc.body):
                    self._warnings[key] = f"{message} (is PriorityClass {body['spec']['priorityClassName']} installed?)"
                    log.warning("job %s: %s", key, self._warnings[key])
                    self.queue.add(key, 5.0)
                    return
                if exc.status in (400, 422):  # the template itself is refused: it never will be accepted
                    self._errors[key] = message
                    log.warning("job %s: %s", key, message)
                    self.queue.add(key)
                    return
                raise
            self._warnings.pop(key, None)
            catalog.CONTROLLER_POD_WRITES.labels("create").inc()
            faults.reached(BETWEEN_PODS)

    def _create(self, call: Any) -> None:
        from kubernetes.client.rest import ApiException

        try:
            call()
        except ApiException as exc:
            if exc.status != 409:
                raise

    def _exists(self, call: Any) -> bool:
        from kubernetes.client.rest import ApiException

        try:
            call()
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise

    @staticmethod
    def _json(resp: Any) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(resp.data)
        return out


def _owned_by(pod: Mapping[str, Any], uid: str) -> bool:
    """Pods of an earlier job of the same name (still being collected) are not this job's."""
    return any(r.get("uid") == uid for r in (pod.get("metadata") or {}).get("ownerReferences") or [])


def _reason(exc: Any) -> str:
    try:
        return str(json.loads(exc.body).get("message") or exc.reason)
    except (TypeError, ValueError):
        return str(exc.reason)


def _warn(status: dict[str, Any], warning: str, now: str) -> None:
    """A refusal that may pass (a PriorityClass not installed yet) shown on the job until a create succeeds."""
    if warning:
        set_condition(status, COND_CREATE_FAILED, True, "Refused", warning, now)
    elif any(c.get("type") == COND_CREATE_FAILED and c.get("status") == "True" for c in status.get("conditions") or []):
        set_condition(status, COND_CREATE_FAILED, False, "Created", "", now)
