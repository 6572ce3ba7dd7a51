"""A live cluster as a ClusterState: one read of Nodes, Pods, PodGroups and the gang ConfigMaps pods name.

Only get and list calls: explain never writes. Objects are read as the API server's JSON and go through
the scheduler's own intake (parse_node, parse_pod) and GangResolver, so every declaration form the
scheduler understands is understood here, and a refused one is reported with the text the scheduler
would write (the object and the field named). Pods are read in every namespace even with -n: pods of
other namespaces hold node capacity too.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from phalanx.explain.view import ClusterState, Condition, Holder, JobStatus, PodGroupStatus, PodState, SourceError
from phalanx.intake.errors import IntakeError, Subject
from phalanx.intake.fields import timestamp
from phalanx.intake.gang_kinds import CONFIGMAP_KIND, PODGROUP_KIND, PODGROUP_KINDS
from phalanx.intake.gangs import find_link
from phalanx.intake.nodes import parse_node
from phalanx.intake.pods import parse_pod, scheduler_name
from phalanx.intake.resolver import GangResolver
from phalanx.kube import podgroups
from phalanx.model.keys import CONFIGMAP_LABEL, KOORD_TIMEOUT, SIM_DURATION
from phalanx.model.objects import PodInfo

REQUEST_TIMEOUT = 30.0
ACTIVE_DEADLINE = "activeDeadlineSeconds"
# Raw JSON, as the scheduler's watch reads it: the intake reads camelCase, and the client's models mis-read some.
_RAW: dict[str, Any] = {"_preload_content": False, "_request_timeout": REQUEST_TIMEOUT}


def api_client(kubeconfig: str | None, context: str | None) -> tuple[Any, str]:
    """A client for the kubeconfig (default: $KUBECONFIG or ~/.kube/config; else the pod's service
    account), and the name of the context used."""
    import kubernetes.client
    import kubernetes.config
    from kubernetes.config.config_exception import ConfigException

    if kubeconfig and not os.path.isfile(kubeconfig):
        raise SourceError(f"kubeconfig {kubeconfig}: no such file")
    try:
        contexts, active = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig)
        name = context or (active or {}).get("name", "")
        if context and context not in [c.get("name") for c in contexts or []]:
            raise SourceError(
                f"kubeconfig: no context {context!r} (there are: "
                f"{', '.join(str(c.get('name')) for c in contexts or [])})"
            )
        return kubernetes.config.new_client_from_config(config_file=kubeconfig, context=context), name
    except ConfigException as exc:
        if kubeconfig or context:
            raise SourceError(f"kubeconfig {kubeconfig or '(default)'}: {exc}") from None
    configuration = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_incluster_config(client_configuration=configuration)
    except ConfigException as exc:
        raise SourceError(f"no kubeconfig found and not running in a cluster ({exc}); pass --kubeconfig") from None
    return kubernetes.client.ApiClient(configuration), "in-cluster"


def read_cluster(
    api: Any,
    context: str,
    namespace: str | None,
    scheduler: str,
    default_wait: float,
    now: Callable[[], float] = time.time,
) -> ClusterState:
    from kubernetes import client

    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    state = ClusterState(
        clock="wall",
        now=now(),
        source={"kind": "cluster", "server": api.configuration.host, "context": context, "namespace": namespace},
        scheduler_name=scheduler,
        default_wait=default_wait,
        nodes=None,
    )
    reader = _Reader(state)
    node_objects = reader.items("nodes", lambda: core.list_node(**_RAW))
    if node_objects is not None:
        state.nodes = []
        for obj in node_objects:
            try:
                state.nodes.append(parse_node(obj))
            except IntakeError as exc:
                state.errors.append(f"{exc} (the node is left out)")
    else:
        state.source["capacityNote"] = "nodes could not be listed"
    pods = reader.items("pods", lambda: core.list_pod_for_all_namespaces(**_RAW), quiet_forbidden=bool(namespace))
    if pods is None and namespace:
        pods = reader.items(f"pods in {namespace}", lambda: core.list_namespaced_pod(namespace, **_RAW))
        if pods is not None:
            state.notes.append(
                f"pods could not be listed in every namespace: free capacity counts only the "
                f"pods of namespace {namespace}"
            )
    if pods is None:
        raise SourceError(f"{state.source['server']}: pods could not be listed ({'; '.join(state.errors)})")
    resolver = GangResolver(default_wait_seconds=None)
    groups = _read_podgroups(reader, custom, namespace, resolver, state)
    _read_configmaps(reader, core, pods, resolver, state)
    pods.sort(
        key=lambda o: (
            _meta(o).get("creationTimestamp") or "",
            _meta(o).get("namespace") or "",
            _meta(o).get("name") or "",
        )
    )
    for obj in pods:
        pod = _pod(obj, scheduler)
        state.pods.append(pod)
        if pod.ours:
            _join_gang(state, resolver, pod, obj)
    for gang in state.gangs.values():
        group = podgroups.group_of(gang.spec.source) if gang.spec is not None else None
        raw = groups.get((group, gang.namespace, gang.name)) if group else None
        if raw is not None:
            gang.podgroup = _podgroup_status(group or "", raw)
    _read_jobs(reader, custom, namespace, state)
    return state


def _read_jobs(reader: _Reader, custom: Any, namespace: str | None, state: ClusterState) -> None:
    """PhalanxJobs (phalanx-controller's): each one's stage goes with its gang, the Volcano PodGroup of its
    name; a job the controller refused (no pods, so no gang) is said in the notes."""
    from phalanx.jobs import api as jobs

    def call() -> Any:
        if namespace:
            return custom.list_namespaced_custom_object(jobs.GROUP, jobs.VERSION, namespace, jobs.PLURAL, **_RAW)
        return custom.list_cluster_custom_object(jobs.GROUP, jobs.VERSION, jobs.PLURAL, **_RAW)

    items = reader.items(jobs.PLURAL, call, kind=jobs.KIND, api_version=jobs.API_VERSION, missing_ok=True)
    for obj in items or []:
        meta, status = _meta(obj), obj.get("status") or {}
        key = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
        conditions = {c.get("type"): c for c in status.get("conditions") or []}
        stage = str(status.get("stage") or jobs.Stage.PENDING.value)
        valid = conditions.get("Valid") or {}
        if valid.get("status") == "False":
            state.notes.append(f"PhalanxJob {key} is not run: {valid.get('message')}")
            continue
        gang = state.gangs.get(key)
        if gang is None:
            continue
        current = conditions.get(stage) or {}
        gang.job = JobStatus(
            stage=stage,
            schedule_state=str(status.get("scheduleState") or ""),
            restarts=int(status.get("restarts") or 0),
            message=str(current.get("message") or "") if current.get("status") == "True" else "",
        )


class _Reader:
    """List calls whose failures become errors naming what could not be read, rather than exceptions."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state

    def items(
        self,
        what: str,
        call: Callable[[], Any],
        *,
        kind: str = "",
        api_version: str = "",
        missing_ok: bool = False,
        quiet_forbidden: bool = False,
    ) -> list[dict[str, Any]] | None:
        from kubernetes.client.rest import ApiException

        try:
            resp = call()
            body = json.loads(resp.data)
        except ApiException as exc:
            if exc.status == 404 and missing_ok:
                return None
            if exc.status == 403 and quiet_forbidden:
                return None
            self.state.errors.append(f"cannot list {what}: {exc.status} {exc.reason}")
            return None
        except Exception as exc:  # connection refused, TLS, timeouts: the cluster cannot be read at all
            raise SourceError(f"{self.state.source['server']}: cannot list {what}: {exc}") from None
        items = body.get("items") or []
        for item in items:  # list items come without their kind
            item.setdefault("kind", kind)
            item.setdefault("apiVersion", api_version)
        return items


def _read_podgroups(
    reader: _Reader, custom: Any, namespace: str | None, resolver: GangResolver, state: ClusterState
) -> dict[tuple[str, str, str], dict[str, Any]]:
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for gang_kind in PODGROUP_KINDS:

        def call(group: str = gang_kind.group, version: str = gang_kind.version) -> Any:
            if namespace:
                return custom.list_namespaced_custom_object(group, version, namespace, podgroups.PLURAL, **_RAW)
            return custom.list_cluster_custom_object(group, version, podgroups.PLURAL, **_RAW)

        group = gang_kind.group
        items = reader.items(
            f"{podgroups.PLURAL}.{group}", call, kind=PODGROUP_KIND, api_version=gang_kind.api_version, missing_ok=True
        )  # 404: that CRD is not installed
        for obj in items or []:
            meta = _meta(obj)
            out[(group, str(meta.get("namespace") or ""), str(meta.get("name") or ""))] = obj
            try:
                resolver.add_object(obj, created_at=_time(meta.get("creationTimestamp")) or 0.0)
            except IntakeError:
                pass  # recorded as invalid: the pods naming it are refused with this text (below)
    return out


def _read_configmaps(
    reader: _Reader, core: Any, pods: list[dict[str, Any]], resolver: GangResolver, state: ClusterState
) -> None:
    """Only the ConfigMaps pods name as their gang: listing every ConfigMap would read far more."""
    from kubernetes.client.rest import ApiException

    named = sorted(
        {
            (str(_meta(p).get("namespace") or ""), str((_meta(p).get("labels") or {}).get(CONFIGMAP_LABEL)))
            for p in pods
            if isinstance(_meta(p).get("labels"), dict) and (_meta(p).get("labels") or {}).get(CONFIGMAP_LABEL)
        }
    )
    for namespace, name in named:
        try:
            obj = json.loads(core.read_namespaced_config_map(name, namespace, **_RAW).data)
        except ApiException as exc:
            if exc.status != 404:  # 404: it does not exist (yet); the resolver says so for its pods
                state.errors.append(f"cannot read ConfigMap {namespace}/{name}: {exc.status} {exc.reason}")
            continue
        obj.setdefault("kind", CONFIGMAP_KIND)
        obj.setdefault("apiVersion", "v1")
        if GangResolver.is_gang_object(obj):
            try:
                resolver.add_object(obj, created_at=_time(_meta(obj).get("creationTimestamp")) or 0.0)
            except IntakeError:
                pass  # recorded as invalid, as above


def _pod(obj: dict[str, Any], scheduler: str) -> PodState:
    meta, spec, status = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
    raw_annotations = meta.get("annotations")
    annotations: Mapping[str, Any] = raw_annotations if isinstance(raw_annotations, dict) else {}
    pod = PodState(
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
        None,
        ours=scheduler_name(obj) == scheduler,
        node=str(spec.get("nodeName") or ""),
        phase=str(status.get("phase") or ""),
        created_at=_time(meta.get("creationTimestamp")),
        deleting=bool(meta.get("deletionTimestamp")),
        timed_out=annotations.get(KOORD_TIMEOUT) == "true",
    )
    try:
        pod.info = parse_pod(obj)
    except IntakeError as exc:
        pod.error = str(exc)
    scheduled = _scheduled_condition(status)
    if scheduled is not None and scheduled.get("status") == "False":
        pod.condition = Condition(
            str(scheduled.get("message") or ""),
            str(scheduled.get("reason") or ""),
            _time(scheduled.get("lastTransitionTime")),
        )
    if pod.node:
        # The kubelet's startTime; without one (no kubelet yet), when the pod was bound.
        pod.started_at = _time(status.get("startTime")) or (
            _time(scheduled.get("lastTransitionTime"))
            if scheduled is not None and scheduled.get("status") == "True"
            else None
        )
    _expected_end(pod, spec)
    pod.holder = _holder(pod, meta)
    return pod


def _expected_end(pod: PodState, spec: Mapping[str, Any]) -> None:
    """When a running pod will be gone: its duration annotation (expected), or its activeDeadlineSeconds
    (at the latest), whichever comes first."""
    if pod.started_at is None:
        return
    ends: list[tuple[float, str]] = []
    if pod.info is not None and pod.info.duration is not None:
        ends.append((pod.started_at + pod.info.duration, SIM_DURATION))
    deadline = spec.get(ACTIVE_DEADLINE)
    if isinstance(deadline, int) and not isinstance(deadline, bool) and deadline > 0:
        ends.append((pod.started_at + deadline, ACTIVE_DEADLINE))
    if ends:
        pod.ends_at, pod.end_basis = min(ends)


def _holder(pod: PodState, meta: Mapping[str, Any]) -> Holder:
    """Its gang if it declares one, else its controller (a Job, a ReplicaSet...), else the pod itself."""
    link = find_link(pod.info) if pod.info is not None else None
    if link is not None:
        return Holder("gang", f"{pod.namespace}/{link.name}")
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") and ref.get("kind") and ref.get("name"):
            return Holder(str(ref["kind"]), f"{pod.namespace}/{ref['name']}")
    return Holder("pod", pod.key)


def _join_gang(state: ClusterState, resolver: GangResolver, pod: PodState, obj: Mapping[str, Any]) -> None:
    info = pod.info if pod.info is not None else _links_only(pod, obj)
    if info is None:
        return
    if pod.info is None:  # unreadable pod: it still belongs to the gang it names, which waits for it
        link = find_link(info)
        if link is None:
            if pod.pending:
                state.errors.append(pod.error)
            return
        gang_key, error, waiting_for, spec = f"{pod.namespace}/{link.name}", pod.error, "", None
    else:
        res = resolver.resolve(info)
        if not res.gang_key:
            return
        gang_key, error, waiting_for, spec = res.gang_key, res.error, res.waiting_for, res.spec
    pod.gang = gang_key
    gang = state.gang(gang_key)
    gang.pods.append(pod)
    if error and not gang.error:
        gang.error = error
    if spec is not None:
        gang.spec = spec
        gang.waiting_for = ""
    elif waiting_for:
        gang.waiting_for = waiting_for


def _links_only(pod: PodState, obj: Mapping[str, Any]) -> PodInfo | None:
    """The labels and annotations of a pod the intake refused, enough to find the gang it names."""
    meta = _meta(obj)
    labels, annotations = meta.get("labels"), meta.get("annotations")
    if not isinstance(labels, dict) or not isinstance(annotations, dict):
        return None
    return PodInfo(
        pod.namespace,
        pod.name,
        labels={str(k): str(v) for k, v in labels.items()},
        annotations={str(k): str(v) for k, v in annotations.items()},
    )


def _podgroup_status(group: str, obj: Mapping[str, Any]) -> PodGroupStatus:
    status = obj.get("status") or {}
    conditions = [
        {k: c.get(k) for k in ("type", "status", "reason", "message")}
        for c in status.get("conditions") or []
        if isinstance(c, dict)
    ]
    scheduled, running = status.get("scheduled"), status.get("running")
    return PodGroupStatus(
        group,
        str(status.get("phase") or ""),
        conditions,
        _time(status.get("scheduleStartTime")),
        scheduled if isinstance(scheduled, int) else None,
        running if isinstance(running, int) else None,
    )


def _scheduled_condition(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for c in status.get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "PodScheduled":
            return c
    return None


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _time(raw: Any) -> float | None:
    try:
        return timestamp(raw, Subject("", "", ""), "")
    except IntakeError:
        return None
