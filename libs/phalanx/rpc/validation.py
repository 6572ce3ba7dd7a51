"""What the three services accept in their requests, as one set of rules.

Each function returns a list of errors, each naming the field (`pods[3].namespace: ...`); an empty list
means the request may be applied. The servicers check a whole request before applying any of it, so a
refused request changes nothing (except the queue's Add, which refuses bad pods one by one).

The limits (phalanx.model.limits, the table the intake checks too) keep one request from costing unbounded
memory or time, and keep every value within what the code behind the services was written for: names that
split cleanly into "namespace/name", finite times, non-negative amounts. The checks of objects are in
phalanx.rpc.object_checks, those of single values in phalanx.rpc.value_checks; the request checks here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NoReturn

import grpc

from phalanx.intake import names
from phalanx.model.limits import (
    MAX_BIND_BATCH,
    MAX_BIND_TOTAL,
    MAX_ENTRIES,
    MAX_ID,
    MAX_ITEMS,
    MAX_KEY,
    MAX_TEXT,
    MAX_TRACE,
)
from phalanx.rpc.object_checks import gang_errors, node_errors, pod_errors
from phalanx.rpc.value_checks import (
    check_count,
    check_each,
    check_keys,
    check_node_names,
    check_resource_names,
    check_resources,
    check_string_map,
    check_text,
    check_time,
    shown,
)
from phalanx.v1 import binder_pb2, objects_pb2, queue_pb2, scheduler_pb2

MAX_ERRORS_SHOWN = 20  # errors in one INVALID_ARGUMENT message

_OUTCOMES = frozenset(queue_pb2.Outcome.values()) - {queue_pb2.OUTCOME_UNSPECIFIED}


class InvalidRequest(ValueError):
    """A request the service must refuse; `errors` name each bad field."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = list(errors)
        super().__init__(message(self.errors))


def message(errors: Sequence[str]) -> str:
    text = "; ".join(errors[:MAX_ERRORS_SHOWN])
    more = len(errors) - MAX_ERRORS_SHOWN
    return f"{text}; and {more} more" if more > 0 else text


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


# --- the queue -------------------------------------------------------------------------------------


def add_request(req: queue_pb2.AddRequest) -> list[str]:
    """What refuses a whole Add; its pods are checked one by one with pod_rejection."""
    return check_time(req.now, "now") + check_count(req.pods, "pods")


def pod_rejection(pod: objects_pb2.Pod, index: int, path: str = "pods") -> str:
    """Why Add refuses this pod ("" when it takes it), as AddResponse.rejected reports it."""
    return "; ".join(pod_errors(pod, f"{path}[{index}]"))


def done_request(req: queue_pb2.DoneRequest, prefix: str = "") -> list[str]:
    errors = check_time(req.now, f"{prefix}now") + check_count(req.results, f"{prefix}results")
    for i, res in enumerate(req.results if not errors else ()):
        if res.outcome not in _OUTCOMES:
            errors.append(f"{prefix}results[{i}].outcome: unknown value {res.outcome}")
        errors += pod_errors(res.pod, f"{prefix}results[{i}].pod")
        errors += check_text(res.reason, f"{prefix}results[{i}].reason", MAX_TEXT)
        if res.HasField("hint"):
            errors += _retry_hint(res.hint, f"{prefix}results[{i}].hint")
    errors += check_keys(req.activate_gangs, f"{prefix}activate_gangs", "gang")
    errors += check_keys(req.failed_gangs, f"{prefix}failed_gangs", "gang")
    errors += _shares(req.tenant_shares, f"{prefix}tenant_shares")
    for resource, amount in req.share_capacity.items():
        if resource not in ("cpu", "memory", "gpu"):
            errors.append(f"{prefix}share_capacity: unknown resource {shown(resource)} (known: cpu, memory, gpu)")
        elif amount < 0:
            errors.append(f"{prefix}share_capacity[{resource}]: {amount} is negative")
    return errors


