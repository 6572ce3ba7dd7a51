"""What the services accept in an object: a pod (its placement and pod affinity), a gang, a node.

The servicers check these inside their requests (phalanx.rpc.validation); the intake keeps the same bounds
(phalanx.model.limits), so an object it made passes.
"""

from __future__ import annotations

from collections.abc import Sequence

from phalanx.intake import names
from phalanx.intake.gang_params import MATCH_POLICIES
from phalanx.model.gpu import GPU
from phalanx.model.limits import MAX_ENTRIES, MAX_ID, MAX_KEY, MAX_NODE_GPUS, MAX_TEXT, MAX_TRACE
from phalanx.rpc.value_checks import (
    check_count,
    check_resources,
    check_string_map,
    check_text,
    check_time,
    shown,
)
from phalanx.v1 import objects_pb2

_GANG_MODES = frozenset(objects_pb2.GangMode.values())


def _identity(namespace: str, name: str, path: str, what: str) -> list[str]:
    """A namespaced object's namespace and name, before anything else (the other errors quote them)."""
    if not namespace or not name:
        return [f"{path}: namespace and name are required"]
    errors = []
    if not names.is_dns_label(namespace):
        errors.append(f"{path}.namespace: {shown(namespace)} is not {names.LABEL_RULE}")
    if not names.is_dns_subdomain(name):
        errors.append(f"{path}.name: {shown(name)} is not a valid {what} name ({names.SUBDOMAIN_RULE})")
    return errors


def _placement(p: objects_pb2.Placement, path: str) -> list[str]:
    errors = check_string_map(p.node_selector, f"{path}.node_selector")
    errors += check_count(p.affinity_terms, f"{path}.affinity_terms", MAX_ENTRIES)
    errors += check_count(p.tolerations, f"{path}.tolerations", MAX_ENTRIES)
    if errors:
        return errors
    for i, term in enumerate(p.affinity_terms):
        for part, requirements in (("match_expressions", term.match_expressions), ("match_fields", term.match_fields)):
            errors += _requirements(requirements, f"{path}.affinity_terms[{i}].{part}")
    if all(max(len(t.key), len(t.operator), len(t.value), len(t.effect)) <= MAX_KEY for t in p.tolerations):
        return errors  # the common case, without formatting a path per field
    for i, t in enumerate(p.tolerations):
        at = f"{path}.tolerations[{i}]"
        errors += (
            check_text(t.key, f"{at}.key", MAX_KEY)
            + check_text(t.operator, f"{at}.operator", MAX_KEY)
            + check_text(t.value, f"{at}.value", MAX_KEY)
            + check_text(t.effect, f"{at}.effect", MAX_KEY)
        )
    return errors


_LABEL_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
_WHEN_UNSATISFIABLE = frozenset({"DoNotSchedule", "ScheduleAnyway"})
_INCLUSION_POLICIES = frozenset({"Honor", "Ignore"})


def _pod_affinity(a: objects_pb2.PodAffinity, path: str) -> list[str]:
    """Inter-pod affinity and spread as intake makes them: the plugins trust operators and numbers."""
    errors: list[str] = []
    for part in ("required_affinity", "required_anti_affinity"):
        terms = getattr(a, part)
        errors += check_count(terms, f"{path}.{part}", MAX_ENTRIES)
        for i, t in enumerate(terms if not errors else ()):
            errors += _affinity_term(t, f"{path}.{part}[{i}]")
    for part in ("preferred_affinity", "preferred_anti_affinity"):
        weighted = getattr(a, part)
        errors += check_count(weighted, f"{path}.{part}", MAX_ENTRIES)
        for i, w in enumerate(weighted if not errors else ()):
            if not 1 <= w.weight <= 100:
                errors.append(f"{path}.{part}[{i}].weight: {w.weight} is not from 1 to 100")
            errors += _affinity_term(w.term, f"{path}.{part}[{i}].term")
    errors += check_count(a.spread, f"{path}.spread", MAX_ENTRIES)
    for i, c in enumerate(a.spread if not errors else ()):
        at = f"{path}.spread[{i}]"
        if c.max_skew < 1:
            errors.append(f"{at}.max_skew: {c.max_skew} is below 1")
        if c.min_domains < 0:
            errors.append(f"{at}.min_domains: {c.min_domains} is negative")
        errors += _topology_key(c.topology_key, f"{at}.topology_key")
        if c.when_unsatisfiable not in _WHEN_UNSATISFIABLE:
            errors.append(
                f"{at}.when_unsatisfiable: {shown(c.when_unsatisfiable)} is not DoNotSchedule or ScheduleAnyway"
            )
        for name in ("node_affinity_policy", "node_taints_policy"):
            if getattr(c, name) not in _INCLUSION_POLICIES:
                errors.append(f"{at}.{name}: {shown(getattr(c, name))} is not Honor or Ignore")
        errors += check_count(c.match_label_keys, f"{at}.match_label_keys", MAX_ENTRIES)
        if c.HasField("label_selector"):
            errors += _label_selector(c.label_selector, f"{at}.label_selector")
    return errors


