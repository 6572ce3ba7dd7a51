"""The gang declaration forms of docs compatibility.md, each read by one small function.

A pod names its gang in one of these ways; when it carries several, the first in this order wins:

  1. annotation gang.scheduling.koordinator.sh/name            self-contained  koordinator-annotations
  2. label pod-group.scheduling.sigs.k8s.io                    PodGroup        podgroup/scheduling.sigs.k8s.io
  3. label scheduling.x-k8s.io/pod-group                       PodGroup        podgroup/scheduling.x-k8s.io
  4. annotation, else label, pod-group.scheduling.sigs.k8s.io/name
                                                               self-contained  lightweight-coscheduling
  5. annotation scheduling.k8s.io/group-name, with group-min-member or group-pod-num
                                                               self-contained  kube-batch-annotations /
                                                                               delayed-binding-annotations
     without them                                              PodGroup        podgroup/scheduling.volcano.sh
  6. label pod-group.scheduling.bdap.com/podgroup-configmap    ConfigMap       configmap
  7. field spec.schedulingGroup.podGroupName                   PodGroup        podgroup/scheduling.k8s.io
     (Kubernetes' Workload API, KEP-4671, alpha in 1.36: the PodGroup's spec.schedulingPolicy.gang.minCount
     is the minimum; a PodGroup with the basic policy declares no gang, and its pods are scheduled one by one)

Koordinator's name annotation comes first because Koordinator is the richest form (modes, groups, waiting
time) and a pod carrying it was written for it; the two object links that follow are the CRD ways that
Koordinator and coscheduling read themselves; the remaining forms are older or local conventions. Kubernetes'
own field comes last: it is the newest form, so a pod that also carries an older link keeps the gang it
always had.

Whatever the form, the Koordinator parameter annotations on the pod (min-available, total-number, mode,
waiting-time, groups, match-policy) override the form's own values, as Koordinator lets a pod's
annotations override its PodGroup.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from dataclasses import fields as dataclass_fields
from typing import Any, Generic, TypeVar

from phalanx.intake import bounds, fields, names
from phalanx.intake.errors import IntakeError, Subject, quoted
from phalanx.model import keys, limits
from phalanx.model.objects import GangMode, GangSpec, PodInfo, Resources

KOORDINATOR_ANNOTATIONS = "koordinator-annotations"
LIGHTWEIGHT = "lightweight-coscheduling"
KUBE_BATCH = "kube-batch-annotations"
DELAYED_BINDING = "delayed-binding-annotations"
CONFIGMAP = "configmap"
PODGROUP_GROUPS = (keys.GROUP_SIGS, keys.GROUP_X_K8S, keys.GROUP_VOLCANO, keys.GROUP_K8S)
SCHEDULING_GROUP_FIELD = "spec.schedulingGroup.podGroupName"
MATCH_POLICIES = ("once-satisfied", "only-waiting", "waiting-and-running")

# What a timeout does follows the form that declared the gang. Koordinator (its annotations, and its PodGroup
# CRD, scheduling.sigs.k8s.io) makes it final: "won't schedule these pods anymore", and the pods are marked
# gang.scheduling.koordinator.sh/timeout. The others come from schedulers that retry a group whose wait ran
# out (Coscheduling rejects the waiting pods back to the queue, after podGroupBackoffSeconds; Volcano keeps
# the PodGroup Pending): their gangs release, back off, and are tried again with a fresh wait.
RETRYING_FORMS = frozenset(
    {
        f"podgroup/{keys.GROUP_X_K8S}",
        f"podgroup/{keys.GROUP_VOLCANO}",
        f"podgroup/{keys.GROUP_K8S}",
        LIGHTWEIGHT,
        KUBE_BATCH,
        DELAYED_BINDING,
        CONFIGMAP,
    }
)


def timeout_is_final(source: str) -> bool:
    """Whether a gang declared in form `source` (GangSpec.source) is given up for good when its wait runs
    out. A form not listed (Koordinator's, or none known) keeps the final rule."""
    return source not in RETRYING_FORMS


def timeout_mark_holds(pod: PodInfo) -> bool:
    """Whether a pod marked gang.scheduling.koordinator.sh/timeout stays unscheduled: it declares its gang in
    one of Koordinator's forms (or in none). Only those pods are marked now; a pod of a retrying form marked
    by an earlier version, which gave up on every gang, is scheduled again."""
    site = find_link(pod)
    return site is None or site.form in (KOORDINATOR_ANNOTATIONS, keys.GROUP_SIGS)


_POSITIVE_INT = re.compile(r"\+?[0-9]{1,20}")

T = TypeVar("T")


# --- the shapes a declaration is read into -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Declared(Generic[T]):
    """A gang parameter and where it was written, so a later conflict can name the right field."""

    value: T
    subject: Subject
    field: str

    def error(self, message: str) -> IntakeError:
        return self.subject.error(self.field, message)


@dataclass(frozen=True, slots=True)
class GangParams:
    """The parameters one declaration gives; None means "not said here", so layers can be overlaid."""

    min_available: Declared[int] | None = None
    total_number: Declared[int] | None = None
    mode: Declared[GangMode] | None = None
    wait_seconds: Declared[float] | None = None
    groups: Declared[tuple[str, ...]] | None = None
    match_policy: Declared[str] | None = None
    min_resources: Resources | None = None
    queue: str | None = None
    min_task_member: dict[str, int] | None = None  # Volcano PodGroups only

    def overridden_by(self, other: GangParams) -> GangParams:
        said = {f.name: getattr(other, f.name) for f in dataclass_fields(other)}
        return replace(self, **{name: value for name, value in said.items() if value is not None})


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """A PodGroup or ConfigMap that declares a gang; the gang key is its namespace/name."""

    kind: str  # "PodGroup" | "ConfigMap"
    group: str  # API group; "" for the core ConfigMap
    namespace: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def source(self) -> str:
        return f"podgroup/{self.group}" if self.kind == "PodGroup" else CONFIGMAP

    def describe(self) -> str:
        suffix = f" ({self.group})" if self.group else ""
        return f"{self.kind} {self.namespace}/{self.name}{suffix}"


@dataclass(frozen=True, slots=True)
class LinkSite:
    """Where a pod names its gang, before anything is validated."""

    form: str
    name: str
    field: str  # e.g. metadata.labels[scheduling.x-k8s.io/pod-group]


@dataclass(frozen=True, slots=True)
class GangLink:
    """A pod's validated gang declaration."""

    name: str
    source: str
    params: GangParams  # self-contained: the whole declaration; object link: the pod's overrides
    ref: ObjectRef | None = None  # None when the pod declares the gang by itself
    min_field: Declared[None] | None = None  # where min-available belongs, for "is required"


# --- finding the link on a pod ------------------------------------------------------------------------


def _annotation(pod: PodInfo, key: str, form: str) -> LinkSite | None:
    value = pod.annotations.get(key, "")
    return LinkSite(form, value, f"metadata.annotations[{key}]") if value else None


def _label(pod: PodInfo, key: str, form: str) -> LinkSite | None:
    value = pod.labels.get(key, "")
    return LinkSite(form, value, f"metadata.labels[{key}]") if value else None


def _koordinator_name(pod: PodInfo) -> LinkSite | None:
    return _annotation(pod, keys.KOORD_NAME, KOORDINATOR_ANNOTATIONS)


def _sigs_podgroup_label(pod: PodInfo) -> LinkSite | None:
    return _label(pod, keys.LABEL_SIGS_PODGROUP, keys.GROUP_SIGS)


def _x_k8s_podgroup_label(pod: PodInfo) -> LinkSite | None:
    return _label(pod, keys.LABEL_X_K8S_PODGROUP, keys.GROUP_X_K8S)


def _lightweight_name(pod: PodInfo) -> LinkSite | None:
    return _annotation(pod, keys.LIGHT_NAME, LIGHTWEIGHT) or _label(pod, keys.LIGHT_NAME, LIGHTWEIGHT)


def _group_name_annotation(pod: PodInfo) -> LinkSite | None:
    return _annotation(pod, keys.VOLCANO_GROUP_NAME, keys.GROUP_VOLCANO)


def _configmap_label(pod: PodInfo) -> LinkSite | None:
    return _label(pod, keys.CONFIGMAP_LABEL, CONFIGMAP)


def _scheduling_group(pod: PodInfo) -> LinkSite | None:
    name = pod.scheduling_group
    return LinkSite(keys.GROUP_K8S, name, SCHEDULING_GROUP_FIELD) if name else None


_LINK_ORDER: tuple[Callable[[PodInfo], LinkSite | None], ...] = (
    _koordinator_name,
    _sigs_podgroup_label,
    _x_k8s_podgroup_label,
    _lightweight_name,
    _group_name_annotation,
    _configmap_label,
    _scheduling_group,
)


def find_link(pod: PodInfo) -> LinkSite | None:
    """The pod's gang link by the precedence above; None for an ordinary pod."""
    for find in _LINK_ORDER:
        site = find(pod)
        if site is not None:
            return site
    return None


# --- reading what the pod declares --------------------------------------------------------------------


def read_link(pod: PodInfo, site: LinkSite) -> GangLink:
    """Validate the pod's own declaration; raises IntakeError naming the pod and the field."""
    subject = Subject("Pod", pod.namespace, pod.name)
    if not is_gang_name(site.name):
        raise subject.error(site.field, f"{quoted(site.name)} is not a valid gang name (RFC 1123 subdomain)")
    link = _FORM_READERS[site.form](pod, subject, site)
    overrides = koordinator_params(pod.annotations, subject, _POD_OVERRIDE_KEYS)
    return replace(link, params=link.params.overridden_by(overrides))


def _read_koordinator(pod: PodInfo, subject: Subject, site: LinkSite) -> GangLink:
    required_at = Declared(None, subject, f"metadata.annotations[{keys.KOORD_MIN_AVAILABLE}]")
    return GangLink(site.name, KOORDINATOR_ANNOTATIONS, GangParams(), min_field=required_at)


def _read_podgroup_link(pod: PodInfo, subject: Subject, site: LinkSite) -> GangLink:
    ref = ObjectRef("PodGroup", site.form, pod.namespace, site.name)
    return GangLink(site.name, ref.source, GangParams(), ref=ref)


def _read_configmap_link(pod: PodInfo, subject: Subject, site: LinkSite) -> GangLink:
    ref = ObjectRef("ConfigMap", "", pod.namespace, site.name)
    return GangLink(site.name, ref.source, GangParams(), ref=ref)


def _read_lightweight(pod: PodInfo, subject: Subject, site: LinkSite) -> GangLink:
    # Community tooling writes these as labels or annotations; the annotation wins, like the name.
    key = keys.LIGHT_MIN_AVAILABLE
    where, raw = (
        (f"metadata.annotations[{key}]", pod.annotations[key])
        if key in pod.annotations
        else (f"metadata.labels[{key}]", pod.labels.get(key))
    )
    params = GangParams(min_available=_declared(raw, subject, where, positive_int)) if raw is not None else GangParams()
    required_at = Declared(None, subject, f"metadata.annotations[{key}]")
    return GangLink(site.name, LIGHTWEIGHT, params, min_field=required_at)


def _read_group_name(pod: PodInfo, subject: Subject, site: LinkSite) -> GangLink:
    min_member = _annotation_param(pod.annotations, keys.KUBE_BATCH_MIN_MEMBER, subject, positive_int)
    pod_num = _annotation_param(pod.annotations, keys.DELAYED_BIND_POD_NUM, subject, positive_int)
    if min_member is None and pod_num is None:
        return _read_podgroup_link(pod, subject, site)
    if min_member is not None:
        # kube-batch: min-member is the quorum; a pod-num beside it is the task's size.
        return GangLink(site.name, KUBE_BATCH, GangParams(min_available=min_member, total_number=pod_num))
    # Delayed binding (seed 004) binds only once every pod of the task is assumed.
    return GangLink(site.name, DELAYED_BINDING, GangParams(min_available=pod_num))


_FORM_READERS: dict[str, Callable[[PodInfo, Subject, LinkSite], GangLink]] = {
    KOORDINATOR_ANNOTATIONS: _read_koordinator,
    keys.GROUP_SIGS: _read_podgroup_link,
    keys.GROUP_X_K8S: _read_podgroup_link,
    LIGHTWEIGHT: _read_lightweight,
    keys.GROUP_VOLCANO: _read_group_name,
    CONFIGMAP: _read_configmap_link,
    keys.GROUP_K8S: _read_podgroup_link,
}


# --- Koordinator parameter annotations (pods and PodGroups) -------------------------------------------


def positive_int(text: str) -> int:
    """A gang size: it travels as a protobuf int32, so 2^31 and above is refused rather than overflowed."""
    stripped = text.strip()
    if not _POSITIVE_INT.fullmatch(stripped) or int(stripped) <= 0:
        raise ValueError(f"{quoted(text)} is not a positive integer")
    if int(stripped) > limits.INT32_MAX:
        raise ValueError(f"{quoted(text)} is too large (at most {limits.INT32_MAX})")
    return int(stripped)


def gang_mode(text: str) -> GangMode:
    for mode in GangMode:
        if text == mode.value:
            return mode
    raise ValueError(f"{quoted(text)} is not a gang mode (Strict or NonStrict)")


def positive_duration(text: str) -> float:
    seconds = fields.duration_seconds(text)
    if seconds <= 0:
        raise ValueError(f"{quoted(text)} is not a positive duration")
    if seconds > limits.MAX_TIME:
        raise ValueError(f"{quoted(text)} is above the maximum {int(limits.MAX_TIME)} seconds")
    return seconds


def match_policy(text: str) -> str:
    if text not in MATCH_POLICIES:
        raise ValueError(f"{quoted(text)} is not a match policy ({', '.join(MATCH_POLICIES)})")
    return text


def gang_groups(text: str) -> tuple[str, ...]:
    """A GangGroup: a JSON list of "namespace/name"; "" means the gang stands alone.

    The unquoted form `[nsA/gang-a, nsB/gang-b]` is accepted too: it is how the Koordinator documentation
    writes it, and YAML users copy that.
    """
    stripped = text.strip()
    if not stripped:
        return ()
    try:
        value: Any = json.loads(stripped)
    except json.JSONDecodeError:
        value = _unquoted_list(stripped)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f'{quoted(text)} is not a list of "namespace/name" (e.g. ["ns-a/gang-a","ns-b/gang-b"])')
    if len(value) > limits.MAX_ENTRIES:
        raise ValueError(f"{len(value)} members is above the maximum {limits.MAX_ENTRIES}")
    members: list[str] = []
    for item in (entry.strip() for entry in value):
        namespace, _, name = item.partition("/")
        if not names.is_dns_label(namespace) or not is_gang_name(name):
            raise ValueError(f'{quoted(text)}: {quoted(item)} is not "namespace/name" with RFC 1123 parts')
        if item not in members:
            members.append(item)
    return tuple(members)


