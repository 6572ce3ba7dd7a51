"""What the three services accept in their requests, as one set of rules.

Each function returns a list of errors, each naming the field (`pods[3].namespace: ...`); an empty list
means the request may be applied. The servicers check a whole request before applying any of it, so a
refused request changes nothing (except the queue's Add, which refuses bad pods one by one).

The limits keep one request from costing unbounded memory or time, and keep every value within what the
code behind the services was written for: names that split cleanly into "namespace/name", finite times,
non-negative amounts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence, Sized
from typing import Any, NoReturn

import grpc

from phalanx.intake import names
from phalanx.intake.fields import MAX_AMOUNT, MAX_NODE_GPUS
from phalanx.intake.gangs import MATCH_POLICIES
from phalanx.model.gpu import GPU
from phalanx.v1 import binder_pb2, objects_pb2, queue_pb2, scheduler_pb2

# Pods, nodes, keys... in one request (and its lists together, for a step): a gang of 10,000 pods fits one
# call; a cluster's nodes or a burst of pods go in several. Clients split what is larger.
MAX_ITEMS = 10_000
MAX_BIND_BATCH = 10_000  # assignments bound as one batch
MAX_BIND_TOTAL = 10_000  # assignments across the batches of one BindMany
MAX_TIME = 1e12  # seconds: unix time or virtual time, ~31,700 years; keeps `now + delay` finite
MAX_KEY = 317  # a qualified label/annotation/resource name: 253-character prefix, "/", 63-character name
MAX_VALUE = 256 * 1024  # an annotation value (Kubernetes caps all of a pod's annotations at 256 KiB)
MAX_ENTRIES = 4_096  # entries of one map, terms of a placement, taints of a node, members of a gang group
MAX_ID = 253  # uids, consumer names
MAX_TEXT = 64 * 1024  # free text: reasons, messages
MAX_TRACE = 512  # a W3C traceparent is 55 characters
MAX_ERRORS_SHOWN = 20  # errors in one INVALID_ARGUMENT message

_OUTCOMES = frozenset(queue_pb2.Outcome.values()) - {queue_pb2.OUTCOME_UNSPECIFIED}
_GANG_MODES = frozenset(objects_pb2.GangMode.values())


class InvalidRequest(ValueError):
    """A request the service must refuse; `errors` name each bad field."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = list(errors)
        super().__init__(message(self.errors))


def message(errors: Sequence[str]) -> str:
    shown = "; ".join(errors[:MAX_ERRORS_SHOWN])
    more = len(errors) - MAX_ERRORS_SHOWN
    return f"{shown}; and {more} more" if more > 0 else shown


def raise_if_invalid(errors: Sequence[str]) -> None:
    if errors:
        raise InvalidRequest(errors)


def abort_if_invalid(context: grpc.ServicerContext, errors: Sequence[str]) -> None:
    """INVALID_ARGUMENT naming every bad field (up to MAX_ERRORS_SHOWN); returns only when there is none."""
    if errors:
        _abort(context, message(errors))


def _abort(context: grpc.ServicerContext, text: str) -> NoReturn:
    context.abort(grpc.StatusCode.INVALID_ARGUMENT, text)
    raise AssertionError("unreachable: context.abort raises")  # pragma: no cover


# --- values ----------------------------------------------------------------------------------------


def shown(value: object) -> str:
    """A user's value in an error, cut short: a 1 MB name must not make a 1 MB error."""
    if isinstance(value, str) and len(value) > 100:
        return f"{value[:100]!r}... ({len(value)} characters)"
    return repr(value)


def _time(value: float, path: str, *, zero_ok: bool = True, negative_ok: bool = False) -> list[str]:
    """A time or duration: finite, within MAX_TIME, non-negative unless negative has a meaning."""
    if not math.isfinite(value):
        return [f"{path}: {value!r} is not a finite number of seconds"]
    if value < 0 and not negative_ok:
        return [f"{path}: {value!r} is negative"]
    if abs(value) > MAX_TIME:
        return [f"{path}: {value!r} is too large (at most {MAX_TIME:g} seconds)"]
    if value == 0 and not zero_ok:
        return [f"{path}: is required"]
    return []


