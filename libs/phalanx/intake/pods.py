"""Pods (dicts in camelCase or `.to_dict()` snake_case) to PodInfo.

The gang a pod belongs to is not decided here: that needs the PodGroups and ConfigMaps too, so it is the
GangResolver's job.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from phalanx.intake import bounds, fields, names
from phalanx.intake.errors import Subject, quoted
from phalanx.intake.spec_parts import spec_parts
from phalanx.model import keys, limits
from phalanx.model.objects import PodInfo
from phalanx.model.policies import check_basic_policy, check_job_queue_policy

KUBE_DEFAULT_SCHEDULER = "default-scheduler"

# uuid5 namespace for pods that arrive without metadata.uid (scenario files): same name, same uid, every run.
_UID_NAMESPACE = uuid.UUID("6f1f5d2e-8a47-4c55-9a1e-70686c616e78")


def parse_pod(obj: Mapping[str, Any], *, epoch: float = 0.0) -> PodInfo:
    """Read one pod; `epoch` is subtracted from creationTimestamp so simulations can start their clock at 0."""
    meta, subject = fields.metadata(obj, "Pod", namespaced=True)
    fields.subdomain_name(subject)
    spec = fields.mapping(fields.get(obj, "spec"), subject, "spec")
    annotations = fields.string_map(fields.get(meta, "annotations"), subject, "metadata.annotations")
    created = fields.timestamp(fields.get(meta, "creationTimestamp"), subject, "metadata.creationTimestamp")
    _check_policies(annotations, subject)
    requests, placement, pod_affinity = spec_parts(spec, subject)
    return PodInfo(
        namespace=subject.namespace,
        name=subject.name,
        uid=_uid(meta, subject),
        priority=_priority(spec, subject),
        created_at=0.0 if created is None else _created_at(created - epoch, subject),
        requests=requests,
        placement=placement,
        node_name=_node_name(spec, subject),
        annotations=annotations,
        labels=fields.string_map(fields.get(meta, "labels"), subject, "metadata.labels"),
        duration=_duration(annotations, subject),
        pod_affinity=pod_affinity,
        preemption_policy=_preemption_policy(spec, subject),
        scheduling_group=_scheduling_group(spec, subject),
    )


def scheduler_name(obj: Mapping[str, Any]) -> str:
    """Which scheduler the pod asked for; lenient because it only filters which pods we look at."""
    spec = fields.get(obj, "spec") if isinstance(obj, Mapping) else None
    name = fields.get(spec, "schedulerName") if isinstance(spec, Mapping) else None
    return name if isinstance(name, str) and name else KUBE_DEFAULT_SCHEDULER


def pod_uid(namespace: str, name: str) -> str:
    return str(uuid.uuid5(_UID_NAMESPACE, f"{namespace}/{name}"))


def _uid(meta: Mapping[str, Any], subject: Subject) -> str:
    uid = fields.text(fields.get(meta, "uid"), subject, "metadata.uid")
    return bounds.length(uid, subject, "metadata.uid", limits.MAX_ID) or pod_uid(subject.namespace, subject.name)


def _created_at(seconds: float, subject: Subject) -> float:
    """The wire takes a creation time from 0 (1970, or the simulation's start) to MAX_TIME."""
    if seconds < 0:
        raise subject.error("metadata.creationTimestamp", "is before 1970-01-01T00:00:00Z (the start of Unix time)")
    return bounds.seconds(seconds, subject, "metadata.creationTimestamp")


def _priority(spec: Mapping[str, Any], subject: Subject) -> int:
    value = fields.get(spec, "priority")
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise subject.error("spec.priority", f"{quoted(value)} is not an integer")
    if not limits.INT32_MIN <= value <= limits.INT32_MAX:
        # Kubernetes priorities are int32, and so is the protobuf field the pod travels in.
        raise subject.error("spec.priority", f"{quoted(value)} is out of range (a 32-bit integer)")
    return value


PREEMPTION_POLICIES = ("PreemptLowerPriority", "Never")


def _preemption_policy(spec: Mapping[str, Any], subject: Subject) -> str:
    """ "Never", or "" for Kubernetes' default (PreemptLowerPriority)."""
    value = fields.text(fields.get(spec, "preemptionPolicy"), subject, "spec.preemptionPolicy")
    if value and value not in PREEMPTION_POLICIES:
        raise subject.error("spec.preemptionPolicy", f"{quoted(value)} is not one of {', '.join(PREEMPTION_POLICIES)}")
    return "Never" if value == "Never" else ""


def _scheduling_group(spec: Mapping[str, Any], subject: Subject) -> str:
    """spec.schedulingGroup.podGroupName (Kubernetes 1.36+, Workload API): the name of the scheduling.k8s.io
    PodGroup the pod belongs to, "" for none. Its format is the gang intake's to check, as for the other links."""
    raw = fields.get(spec, "schedulingGroup")
    if raw is None:
        return ""
    group = fields.mapping(raw, subject, "spec.schedulingGroup")
    name = fields.text(fields.get(group, "podGroupName"), subject, "spec.schedulingGroup.podGroupName")
    if not name:
        # The API server's rule: podGroupName is the one member of this union, so it must be set.
        raise subject.error("spec.schedulingGroup.podGroupName", "is required when spec.schedulingGroup is set")
    return name


def _node_name(spec: Mapping[str, Any], subject: Subject) -> str:
    name = fields.text(fields.get(spec, "nodeName"), subject, "spec.nodeName")
    if name and not names.is_dns_subdomain(name):
        raise subject.error("spec.nodeName", f"{quoted(name)} is not {names.SUBDOMAIN_RULE}")
    return name


def _duration(annotations: Mapping[str, str], subject: Subject) -> float | None:
    if keys.SIM_DURATION not in annotations:
        return None
    where = f"metadata.annotations[{keys.SIM_DURATION}]"
    try:
        seconds = fields.duration_seconds(annotations[keys.SIM_DURATION])
    except ValueError as exc:
        raise subject.error(where, str(exc)) from None
    return bounds.seconds(seconds, subject, where, annotations[keys.SIM_DURATION])


def _check_policies(annotations: Mapping[str, str], subject: Subject) -> None:
    """A job's policy annotations name known policies (a typo would silently give the default)."""
    if keys.BASIC_POLICY in annotations:
        try:
            check_basic_policy(annotations[keys.BASIC_POLICY])
        except ValueError as exc:
            raise subject.error(f"metadata.annotations[{keys.BASIC_POLICY}]", str(exc)) from None
    if keys.JOB_QUEUE_POLICY in annotations:
        try:
            check_job_queue_policy(annotations[keys.JOB_QUEUE_POLICY])
        except ValueError as exc:
            raise subject.error(f"metadata.annotations[{keys.JOB_QUEUE_POLICY}]", str(exc)) from None