def _topology_key(key: str, path: str) -> list[str]:
    return [] if key and len(key) <= MAX_KEY else [f"{path}: must have 1 to {MAX_KEY} characters"]


def _affinity_term(t: objects_pb2.PodAffinityTerm, path: str) -> list[str]:
    errors = _topology_key(t.topology_key, f"{path}.topology_key")
    errors += check_count(t.namespaces, f"{path}.namespaces", MAX_ENTRIES)
    for part in ("label_selector", "namespace_selector"):
        if t.HasField(part):
            errors += _label_selector(getattr(t, part), f"{path}.{part}")
    return errors


def _label_selector(s: objects_pb2.LabelSelector, path: str) -> list[str]:
    errors = check_string_map(s.match_labels, f"{path}.match_labels")
    errors += _requirements(s.match_expressions, f"{path}.match_expressions")
    for i, r in enumerate(s.match_expressions if not errors else ()):
        if r.operator not in _LABEL_OPERATORS:
            errors.append(
                f"{path}.match_expressions[{i}].operator: {shown(r.operator)} is not In, NotIn, Exists or DoesNotExist"
            )
    return errors


def _requirements(requirements: Sequence[objects_pb2.SelectorRequirement], path: str) -> list[str]:
    errors = check_count(requirements, path, MAX_ENTRIES)
    for i, r in enumerate(requirements if not errors else ()):
        at = f"{path}[{i}]"
        errors += check_text(r.key, f"{at}.key", MAX_KEY) + check_text(r.operator, f"{at}.operator", MAX_KEY)
        errors += check_count(r.values, f"{at}.values", MAX_ENTRIES)
        errors += [
            f"{at}.values[{j}]: {len(v)} characters is too long (at most {MAX_KEY})"
            for j, v in enumerate(r.values)
            if len(v) > MAX_KEY
        ]
    return errors


def pod_errors(pod: objects_pb2.Pod, path: str, *, bound: bool = False) -> list[str]:
    """A pod as the queue and the scheduler take it; `bound` pods must name their node."""
    errors = _identity(pod.namespace, pod.name, path, "pod")
    if errors:
        return errors
    where = f"{path} {pod.namespace}/{pod.name}"
    if pod.gang and not names.is_object_key(pod.gang):
        errors.append(f"{where}: gang {shown(pod.gang)} is not namespace/name with a valid namespace and name")
    if pod.node_name and not names.is_dns_subdomain(pod.node_name):
        errors.append(f"{where}: node_name {shown(pod.node_name)} is not {names.SUBDOMAIN_RULE}")
    if bound and not pod.node_name:
        errors.append(f"{where}: node_name is required for a bound pod")
    errors += check_time(pod.created_at, f"{path}.created_at")
    errors += check_time(pod.gang_created_at, f"{path}.gang_created_at")
    errors += check_time(pod.duration, f"{path}.duration", negative_ok=True)  # negative: never finishes
    errors += check_resources(pod.requests, f"{path}.requests")
    errors += check_string_map(pod.annotations, f"{path}.annotations")
    errors += check_string_map(pod.labels, f"{path}.labels")
    errors += _placement(pod.placement, f"{path}.placement")
    if pod.HasField("pod_affinity"):
        errors += _pod_affinity(pod.pod_affinity, f"{path}.pod_affinity")
    errors += check_text(pod.uid, f"{path}.uid", MAX_ID) + check_text(pod.invalid, f"{path}.invalid", MAX_TEXT)
    if pod.preemption_policy not in ("", "Never"):
        errors.append(f'{where}: preemption_policy {shown(pod.preemption_policy)} is not "Never" or empty')
    errors += check_text(pod.trace_parent, f"{path}.trace_parent", MAX_TRACE)
    return errors