def _text(value: str, path: str, limit: int) -> list[str]:
    return [f"{path}: {len(value)} characters is too long (at most {limit})"] if len(value) > limit else []


def _count(items: Sized, path: str, limit: int = MAX_ITEMS) -> list[str]:
    return [f"{path}: {len(items)} items is too many (at most {limit})"] if len(items) > limit else []


def _keys(keys: Sequence[str], path: str, what: str) -> list[str]:
    """A list of "namespace/name" keys (pods or gangs)."""
    errors = _count(keys, path)
    if errors:
        return errors
    return [
        f"{path}[{i}]: {shown(k)} is not a {what} key (namespace/name)"
        for i, k in enumerate(keys)
        if not names.is_object_key(k)
    ]


def _node_names(items: Sequence[str], path: str) -> list[str]:
    errors = _count(items, path)
    if errors:
        return errors
    return [
        f"{path}[{i}]: {shown(n)} is not {names.SUBDOMAIN_RULE}"
        for i, n in enumerate(items)
        if not names.is_dns_subdomain(n)
    ]


def _string_map(m: Mapping[str, str], path: str) -> list[str]:
    errors = _count(m, path, MAX_ENTRIES)
    if errors:
        return errors
    for key, value in m.items():
        if not key or len(key) > MAX_KEY:
            errors.append(f"{path}: key {shown(key)} must have 1 to {MAX_KEY} characters")
        errors += _text(value, f"{path}[{shown(key)}]", MAX_VALUE)
    return errors


def _resources(m: Mapping[str, int], path: str) -> list[str]:
    """Milli-units: a negative amount would drive a node's recorded usage below zero."""
    errors = _count(m, path, MAX_ENTRIES)
    if errors:
        return errors
    for key, amount in m.items():
        if not key or len(key) > MAX_KEY:
            errors.append(f"{path}: resource name {shown(key)} must have 1 to {MAX_KEY} characters")
        if amount < 0:
            errors.append(f"{path}[{shown(key)}]: {amount} is negative")
        elif amount > MAX_AMOUNT:  # the Redis state adds amounts up as doubles (see intake.fields)
            errors.append(f"{path}[{shown(key)}]: {amount} is too large (at most {MAX_AMOUNT})")
    return errors