def _shares(shares: Mapping[str, float], path: str) -> list[str]:
    """Tenants' dominant shares: named, and a finite fraction from 0 to 1."""
    errors = check_count(shares, path, MAX_ENTRIES)
    for tenant, share in list(shares.items())[: MAX_ENTRIES if not errors else 0]:
        if not tenant or len(tenant) > MAX_ID:
            errors.append(f"{path}: tenant name {shown(tenant)} must have 1 to {MAX_ID} characters")
        elif not (math.isfinite(share) and 0.0 <= share <= 1.0):
            errors.append(f"{path}[{tenant}]: {share!r} is not a share from 0 to 1")
    return errors


def pop_request(req: queue_pb2.PopRequest) -> list[str]:
    """Everything a Pop carries except its `add` pods, which are refused one by one as in Add."""
    errors = check_time(req.now, "now") + check_time(req.wait_seconds, "wait_seconds")
    if req.max_pods < 0:
        errors.append(f"max_pods: {req.max_pods} is negative")
    if req.HasField("done"):
        errors += done_request(req.done, "done.")
    errors += check_keys(req.remove, "remove", "pod") + check_count(req.add, "add")
    for field in ("consumer", "consumer_incarnation"):
        errors += check_text(getattr(req, field, ""), field, MAX_ID)
    errors += _freed(req.freed, "freed")
    return errors


def remove_request(req: queue_pb2.RemoveRequest) -> list[str]:
    # Unknown keys are fine (nothing to forget); only the size is bounded.
    return check_count(req.pod_keys, "pod_keys") or [
        f"pod_keys[{i}]: {len(k)} characters is too long" for i, k in enumerate(req.pod_keys) if len(k) > MAX_KEY
    ]


def move_all_request(req: queue_pb2.MoveAllRequest) -> list[str]:
    return check_time(req.now, "now") + check_text(req.event, "event", MAX_KEY) + _freed(req.freed, "freed")


def _retry_hint(h: queue_pb2.RetryHint, path: str) -> list[str]:
    errors = check_resources(h.needs, f"{path}.needs") + check_resource_names(h.insufficient, f"{path}.insufficient")
    errors += check_node_names(h.nodes, f"{path}.nodes") + check_node_names(list(h.slots), f"{path}.slots")
    if h.pods < 0:
        errors.append(f"{path}.pods: {h.pods} is negative")
    return errors + [f"{path}.slots[{shown(n)}]: {k} is negative" for n, k in h.slots.items() if k < 0]


def _freed(items: Sequence[queue_pb2.FreedCapacity], path: str) -> list[str]:
    errors = check_count(items, path)
    for i, f in enumerate(items if not errors else ()):
        at = f"{path}[{i}]"
        if f.node and not names.is_dns_subdomain(f.node):
            errors.append(f"{at}.node: {shown(f.node)} is not {names.SUBDOMAIN_RULE}")
        errors += check_resource_names(f.resources, f"{at}.resources") + check_resources(f.free, f"{at}.free")
    return errors


def stats_request(req: queue_pb2.StatsRequest) -> list[str]:
    return check_time(req.now, "now")


# --- the scheduler ---------------------------------------------------------------------------------


def cluster_events(ev: scheduler_pb2.ClusterEvents, prefix: str = "") -> list[str]:
    errors = check_time(ev.now, f"{prefix}now")
    errors += check_each(ev.nodes_upserted, f"{prefix}nodes_upserted", node_errors)
    errors += check_node_names(ev.nodes_removed, f"{prefix}nodes_removed")
    errors += check_each(ev.gangs_upserted, f"{prefix}gangs_upserted", gang_errors)
    errors += check_keys(ev.gangs_removed, f"{prefix}gangs_removed", "gang")
    errors += check_keys(ev.pods_finished, f"{prefix}pods_finished", "pod")
    errors += check_keys(ev.pods_deleted, f"{prefix}pods_deleted", "pod")
    errors += check_each(ev.pods_bound, f"{prefix}pods_bound", lambda p, at: pod_errors(p, at, bound=True))
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
    errors = check_time(req.now, "now")
    if req.HasField("events"):
        errors += cluster_events(req.events, "events.")
    errors += check_each(req.pods_added, "pods_added", pod_errors)
    errors += check_count(req.later, "later")
    total = len(req.pods_added) + sum(len(i.pods_added) + len(i.pods_finished) for i in req.later)
    if total > MAX_ITEMS:
        return errors + [f"later: {total} pods in all is too many (at most {MAX_ITEMS})"]
    for i, instant in enumerate(req.later if not errors else ()):
        at = f"later[{i}]"
        errors += check_time(instant.now, f"{at}.now") + check_each(instant.pods_added, f"{at}.pods_added", pod_errors)
        errors += check_keys(instant.pods_finished, f"{at}.pods_finished", "pod")
    return errors