def _unquoted_list(text: str) -> list[str] | None:
    if not (text.startswith("[") and text.endswith("]")):
        return None
    inner = text[1:-1].strip()
    return [part.strip().strip("'\"") for part in inner.split(",")] if inner else []


def is_gang_name(name: str) -> bool:
    return names.is_dns_subdomain(name)


_PARAM_PARSERS: dict[str, tuple[str, Callable[[str], Any]]] = {
    keys.KOORD_MIN_AVAILABLE: ("min_available", positive_int),
    keys.KOORD_TOTAL_NUMBER: ("total_number", positive_int),
    keys.KOORD_MODE: ("mode", gang_mode),
    keys.KOORD_WAITING_TIME: ("wait_seconds", positive_duration),
    keys.KOORD_GROUPS: ("groups", gang_groups),
    keys.KOORD_MATCH_POLICY: ("match_policy", match_policy),
}
_POD_OVERRIDE_KEYS = tuple(_PARAM_PARSERS)
# Koordinator documents only these on a PodGroup: its spec already has the minimum and the timeout.
_PODGROUP_ANNOTATION_KEYS = (keys.KOORD_TOTAL_NUMBER, keys.KOORD_MODE, keys.KOORD_GROUPS, keys.KOORD_MATCH_POLICY)


def koordinator_params(annotations: Mapping[str, str], subject: Subject, names: tuple[str, ...]) -> GangParams:
    values: dict[str, Any] = {}
    for key in names:
        attribute, parse = _PARAM_PARSERS[key]
        declared = _annotation_param(annotations, key, subject, parse)
        if declared is not None:
            values[attribute] = declared
    return GangParams(**values)


