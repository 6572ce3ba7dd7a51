"""A pod's gang declaration: which of the forms of docs compatibility.md it uses, read into a GangSpec.

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

Here: finding and reading the pod's link, the final GangSpec, and what a timeout does per form. The shapes
read into are gang_shapes.py, Koordinator's annotations gang_params.py, the PodGroups and ConfigMaps a link
names gang_objects.py (their kinds: gang_kinds.py).

Whatever the form, the Koordinator parameter annotations on the pod (min-available, total-number, mode,
waiting-time, groups, match-policy) override the form's own values, as Koordinator lets a pod's
annotations override its PodGroup.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from phalanx.intake.errors import IntakeError, Subject, quoted
from phalanx.intake.gang_kinds import CONFIGMAP_KIND, PODGROUP_KIND
from phalanx.intake.gang_params import (
    MATCH_POLICIES,
    POD_OVERRIDE_KEYS,
    annotation_param,
    declared,
    is_gang_name,
    koordinator_params,
    positive_int,
)
from phalanx.intake.gang_shapes import (
    CONFIGMAP,
    DELAYED_BINDING,
    KOORDINATOR_ANNOTATIONS,
    KUBE_BATCH,
    LIGHTWEIGHT,
    SCHEDULING_GROUP_FIELD,
    Declared,
    GangLink,
    GangParams,
    LinkSite,
    ObjectRef,
)
from phalanx.model import keys
from phalanx.model.objects import GangMode, GangSpec, PodInfo

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
    overrides = koordinator_params(pod.annotations, subject, POD_OVERRIDE_KEYS)
    params = link.params.overridden_by(overrides)
    # Most pods override nothing: no copy then (dataclasses.replace is ~18 us of a pod's resolution).
    return link if params is link.params else replace(link, params=params)


def _read_koordinator(pod: PodInfo, subject: Subject, site: LinkSite) -> GangLink:
    required_at = Declared(None, subject, f"metadata.annotations[{keys.KOORD_MIN_AVAILABLE}]")
    return GangLink(site.name, KOORDINATOR_ANNOTATIONS, GangParams(), min_field=required_at)


def _read_podgroup_link(pod: PodInfo, subject: Subject, site: LinkSite) -> GangLink:
    ref = ObjectRef(PODGROUP_KIND, site.form, pod.namespace, site.name)
    return GangLink(site.name, ref.source, GangParams(), ref=ref)


def _read_configmap_link(pod: PodInfo, subject: Subject, site: LinkSite) -> GangLink:
    ref = ObjectRef(CONFIGMAP_KIND, "", pod.namespace, site.name)
    return GangLink(site.name, ref.source, GangParams(), ref=ref)


def _read_lightweight(pod: PodInfo, subject: Subject, site: LinkSite) -> GangLink:
    # Community tooling writes these as labels or annotations; the annotation wins, like the name.
    key = keys.LIGHT_MIN_AVAILABLE
    where, raw = (
        (f"metadata.annotations[{key}]", pod.annotations[key])
        if key in pod.annotations
        else (f"metadata.labels[{key}]", pod.labels.get(key))
    )
    params = GangParams(min_available=declared(raw, subject, where, positive_int)) if raw is not None else GangParams()
    required_at = Declared(None, subject, f"metadata.annotations[{key}]")
    return GangLink(site.name, LIGHTWEIGHT, params, min_field=required_at)


def _read_group_name(pod: PodInfo, subject: Subject, site: LinkSite) -> GangLink:
    min_member = annotation_param(pod.annotations, keys.KUBE_BATCH_MIN_MEMBER, subject, positive_int)
    pod_num = annotation_param(pod.annotations, keys.DELAYED_BIND_POD_NUM, subject, positive_int)
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