# --- the binder ------------------------------------------------------------------------------------


def assignments(items: Sequence[binder_pb2.Assignment], prefix: str = "") -> list[str]:
    """One batch: each pod once, on a named node."""
    errors = check_count(items, f"{prefix}assignments", MAX_BIND_BATCH)
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
        errors += check_text(a.uid, f"{at}.uid", MAX_ID)
        if a.pod_key in seen:
            errors.append(f"{at}: pod {a.pod_key[:MAX_KEY]} appears twice")
        seen.add(a.pod_key)
    return errors


def bind_request(req: binder_pb2.BindRequest) -> list[str]:
    return (
        assignments(req.assignments)
        + check_time(req.now, "now")
        + check_text(req.trace_parent, "trace_parent", MAX_TRACE)
    )


def bind_many_request(req: binder_pb2.BindManyRequest) -> list[str]:
    errors = check_time(req.now, "now") + check_count(req.batches, "batches", MAX_BIND_TOTAL)
    total = sum(len(b.assignments) for b in req.batches)
    if total > MAX_BIND_TOTAL:
        return errors + [f"batches: {total} assignments in all is too many (at most {MAX_BIND_TOTAL})"]
    for i, batch in enumerate(req.batches if not errors else ()):
        errors += assignments(batch.assignments, f"batches[{i}].")
        errors += check_text(batch.trace_parent, f"batches[{i}].trace_parent", MAX_TRACE)
    return errors


def _pod_report(p: binder_pb2.PodReport, path: str) -> list[str]:
    errors = [] if names.is_object_key(p.pod_key) else [f"{path}.pod_key: {shown(p.pod_key)} is not namespace/name"]
    errors += check_string_map(p.annotations, f"{path}.annotations")
    for field in ("unschedulable_message", "event_reason", "event_message"):
        errors += check_text(getattr(p, field), f"{path}.{field}", MAX_TEXT)
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
    errors += check_time(g.schedule_start_time, f"{path}.schedule_start_time")
    for field in ("phase", "source", "event_reason"):
        errors += check_text(getattr(g, field), f"{path}.{field}", MAX_KEY)
    return errors + check_text(g.message, f"{path}.message", MAX_TEXT)


def report_request(req: binder_pb2.ReportRequest) -> list[str]:
    return (
        check_time(req.now, "now")
        + check_each(req.pods, "pods", _pod_report)
        + check_each(req.gangs, "gangs", _gang_report)
    )


def _victim(v: binder_pb2.Victim, path: str) -> list[str]:
    errors = [] if names.is_object_key(v.pod_key) else [f"{path}.pod_key: {shown(v.pod_key)} is not namespace/name"]
    if not names.is_object_key(v.preemptor):
        errors.append(f"{path}.preemptor: {shown(v.preemptor)} is not the namespace/name of a gang")
    if v.node and not names.is_dns_subdomain(v.node):
        errors.append(f"{path}.node: {shown(v.node)} is not {names.SUBDOMAIN_RULE}")
    return errors + check_text(v.uid, f"{path}.uid", MAX_ID) + check_text(v.message, f"{path}.message", MAX_TEXT)


def evict_request(req: binder_pb2.EvictRequest) -> list[str]:
    return check_time(req.now, "now") + check_each(req.victims, "victims", _victim)