def _annotation_param(
    annotations: Mapping[str, str], key: str, subject: Subject, parse: Callable[[str], T]
) -> Declared[T] | None:
    if key not in annotations:
        return None
    return _declared(annotations[key], subject, f"metadata.annotations[{key}]", parse)


def _declared(raw: str, subject: Subject, where: str, parse: Callable[[str], T]) -> Declared[T]:
    try:
        return Declared(parse(raw), subject, where)
    except ValueError as exc:
        raise subject.error(where, str(exc)) from None


# --- PodGroups and ConfigMaps -------------------------------------------------------------------------


def object_ref(obj: Mapping[str, Any]) -> ObjectRef:
    """Which gang object this is; raises IntakeError for anything that does not declare a gang."""
    kind = fields.get(obj, "kind") if isinstance(obj, Mapping) else None
    kind_name = kind if isinstance(kind, str) and kind else "<no kind>"
    meta, subject = fields.metadata(obj, kind_name, namespaced=True)
    api_version = fields.get(obj, "apiVersion")
    group = api_version.rpartition("/")[0] if isinstance(api_version, str) and "/" in api_version else ""
    if kind == "PodGroup":
        if not _is_podgroup_api(api_version):
            known = ", ".join(g if g != keys.GROUP_K8S else f"{g}/{keys.GROUP_K8S_VERSION}" for g in PODGROUP_GROUPS)
            raise subject.error("apiVersion", f"{quoted(api_version)} is not a PodGroup API we read ({known})")
        return ObjectRef("PodGroup", group, subject.namespace, subject.name)
    if kind == "ConfigMap" and api_version in ("v1", None):
        return ObjectRef("ConfigMap", "", subject.namespace, subject.name)
    raise subject.error(
        "kind", f"{quoted(kind)} ({quoted(api_version)}) does not declare a gang (PodGroup or ConfigMap)"
    )


