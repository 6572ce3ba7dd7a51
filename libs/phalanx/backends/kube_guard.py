"""What the binder checks before it writes to a real cluster: that the pod is Phalanx's to bind and the node
is real; that a report touches only Phalanx's pods and PodGroups, with the annotations and Event reasons
the scheduler writes. Defence in depth: the binder's callers are authenticated, but a caller that is wrong
(or compromised) must still not be able to bind or annotate pods of other schedulers.

The facts (PodFacts, NodeFacts) come from the binder's watch-fed cache (cluster_view.py), so the bind path
makes no API call per pod. schedulerName is immutable, so a uid seen with our name stays ours; the binding
carries the uid as a precondition, which closes the gap between the check and the write. A stale "unbound"
is harmless: the API server refuses a second binding (409), handled by the backend.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from phalanx.backends.api_calls import transient
from phalanx.backends.base import BindFailure
from phalanx.intake.errors import IntakeError, Subject
from phalanx.intake.spec_parts import requests_of
from phalanx.model import keys
from phalanx.model.binding import Assignment
from phalanx.model.objects import Resources
from phalanx.model.status import EventReason

log = logging.getLogger(__name__)

# Every Event reason Phalanx writes: the binder's own Scheduled, and what the scheduler and its cluster feed
# report (phalanx.scheduling.scheduler, phalanx.scheduling.reports, phalanx.cluster.feed). Others are dropped.
EVENT_REASONS: frozenset[str] = frozenset(EventReason)
NORMAL_EVENT_REASONS: frozenset[str] = frozenset(r for r in EventReason if r.normal)
# The annotations a report may set on a pod, and the values each may take.
REPORT_ANNOTATIONS: Mapping[str, frozenset[str]] = {keys.KOORD_TIMEOUT: frozenset({"true"})}

# Where a pod names a PodGroup (in its own namespace), by the PodGroup's API group.
_PODGROUP_LABELS = ((keys.LABEL_X_K8S_PODGROUP, keys.GROUP_X_K8S), (keys.LABEL_SIGS_PODGROUP, keys.GROUP_SIGS))
_PODGROUP_ANNOTATIONS = ((keys.VOLCANO_GROUP_NAME, keys.GROUP_VOLCANO),)


@dataclass(frozen=True, slots=True)
class PodFacts:
    uid: str
    scheduler: str
    node: str  # "" while unbound
    deleting: bool
    podgroups: tuple[tuple[str, str], ...]  # (API group, name) of the PodGroups it names, in its namespace
    owners: tuple[str, ...] = ()  # names of its owners (ownerReferences), e.g. the Job
    # What its spec asks (containers, init containers, overhead, as the scheduler's intake reads them), so a
    # reservation smaller than the pod is never bound; a str: why the spec could not be read.
    requests: Resources | str = field(default_factory=dict)

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> PodFacts:
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        groups = tuple((group, labels[k]) for k, group in _PODGROUP_LABELS if labels.get(k)) + tuple(
            (group, annotations[k]) for k, group in _PODGROUP_ANNOTATIONS if annotations.get(k)
        )
        owners = tuple(str(o.get("name")) for o in meta.get("ownerReferences") or () if o.get("name"))
        return cls(
            uid=str(meta.get("uid") or ""),
            scheduler=str(spec.get("schedulerName") or ""),
            node=str(spec.get("nodeName") or ""),
            deleting=bool(meta.get("deletionTimestamp")),
            podgroups=groups,
            owners=owners,
            requests=_spec_requests(meta, spec),
        )


def _spec_requests(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Resources | str:
    subject = Subject("Pod", str(meta.get("namespace") or ""), str(meta.get("name") or ""))
    try:
        return requests_of(spec, subject)
    except IntakeError as exc:
        return str(exc)


def unreserved(pod_key: str, spec: Resources | str, held: Mapping[str, int]) -> str:
    """Why a reservation of `held` does not cover what the pod's spec asks ("" when it does). Placement may
    add to a pod's own requests (the GPU devices chosen for it), never take from them."""
    if isinstance(spec, str):
        return f"pod {pod_key}: its requests cannot be read ({spec}); not bound"
    short = [f"{r} {v} (reserved {held.get(r, 0)})" for r, v in sorted(spec.items()) if held.get(r, 0) < v]
    if not short:
        return ""
    return f"pod {pod_key} asks for more than the scheduler reserved: {', '.join(short)}; not bound"


@dataclass(frozen=True, slots=True)
class NodeFacts:
    deleting: bool

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> NodeFacts:
        return cls(deleting=bool((obj.get("metadata") or {}).get("deletionTimestamp")))


def verdict(
    a: Assignment, pod: PodFacts | None | Exception, node: NodeFacts | None | Exception, scheduler: str
) -> BindFailure | None:
    """Whether `a` may be bound, given what is known of its pod and node; None: yes."""
    key = a.pod_key
    if isinstance(pod, Exception):
        return _unverified(f"pod {key}", pod)
    if pod is None:
        return BindFailure(f"pod {key} does not exist", gone=True)
    if a.uid and pod.uid != a.uid:
        return BindFailure(f"pod {key} no longer exists (recreated: uid {pod.uid}, not {a.uid})", gone=True)
    if pod.scheduler != scheduler:
        return BindFailure(f'pod {key} names scheduler "{pod.scheduler}", not "{scheduler}": not Phalanx\'s to bind')
    if pod.deleting:
        return BindFailure(f"pod {key} is being deleted", gone=True)
    if pod.node:
        # Bound where asked: an earlier attempt whose answer was lost; the backend confirms it (409, read back).
        return None if pod.node == a.node else BindFailure(f"pod {key} is already bound to {pod.node}")
    if isinstance(node, Exception):
        return _unverified(f"node {a.node} (for pod {key})", node)
    if node is None:
        return BindFailure(f"node {a.node} does not exist (pod {key} not bound)")
    if node.deleting:
        return BindFailure(f"node {a.node} is being deleted (pod {key} not bound)")
    return None


def _unverified(what: str, exc: Exception) -> BindFailure:
    """Not checked is not bound; an API server that did not answer is asked again later."""
    return BindFailure(f"could not check {what}: {type(exc).__name__}: {exc}", retryable=transient(exc))


def report_annotations(pod_key: str, annotations: Mapping[str, str]) -> dict[str, str]:
    """The annotations of a report that Phalanx writes; the others are dropped with a warning."""
    out: dict[str, str] = {}
    for key, value in annotations.items():
        if value in REPORT_ANNOTATIONS.get(key, ()):
            out[key] = value
        else:
            log.warning("report on pod %s: annotation %s=%r dropped (not one Phalanx writes)", pod_key, key, value[:64])
    return out


def event_reason_allowed(reason: str, where: str) -> bool:
    if reason in EVENT_REASONS:
        return True
    log.warning("report on %s: Event reason %r dropped (not one Phalanx writes)", where, reason[:64])
    return False