def gang_errors(gang: objects_pb2.Gang, path: str) -> list[str]:
    errors = _identity(gang.namespace, gang.name, path, "gang")
    if errors:
        return errors
    where = f"{path} {gang.namespace}/{gang.name}"
    if gang.min_available < 1:
        errors.append(f"{where}: min_available must be at least 1 (got {gang.min_available})")
    elif gang.total_number and gang.total_number < gang.min_available:  # 0: not given, total = min
        errors.append(f"{where}: total_number {gang.total_number} is below min_available {gang.min_available}")
    if gang.total_number < 0:
        errors.append(f"{where}: total_number {gang.total_number} is negative")
    if gang.mode not in _GANG_MODES:
        errors.append(f"{path}.mode: unknown value {gang.mode}")
    errors += check_count(gang.groups, f"{path}.groups", MAX_ENTRIES) or [
        f"{path}.groups[{i}]: {shown(g)} is not a gang key (namespace/name)"
        for i, g in enumerate(gang.groups)
        if not names.is_object_key(g)
    ]
    errors += check_time(gang.wait_seconds, f"{path}.wait_seconds", negative_ok=True)  # negative: the default
    errors += check_time(gang.created_at, f"{path}.created_at")
    errors += check_resources(gang.min_resources, f"{path}.min_resources")
    errors += check_text(gang.source, f"{path}.source", MAX_KEY) + check_text(gang.invalid, f"{path}.invalid", MAX_TEXT)
    if gang.match_policy and gang.match_policy not in MATCH_POLICIES:
        errors.append(f"{path}.match_policy: {shown(gang.match_policy)} is not one of {', '.join(MATCH_POLICIES)}")
    errors += check_count(gang.min_task_member, f"{path}.min_task_member", MAX_ENTRIES) or [
        f"{path}.min_task_member: role {shown(role)} must have 1 to {MAX_KEY} characters"
        for role in gang.min_task_member
        if not role or len(role) > MAX_KEY
    ]
    errors += [
        f"{path}.min_task_member[{shown(role)}]: {count} is negative"
        for role, count in gang.min_task_member.items()
        if count < 0
    ]
    return errors


def node_errors(node: objects_pb2.Node, path: str) -> list[str]:
    if not node.name:
        return [f"{path}.name: is required"]
    if not names.is_dns_subdomain(node.name):
        return [f"{path}.name: {shown(node.name)} is not {names.SUBDOMAIN_RULE}"]
    errors = check_resources(node.allocatable, f"{path}.allocatable")
    if node.allocatable.get(GPU, 0) > MAX_NODE_GPUS * 1000:  # the scheduler keeps one column per GPU
        errors.append(f"{path}.allocatable[{GPU!r}]: {node.allocatable[GPU]} is more than {MAX_NODE_GPUS} GPUs")
    errors += check_string_map(node.labels, f"{path}.labels")
    errors += check_count(node.taints, f"{path}.taints", MAX_ENTRIES)
    for i, t in enumerate(node.taints if not errors else ()):
        at = f"{path}.taints[{i}]"
        errors += check_text(t.key, f"{at}.key", MAX_KEY) + check_text(t.value, f"{at}.value", MAX_KEY)
        errors += check_text(t.effect, f"{at}.effect", MAX_KEY)
    return errors