def is_gang_object(obj: Mapping[str, Any]) -> bool:
    if not isinstance(obj, Mapping):
        return False
    kind, api_version = fields.get(obj, "kind"), fields.get(obj, "apiVersion")
    if kind == "PodGroup":
        return _is_podgroup_api(api_version)
    if kind == "ConfigMap":
        data = fields.get(obj, "data")
        return isinstance(data, Mapping) and "minAvailable" in data
    return False


def _is_podgroup_api(api_version: Any) -> bool:
    """A PodGroup group we read; Kubernetes' own only at the version whose shape is known."""
    if not isinstance(api_version, str):
        return False
    group, _, version = api_version.rpartition("/")
    return group in PODGROUP_GROUPS and (group != keys.GROUP_K8S or version == keys.GROUP_K8S_VERSION)


def read_gang_object(obj: Mapping[str, Any], ref: ObjectRef) -> GangParams | None:
    """The gang the object declares; None for one that declares none (a scheduling.k8s.io PodGroup with the
    basic policy, whose pods are scheduled one by one)."""
    subject = Subject(ref.kind, ref.namespace, ref.name)
    if not is_gang_name(ref.name):
        raise subject.error("metadata.name", f"{quoted(ref.name)} is not a valid gang name (RFC 1123 subdomain)")
    if ref.kind != "PodGroup":
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
    return params.overridden_by(koordinator_params(annotations, subject, _PODGROUP_ANNOTATION_KEYS))


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
    return params.overridden_by(koordinator_params(annotations, subject, _PODGROUP_ANNOTATION_KEYS))


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