# --- objects ---------------------------------------------------------------------------------------


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
    errors = _string_map(p.node_selector, f"{path}.node_selector")
    errors += _count(p.affinity_terms, f"{path}.affinity_terms", MAX_ENTRIES)
    errors += _count(p.tolerations, f"{path}.tolerations", MAX_ENTRIES)
    if errors:
        return errors
    for i, term in enumerate(p.affinity_terms):
        for part, requirements in (("match_expressions", term.match_expressions), ("match_fields", term.match_fields)):
            errors += _requirements(requirements, f"{path}.affinity_terms[{i}].{part}")
    for i, t in enumerate(p.tolerations):
        at = f"{path}.tolerations[{i}]"
        errors += (
            _text(t.key, f"{at}.key", MAX_KEY)
            + _text(t.operator, f"{at}.operator", MAX_KEY)
            + _text(t.value, f"{at}.value", MAX_KEY)
            + _text(t.effect, f"{at}.effect", MAX_KEY)
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
        errors += _count(terms, f"{path}.{part}", MAX_ENTRIES)
        for i, t in enumerate(terms if not errors else ()):
            errors += _affinity_term(t, f"{path}.{part}[{i}]")
    for part in ("preferred_affinity", "preferred_anti_affinity"):
        weighted = getattr(a, part)
        errors += _count(weighted, f"{path}.{part}", MAX_ENTRIES)
        for i, w in enumerate(weighted if not errors else ()):
            if not 1 <= w.weight <= 100:
                errors.append(f"{path}.{part}[{i}].weight: {w.weight} is not from 1 to 100")
            errors += _affinity_term(w.term, f"{path}.{part}[{i}].term")
    errors += _count(a.spread, f"{path}.spread", MAX_ENTRIES)
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
        errors += _count(c.match_label_keys, f"{at}.match_label_keys", MAX_ENTRIES)
        if c.HasField("label_selector"):
            errors += _label_selector(c.label_selector, f"{at}.label_selector")
    return errors


def _topology_key(key: str, path: str) -> list[str]:
    return [] if key and len(key) <= MAX_KEY else [f"{path}: must have 1 to {MAX_KEY} characters"]


def _affinity_term(t: objects_pb2.PodAffinityTerm, path: str) -> list[str]:
    errors = _topology_key(t.topology_key, f"{path}.topology_key")
    errors += _count(t.namespaces, f"{path}.namespaces", MAX_ENTRIES)
    for part in ("label_selector", "namespace_selector"):
        if t.HasField(part):
            errors += _label_selector(getattr(t, part), f"{path}.{part}")
    return errors


def _label_selector(s: objects_pb2.LabelSelector, path: str) -> list[str]:
    errors = _string_map(s.match_labels, f"{path}.match_labels")
    errors += _requirements(s.match_expressions, f"{path}.match_expressions")
    for i, r in enumerate(s.match_expressions if not errors else ()):
        if r.operator not in _LABEL_OPERATORS:
            errors.append(
                f"{path}.match_expressions[{i}].operator: {shown(r.operator)} is not In, NotIn, Exists or DoesNotExist"
            )
    return errors


def _requirements(requirements: Sequence[objects_pb2.SelectorRequirement], path: str) -> list[str]:
    errors = _count(requirements, path, MAX_ENTRIES)
    for i, r in enumerate(requirements if not errors else ()):
        at = f"{path}[{i}]"
        errors += _text(r.key, f"{at}.key", MAX_KEY) + _text(r.operator, f"{at}.operator", MAX_KEY)
        errors += _count(r.values, f"{at}.values", MAX_ENTRIES)
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
    errors += _time(pod.created_at, f"{path}.created_at")
    errors += _time(pod.gang_created_at, f"{path}.gang_created_at")
    errors += _time(pod.duration, f"{path}.duration", negative_ok=True)  # negative: never finishes
    errors += _resources(pod.requests, f"{path}.requests")
    errors += _string_map(pod.annotations, f"{path}.annotations")
    errors += _string_map(pod.labels, f"{path}.labels")
    errors += _placement(pod.placement, f"{path}.placement")
    if pod.HasField("pod_affinity"):
        errors += _pod_affinity(pod.pod_affinity, f"{path}.pod_affinity")
    errors += _text(pod.uid, f"{path}.uid", MAX_ID) + _text(pod.invalid, f"{path}.invalid", MAX_TEXT)
    if pod.preemption_policy not in ("", "Never"):
        errors.append(f'{where}: preemption_policy {shown(pod.preemption_policy)} is not "Never" or empty')
    errors += _text(pod.trace_parent, f"{path}.trace_parent", MAX_TRACE)
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
    errors += _count(gang.groups, f"{path}.groups", MAX_ENTRIES) or [
        f"{path}.groups[{i}]: {shown(g)} is not a gang key (namespace/name)"
        for i, g in enumerate(gang.groups)
        if not names.is_object_key(g)
    ]
    errors += _time(gang.wait_seconds, f"{path}.wait_seconds", negative_ok=True)  # negative: the default
    errors += _time(gang.created_at, f"{path}.created_at")
    errors += _resources(gang.min_resources, f"{path}.min_resources")
    errors += _text(gang.source, f"{path}.source", MAX_KEY) + _text(gang.invalid, f"{path}.invalid", MAX_TEXT)
    if gang.match_policy and gang.match_policy not in MATCH_POLICIES:
        errors.append(f"{path}.match_policy: {shown(gang.match_policy)} is not one of {', '.join(MATCH_POLICIES)}")
    errors += _count(gang.min_task_member, f"{path}.min_task_member", MAX_ENTRIES) or [
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
    errors = _resources(node.allocatable, f"{path}.allocatable")
    if node.allocatable.get(GPU, 0) > MAX_NODE_GPUS * 1000:  # the scheduler keeps one column per GPU
        errors.append(f"{path}.allocatable[{GPU!r}]: {node.allocatable[GPU]} is more than {MAX_NODE_GPUS} GPUs")
    errors += _string_map(node.labels, f"{path}.labels")
    errors += _count(node.taints, f"{path}.taints", MAX_ENTRIES)
    for i, t in enumerate(node.taints if not errors else ()):
        at = f"{path}.taints[{i}]"
        errors += _text(t.key, f"{at}.key", MAX_KEY) + _text(t.value, f"{at}.value", MAX_KEY)
        errors += _text(t.effect, f"{at}.effect", MAX_KEY)
    return errors


def _each(items: Sequence[Any], path: str, check: Any, limit: int = MAX_ITEMS) -> list[str]:
    errors = _count(items, path, limit)
    if errors:
        return errors
    for i, item in enumerate(items):
        errors += check(item, f"{path}[{i}]")
    return errors


# --- the queue -------------------------------------------------------------------------------------


def add_request(req: queue_pb2.AddRequest) -> list[str]:
    """What refuses a whole Add; its pods are checked one by one with pod_rejection."""
    return _time(req.now, "now") + _count(req.pods, "pods")


def pod_rejection(pod: objects_pb2.Pod, index: int, path: str = "pods") -> str:
    """Why Add refuses this pod ("" when it takes it), as AddResponse.rejected reports it."""
    return "; ".join(pod_errors(pod, f"{path}[{index}]"))


def done_request(req: queue_pb2.DoneRequest, prefix: str = "") -> list[str]:
    errors = _time(req.now, f"{prefix}now") + _count(req.results, f"{prefix}results")
    for i, res in enumerate(req.results if not errors else ()):
        if res.outcome not in _OUTCOMES:
            errors.append(f"{prefix}results[{i}].outcome: unknown value {res.outcome}")
        errors += pod_errors(res.pod, f"{prefix}results[{i}].pod")
        errors += _text(res.reason, f"{prefix}results[{i}].reason", MAX_TEXT)
        if res.HasField("hint"):
            errors += _retry_hint(res.hint, f"{prefix}results[{i}].hint")
    errors += _keys(req.activate_gangs, f"{prefix}activate_gangs", "gang")
    errors += _keys(req.failed_gangs, f"{prefix}failed_gangs", "gang")
    errors += _shares(req.tenant_shares, f"{prefix}tenant_shares")
    for resource, amount in req.share_capacity.items():
        if resource not in ("cpu", "memory", "gpu"):
            errors.append(f"{prefix}share_capacity: unknown resource {shown(resource)} (known: cpu, memory, gpu)")
        elif amount < 0:
            errors.append(f"{prefix}share_capacity[{resource}]: {amount} is negative")
    return errors


def _shares(shares: Mapping[str, float], path: str) -> list[str]:
    """Tenants' dominant shares: named, and a finite fraction from 0 to 1."""
    errors = _count(shares, path, MAX_ENTRIES)
    for tenant, share in list(shares.items())[: MAX_ENTRIES if not errors else 0]:
        if not tenant or len(tenant) > MAX_ID:
            errors.append(f"{path}: tenant name {shown(tenant)} must have 1 to {MAX_ID} characters")
        elif not (math.isfinite(share) and 0.0 <= share <= 1.0):
            errors.append(f"{path}[{tenant}]: {share!r} is not a share from 0 to 1")
    return errors


def pop_request(req: queue_pb2.PopRequest) -> list[str]:
    """Everything a Pop carries except its `add` pods, which are refused one by one as in Add."""
    errors = _time(req.now, "now") + _time(req.wait_seconds, "wait_seconds")
    if req.max_pods < 0:
        errors.append(f"max_pods: {req.max_pods} is negative")
    if req.HasField("done"):
        errors += done_request(req.done, "done.")
    errors += _keys(req.remove, "remove", "pod") + _count(req.add, "add")
    for field in ("consumer", "consumer_incarnation"):
        errors += _text(getattr(req, field, ""), field, MAX_ID)
    errors += _freed(req.freed, "freed")
    return errors


def remove_request(req: queue_pb2.RemoveRequest) -> list[str]:
    # Unknown keys are fine (nothing to forget); only the size is bounded.
    return _count(req.pod_keys, "pod_keys") or [
        f"pod_keys[{i}]: {len(k)} characters is too long" for i, k in enumerate(req.pod_keys) if len(k) > MAX_KEY
    ]


def move_all_request(req: queue_pb2.MoveAllRequest) -> list[str]:
    return _time(req.now, "now") + _text(req.event, "event", MAX_KEY) + _freed(req.freed, "freed")


def _retry_hint(h: queue_pb2.RetryHint, path: str) -> list[str]:
    errors = _resources(h.needs, f"{path}.needs") + _resource_names(h.insufficient, f"{path}.insufficient")
    errors += _node_names(h.nodes, f"{path}.nodes") + _node_names(list(h.slots), f"{path}.slots")
    if h.pods < 0:
        errors.append(f"{path}.pods: {h.pods} is negative")
    return errors + [f"{path}.slots[{shown(n)}]: {k} is negative" for n, k in h.slots.items() if k < 0]


def _freed(items: Sequence[queue_pb2.FreedCapacity], path: str) -> list[str]:
    errors = _count(items, path)
    for i, f in enumerate(items if not errors else ()):
        at = f"{path}[{i}]"
        if f.node and not names.is_dns_subdomain(f.node):
            errors.append(f"{at}.node: {shown(f.node)} is not {names.SUBDOMAIN_RULE}")
        errors += _resource_names(f.resources, f"{at}.resources") + _resources(f.free, f"{at}.free")
    return errors


def _resource_names(items: Sequence[str], path: str) -> list[str]:
    return _count(items, path, MAX_ENTRIES) or [
        f"{path}[{i}]: resource name {shown(r)} must have 1 to {MAX_KEY} characters"
        for i, r in enumerate(items)
        if not r or len(r) > MAX_KEY
    ]


def stats_request(req: queue_pb2.StatsRequest) -> list[str]:
    return _time(req.now, "now")


# --- the scheduler ---------------------------------------------------------------------------------


def cluster_events(ev: scheduler_pb2.ClusterEvents, prefix: str = "") -> list[str]:
    errors = _time(ev.now, f"{prefix}now")
    errors += _each(ev.nodes_upserted, f"{prefix}nodes_upserted", node_errors)
    errors += _node_names(ev.nodes_removed, f"{prefix}nodes_removed")
    errors += _each(ev.gangs_upserted, f"{prefix}gangs_upserted", gang_errors)
    errors += _keys(ev.gangs_removed, f"{prefix}gangs_removed", "gang")
    errors += _keys(ev.pods_finished, f"{prefix}pods_finished", "pod")
    errors += _keys(ev.pods_deleted, f"{prefix}pods_deleted", "pod")
    errors += _each(ev.pods_bound, f"{prefix}pods_bound", lambda p, at: pod_errors(p, at, bound=True))
    return errors + _duplicates([f"{p.namespace}/{p.name}" for p in ev.pods_bound], f"{prefix}pods_bound")


def _duplicates(keys: Sequence[str], path: str) -> list[str]:
    """A pod twice in one list would be reserved twice in one transaction, which Redis refuses."""
    seen: set[str] = set()
    errors = []
    for i, key in enumerate(keys):
        if key in seen:
            errors.append(f"{path}[{i}]: pod {shown(key)} appears twice")
        seen.add(key)
    return errors


def step_request(req: scheduler_pb2.StepRequest) -> list[str]:
    errors = _time(req.now, "now")
    if req.HasField("events"):
        errors += cluster_events(req.events, "events.")
    errors += _each(req.pods_added, "pods_added", pod_errors)
    errors += _count(req.later, "later")
    total = len(req.pods_added) + sum(len(i.pods_added) + len(i.pods_finished) for i in req.later)
    if total > MAX_ITEMS:
        return errors + [f"later: {total} pods in all is too many (at most {MAX_ITEMS})"]
    for i, instant in enumerate(req.later if not errors else ()):
        at = f"later[{i}]"
        errors += _time(instant.now, f"{at}.now") + _each(instant.pods_added, f"{at}.pods_added", pod_errors)
        errors += _keys(instant.pods_finished, f"{at}.pods_finished", "pod")
    return errors


# --- the binder ------------------------------------------------------------------------------------


def assignments(items: Sequence[binder_pb2.Assignment], prefix: str = "") -> list[str]:
    """One batch: each pod once, on a named node."""
    errors = _count(items, f"{prefix}assignments", MAX_BIND_BATCH)
    if errors:
        return errors
    seen: set[str] = set()
    for i, a in enumerate(items):
        at = f"{prefix}assignments[{i}]"
        if not names.is_object_key(a.pod_key):
            errors.append(f"{at}: pod_key={shown(a.pod_key)} is not namespace/name with a valid namespace and name")
        if not names.is_dns_subdomain(a.node):
            errors.append(f"{at}: node={shown(a.node)} must be set to {names.SUBDOMAIN_RULE}")
        if a.gang and not names.is_object_key(a.gang):
            errors.append(f"{at}: gang={shown(a.gang)} is not namespace/name")
        errors += _text(a.uid, f"{at}.uid", MAX_ID)
        if a.pod_key in seen:
            errors.append(f"{at}: pod {a.pod_key[:MAX_KEY]} appears twice")
        seen.add(a.pod_key)
    return errors


def bind_request(req: binder_pb2.BindRequest) -> list[str]:
    return assignments(req.assignments) + _time(req.now, "now") + _text(req.trace_parent, "trace_parent", MAX_TRACE)


def bind_many_request(req: binder_pb2.BindManyRequest) -> list[str]:
    errors = _time(req.now, "now") + _count(req.batches, "batches", MAX_BIND_TOTAL)
    total = sum(len(b.assignments) for b in req.batches)
    if total > MAX_BIND_TOTAL:
        return errors + [f"batches: {total} assignments in all is too many (at most {MAX_BIND_TOTAL})"]
    for i, batch in enumerate(req.batches if not errors else ()):
        errors += assignments(batch.assignments, f"batches[{i}].")
        errors += _text(batch.trace_parent, f"batches[{i}].trace_parent", MAX_TRACE)
    return errors


def _pod_report(p: binder_pb2.PodReport, path: str) -> list[str]:
    errors = [] if names.is_object_key(p.pod_key) else [f"{path}.pod_key: {shown(p.pod_key)} is not namespace/name"]
    errors += _string_map(p.annotations, f"{path}.annotations")
    for field in ("unschedulable_message", "event_reason", "event_message"):
        errors += _text(getattr(p, field), f"{path}.{field}", MAX_TEXT)
    if p.nominated_node and not names.is_dns_subdomain(p.nominated_node):
        errors.append(f"{path}.nominated_node: {shown(p.nominated_node)} is not {names.SUBDOMAIN_RULE}")
    return errors


def _gang_report(g: binder_pb2.GangReport, path: str) -> list[str]:
    errors = [] if names.is_object_key(g.gang_key) else [f"{path}.gang_key: {shown(g.gang_key)} is not namespace/name"]
    if g.pod_key and not names.is_object_key(g.pod_key):
        errors.append(f"{path}.pod_key: {shown(g.pod_key)} is not namespace/name")
    for field in ("scheduled", "running", "succeeded", "failed"):
        if getattr(g, field) < 0:
            errors.append(f"{path}.{field}: {getattr(g, field)} is negative")
    errors += _time(g.schedule_start_time, f"{path}.schedule_start_time")
    for field in ("phase", "source", "event_reason"):
        errors += _text(getattr(g, field), f"{path}.{field}", MAX_KEY)
    return errors + _text(g.message, f"{path}.message", MAX_TEXT)


def report_request(req: binder_pb2.ReportRequest) -> list[str]:
    return _time(req.now, "now") + _each(req.pods, "pods", _pod_report) + _each(req.gangs, "gangs", _gang_report)


def _victim(v: binder_pb2.Victim, path: str) -> list[str]:
    errors = [] if names.is_object_key(v.pod_key) else [f"{path}.pod_key: {shown(v.pod_key)} is not namespace/name"]
    if not names.is_object_key(v.preemptor):
        errors.append(f"{path}.preemptor: {shown(v.preemptor)} is not the namespace/name of a gang")
    if v.node and not names.is_dns_subdomain(v.node):
        errors.append(f"{path}.node: {shown(v.node)} is not {names.SUBDOMAIN_RULE}")
    return errors + _text(v.uid, f"{path}.uid", MAX_ID) + _text(v.message, f"{path}.message", MAX_TEXT)


def evict_request(req: binder_pb2.EvictRequest) -> list[str]:
    return _time(req.now, "now") + _each(req.victims, "victims", _victim)
