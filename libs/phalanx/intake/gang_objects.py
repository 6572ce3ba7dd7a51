"""PodGroups and gang ConfigMaps: which gang object a Kubernetes object is, and the gang it declares.

The kinds and API groups that declare gangs are phalanx.intake.gang_kinds; each form's fields are read
here (scheduler-plugins, Koordinator and Volcano PodGroups, Kubernetes' Workload API PodGroup, seed 003's
ConfigMap), with Koordinator's PodGroup annotations over them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from phalanx.intake import bounds, fields, names
from phalanx.intake.errors import Subject, quoted
from phalanx.intake.gang_kinds import CONFIGMAP_KIND, PODGROUP_KIND, is_podgroup_api, podgroup_apis
from phalanx.intake.gang_params import PODGROUP_ANNOTATION_KEYS, is_gang_name, koordinator_params, positive_int
from phalanx.intake.gang_shapes import Declared, GangParams, ObjectRef
from phalanx.model import keys, limits


def object_ref(obj: Mapping[str, Any]) -> ObjectRef:
    """Which gang object this is; raises IntakeError for anything that does not declare a gang."""
    kind = fields.get(obj, "kind") if isinstance(obj, Mapping) else None
    kind_name = kind if isinstance(kind, str) and kind else "<no kind>"
    meta, subject = fields.metadata(obj, kind_name, namespaced=True)
    api_version = fields.get(obj, "apiVersion")
    group = api_version.rpartition("/")[0] if isinstance(api_version, str) and "/" in api_version else ""
    if kind == PODGROUP_KIND:
        if not is_podgroup_api(api_version):
            raise subject.error(
                "apiVersion", f"{quoted(api_version)} is not a PodGroup API we read ({podgroup_apis()})"
            )
        return ObjectRef(PODGROUP_KIND, group, subject.namespace, subject.name)
    if kind == CONFIGMAP_KIND and api_version in ("v1", None):
        return ObjectRef(CONFIGMAP_KIND, "", subject.namespace, subject.name)
    raise subject.error(
        "kind", f"{quoted(kind)} ({quoted(api_version)}) does not declare a gang (PodGroup or ConfigMap)"
    )


def is_gang_object(obj: Mapping[str, Any]) -> bool:
    if not isinstance(obj, Mapping):
        return False
    kind, api_version = fields.get(obj, "kind"), fields.get(obj, "apiVersion")
    if kind == PODGROUP_KIND:
        return is_podgroup_api(api_version)
    if kind == CONFIGMAP_KIND:  # only one whose data says so: most ConfigMaps are something else
        data = fields.get(obj, "data")
        return isinstance(data, Mapping) and "minAvailable" in data
    return False


def read_gang_object(obj: Mapping[str, Any], ref: ObjectRef) -> GangParams | None:
    """The gang the object declares; None for one that declares none (a scheduling.k8s.io PodGroup with the
    basic policy, whose pods are scheduled one by one)."""
    subject = Subject(ref.kind, ref.namespace, ref.name)
    if not is_gang_name(ref.name):
        raise subject.error("metadata.name", f"{quoted(ref.name)} is not a valid gang name (RFC 1123 subdomain)")
    if ref.kind != PODGROUP_KIND:
        return _read_configmap(obj, subject)
    return _read_workload_podgroup(obj, subject) if ref.group == keys.GROUP_K8S else _read_podgroup(obj, subject)


_POLICY = "spec.schedulingPolicy"
_MIN_COUNT = f"{_POLICY}.gang.minCount"


def _read_workload_podgroup(obj: Mapping[str, Any], subject: Subject) -> GangParams | None:
    """Kubernetes' Workload API (scheduling.k8s.io/v1alpha2, 1.36): spec.schedulingPolicy is exactly one of
    `basic` (no gang) and `gang` {minCount}, as kube-scheduler's GangScheduling plugin reads it. The form has no
    total or timeout: the total is the minimum, the wait is the scheduler's default (Koordinator's PodGroup
    annotations, and the pods' own, can set them). spec.podGroupTemplateRef (the Workload whose template the
    group was made from) changes nothing: the PodGroup carries its own copy of the policy."""
    spec = fields.mapping(fields.get(obj, "spec"), subject, "spec")
    policy = fields.mapping(fields.get(spec, "schedulingPolicy"), subject, _POLICY)
    raw_gang, raw_basic = fields.get(policy, "gang"), fields.get(policy, "basic")
    if raw_gang is not None and raw_basic is not None:
        raise subject.error(_POLICY, "sets both basic and gang; exactly one is allowed")
    if raw_basic is not None:
        fields.mapping(raw_basic, subject, f"{_POLICY}.basic")
        return None
    if raw_gang is None:
        raise subject.error(_POLICY, "is required: exactly one of basic and gang")
    gang = fields.mapping(raw_gang, subject, f"{_POLICY}.gang")
    raw_min = fields.get(gang, "minCount")
    if raw_min is None:
        raise subject.error(_MIN_COUNT, "is required")
    min_count = _positive_field(raw_min, subject, _MIN_COUNT)
    meta = fields.mapping(fields.get(obj, "metadata"), subject, "metadata")
    annotations = fields.string_map(fields.get(meta, "annotations"), subject, "metadata.annotations")
    params = GangParams(min_available=Declared(min_count, subject, _MIN_COUNT))
    return params.overridden_by(koordinator_params(annotations, subject, PODGROUP_ANNOTATION_KEYS))


def _read_podgroup(obj: Mapping[str, Any], subject: Subject) -> GangParams:
    """scheduler-plugins, Koordinator and Volcano PodGroups share minMember and minResources."""
    spec = fields.mapping(fields.get(obj, "spec"), subject, "spec")
    raw_min = fields.get(spec, "minMember")
    if raw_min is None:
        raise subject.error("spec.minMember", "is required")
    min_member = _positive_field(raw_min, subject, "spec.minMember")
    meta = fields.mapping(fields.get(obj, "metadata"), subject, "metadata")
    annotations = fields.string_map(fields.get(meta, "annotations"), subject, "metadata.annotations")
    params = GangParams(
        min_available=Declared(min_member, subject, "spec.minMember"),
        wait_seconds=_timeout_seconds(
            fields.get(spec, "scheduleTimeoutSeconds"), subject, "spec.scheduleTimeoutSeconds"
        ),
        min_resources=fields.resource_list(fields.get(spec, "minResources"), subject, "spec.minResources"),
        queue=_queue(fields.get(spec, "queue"), subject),
        min_task_member=(
            _min_task_member(fields.get(spec, "minTaskMember"), subject)
            if str(fields.get(obj, "apiVersion")).rpartition("/")[0] == keys.GROUP_VOLCANO
            else None  # only Volcano's PodGroup has the field
        ),
    )
    return params.overridden_by(koordinator_params(annotations, subject, PODGROUP_ANNOTATION_KEYS))


def _min_task_member(raw: Any, subject: Subject) -> dict[str, int] | None:
    """Volcano's spec.minTaskMember: role (the pods' volcano.sh/task-spec) -> the least pods of that role, an
    int32 of at least 0 (0 asks nothing), as its CRD declares it. Minimums that add up to more than minMember
    are accepted, as Volcano accepts them, and ignored as it ignores them (phalanx.gang.roles.role_minimums)."""
    where = "spec.minTaskMember"
    out: dict[str, int] = {}
    roles = fields.mapping(raw, subject, where)
    bounds.count(roles, subject, where)
    for role, count in roles.items():
        if not isinstance(role, str) or not role:
            raise subject.error(where, f"role {quoted(role)} is not a task name (a non-empty string)")
        if len(role) > limits.MAX_KEY:
            raise subject.error(where, f"role {quoted(role)} is too long (at most {limits.MAX_KEY} characters)")
        at = f"{where}[{role}]"
        if not isinstance(count, int) or isinstance(count, bool):
            raise subject.error(at, f"{quoted(count)} is not an integer")
        if count < 0:
            raise subject.error(at, f"{quoted(count)} is negative (at least 0)")
        if count > limits.INT32_MAX:
            raise subject.error(at, f"{quoted(count)} is too large (at most {limits.INT32_MAX})")
        out[role] = count
    return out or None


def _queue(raw: Any, subject: Subject) -> str | None:
    """Volcano's spec.queue: the tenant DRF counts the gang's pods against."""
    queue = fields.text(raw, subject, "spec.queue")
    if queue and not names.is_dns_subdomain(queue):
        raise subject.error("spec.queue", f"{quoted(queue)} is not {names.SUBDOMAIN_RULE}")
    return queue or None


def _read_configmap(obj: Mapping[str, Any], subject: Subject) -> GangParams:
    """Seed 003's form: data minAvailable and scheduleTimeoutSeconds, strings as ConfigMap data is."""
    data = fields.mapping(fields.get(obj, "data"), subject, "data")
    if data.get("minAvailable") in (None, ""):
        raise subject.error("data.minAvailable", "is required")
    min_available = _positive_field(data["minAvailable"], subject, "data.minAvailable")
    return GangParams(
        min_available=Declared(min_available, subject, "data.minAvailable"),
        wait_seconds=_timeout_seconds(data.get("scheduleTimeoutSeconds"), subject, "data.scheduleTimeoutSeconds"),
    )


def _positive_field(raw: Any, subject: Subject, where: str) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool) and raw.bit_length() > 64:  # str() of it may fail
        raise subject.error(where, f"{quoted(raw)} is too large (at most {limits.INT32_MAX})")
    try:
        return positive_int(fields.as_text(raw))
    except ValueError as exc:
        raise subject.error(where, str(exc)) from None


def _timeout_seconds(raw: Any, subject: Subject, where: str) -> Declared[float] | None:
    """A timeout in seconds ("20", 20, or a Go duration); 0 means "use the default", as in coscheduling."""
    if raw is None or raw == "":
        return None
    try:
        if isinstance(raw, bool):
            raise ValueError(f"{raw!r} is not a number of seconds")
        seconds = fields.duration_seconds(raw if isinstance(raw, (int, float)) else fields.as_text(raw))
    except ValueError as exc:
        raise subject.error(where, str(exc)) from None
    bounds.seconds(seconds, subject, where, raw)
    return Declared(seconds, subject, where) if seconds > 0 else None