# --- the final GangSpec -------------------------------------------------------------------------------


def build_spec(
    namespace: str,
    name: str,
    params: GangParams,
    *,
    source: str,
    created_at: float,
    default_wait_seconds: float | None,
    min_field: Declared[None] | None = None,
) -> GangSpec:
    """Apply the defaults (total = min, Strict, the scheduler's wait) and the checks across fields."""
    if params.min_available is None:
        if min_field is None:  # pragma: no cover - object forms always carry a minimum
            raise IntakeError("Gang", namespace, name, "", "min-available is required")
        raise min_field.error("is required")
    minimum = params.min_available.value
    total = params.total_number.value if params.total_number is not None else minimum
    if params.total_number is not None and total < minimum:
        raise _total_below_min(params.min_available, params.total_number)
    return GangSpec(
        namespace=namespace,
        name=name,
        min_available=minimum,
        total_number=total,
        mode=params.mode.value if params.mode is not None else GangMode.STRICT,
        groups=params.groups.value if params.groups is not None else (),
        wait_seconds=params.wait_seconds.value if params.wait_seconds is not None else default_wait_seconds,
        min_resources=dict(params.min_resources or {}),
        created_at=created_at,
        source=source,
        match_policy=params.match_policy.value if params.match_policy is not None else MATCH_POLICIES[0],
        queue=params.queue or "",
        min_task_member=dict(params.min_task_member or {}),
    )


def _total_below_min(minimum: Declared[int], total: Declared[int]) -> IntakeError:
    # Blame the pod when its override made the object's values inconsistent; else the total itself.
    if minimum.subject != total.subject and minimum.subject.kind == "Pod":
        return minimum.error(f"{minimum.value} is above total-number {total.value} of {total.subject.describe()}")
    of = f" of {minimum.subject.describe()}" if minimum.subject != total.subject else ""
    return total.error(f"{total.value} is below min-available {minimum.value}{of}")


def invalid_spec(namespace: str, name: str, *, source: str, created_at: float, reason: str) -> GangSpec:
    """A placeholder for an unusable declaration, so its pods are refused instead of waiting for it."""
    return GangSpec(
        namespace, name, min_available=0, total_number=0, created_at=created_at, source=source, invalid=reason
    )
