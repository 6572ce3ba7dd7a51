"""PhalanxJob (`phalanx.dev/v1alpha1`): seed 001's TYJob under Phalanx's API group, its spec fields under
the seed's own names, so a TYJob manifest becomes a PhalanxJob by changing apiVersion and kind.

The CRD's OpenAPI schema (deploy/crds/phalanx.dev_phalanxjobs.yaml) carries the seed's defaults, minimums
and enums; `parse_spec` checks the same again (and what a schema cannot: unique names, a minimum within the
worker count, pod names that fit a hostname) and applies the defaults, so a job created where the CRD's
schema was not applied (an older CRD, a test) is read the same way. Every error names its field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from phalanx.model.policies import check_basic_policy, check_job_queue_policy

GROUP = "phalanx.dev"
VERSION = "v1alpha1"
KIND = "PhalanxJob"
PLURAL = "phalanxjobs"
API_VERSION = f"{GROUP}/{VERSION}"

# The seed's kubebuilder markers.
DEFAULT_RESTART_LIMIT = 3
DEFAULT_MIN_WORKERS = 1
DEFAULT_PRIORITY = 5
MIN_PRIORITY, MAX_PRIORITY = 1, 10
DEFAULT_COUNTS = 1


class Stage(StrEnum):
    """The seed's job stages (the controller's)."""

    PENDING = "Pending"
    STARTING = "Starting"
    RUNNING = "Running"
    RESCHEDULING = "Rescheduling"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


FINISHED = frozenset({Stage.SUCCEEDED, Stage.FAILED})


class ScheduleState(StrEnum):
    """The seed's scheduling states; here computed from where the job's pods are bound."""

    UNSCHEDULED = "Unscheduled"
    SCHEDULED_SUCCEED = "ScheduledSucceed"
    SCHEDULED_FAILED = "ScheduledFailed"
    SCHEDULED_PARTLY = "ScheduledPartly"


class CleanPodPolicy(StrEnum):
    RUNNING = "Running"  # delete the pods still running (or pending) when the job ends
    ALL = "All"
    NONE = "None"


# The seed's enums, in its spelling (the CRD's enum); the controller also reads them in any letter case.
SEED_BASIC_POLICIES = ("Gang", "BinPack", "LeaderFirst", "MinFragment", "JobAffinity", "JobAntiAffinity")
SEED_JOB_QUEUE_POLICIES = ("Priority", "DRF")

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
HOSTNAME_MAX = 63


class JobSpecError(ValueError):
    """A spec the controller cannot run: `field` is its path, e.g. spec.workerSets[1].counts."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class Role:
    name: str  # the seed's Leader.Name / WorkerSet.Name
    template: Mapping[str, Any]  # a PodTemplateSpec
    counts: int
    leader: bool


@dataclass(frozen=True)
class JobSpec:
    restart_limit: int
    volumes: tuple[Mapping[str, Any], ...]
    leader: Role
    worker_sets: tuple[Role, ...]
    clean_pod_policy: CleanPodPolicy
    terminating: bool
    min_workers: int
    priority: int
    basic_policy: str | None  # None: the scheduler profile's default
    job_queue_policy: str | None  # None: the queue's default

    @property
    def workers(self) -> int:
        return sum(s.counts for s in self.worker_sets)


def _int(spec: Mapping[str, Any], key: str, default: int, where: str, *, low: int, high: int | None = None) -> int:
    value = spec.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int):
        raise JobSpecError(where, f"{value!r} is not an integer")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise JobSpecError(where, f"{value} must be {bound}")
    return value


def _template(role: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    template = role.get("template")
    if not isinstance(template, Mapping):
        raise JobSpecError(f"{where}.template", "required (a pod template)")
    pod = template.get("spec")
    if not isinstance(pod, Mapping) or not isinstance(pod.get("containers"), list) or not pod["containers"]:
        raise JobSpecError(f"{where}.template.spec.containers", "required (at least one container)")
    if (pod.get("restartPolicy") or "Never") == "Always":
        # The kubelet would restart a finished leader forever: the job could never succeed.
        raise JobSpecError(f"{where}.template.spec.restartPolicy", "Always is not allowed (Never or OnFailure)")
    if pod.get("priorityClassName"):
        raise JobSpecError(f"{where}.template.spec.priorityClassName", "not allowed: spec.priority sets it")
    return template


def _name(role: Mapping[str, Any], where: str) -> str:
    name = role.get("name")
    if not isinstance(name, str) or not name:
        raise JobSpecError(f"{where}.name", "required")
    if not _DNS_LABEL.match(name):
        raise JobSpecError(f"{where}.name", f"{name!r} is not a DNS label (lower-case letters, digits and '-')")
    return name


def parse_spec(job: Mapping[str, Any]) -> JobSpec:
    """The job's spec with the seed's defaults applied; JobSpecError names the first field it cannot run."""
    job_name = str((job.get("metadata") or {}).get("name") or "")
    spec = job.get("spec")
    if not isinstance(spec, Mapping):
        raise JobSpecError("spec", "required")
    leader_raw = spec.get("leader")
    if not isinstance(leader_raw, Mapping):
        raise JobSpecError("spec.leader", "required")
    leader = Role(_name(leader_raw, "spec.leader"), _template(leader_raw, "spec.leader"), 1, True)
    sets_raw = spec.get("workerSets")
    if not isinstance(sets_raw, list) or not sets_raw:
        raise JobSpecError("spec.workerSets", "required (at least one worker set)")
    sets: list[Role] = []
    seen = {leader.name: "spec.leader.name"}
    for i, raw in enumerate(sets_raw):
        where = f"spec.workerSets[{i}]"
        if not isinstance(raw, Mapping):
            raise JobSpecError(where, "must be an object")
        name = _name(raw, where)
        if name in seen:
            raise JobSpecError(f"{where}.name", f"{name!r} is also {seen[name]}")
        seen[name] = f"{where}.name"
        counts = _int(raw, "counts", DEFAULT_COUNTS, f"{where}.counts", low=1)
        sets.append(Role(name, _template(raw, where), counts, False))
        longest = pod_name(job_name, name, counts - 1)
        if len(longest) > HOSTNAME_MAX:
            raise JobSpecError(f"{where}.name", f"pod name {longest!r} is longer than {HOSTNAME_MAX} characters")
    if len(pod_name(job_name, leader.name)) > HOSTNAME_MAX:
        raise JobSpecError("spec.leader.name", f"pod name {pod_name(job_name, leader.name)!r} is too long")
    leader_pod = pod_name(job_name, leader.name)
    for i, s in enumerate(sets):
        if any(pod_name(job_name, s.name, k) == leader_pod for k in range(s.counts)):
            raise JobSpecError(f"spec.workerSets[{i}].name", f"a worker would be named {leader_pod!r}, as the leader")
    total = sum(s.counts for s in sets)
    min_workers = _int(spec, "minWorkersNum", DEFAULT_MIN_WORKERS, "spec.minWorkersNum", low=0, high=total)
    policy = spec.get("cleanPodPolicy") or CleanPodPolicy.ALL.value
    try:
        clean = next(p for p in CleanPodPolicy if p.value.lower() == str(policy).lower())
    except StopIteration:
        known = ", ".join(p.value for p in CleanPodPolicy)
        raise JobSpecError("spec.cleanPodPolicy", f"unknown {policy!r} (known: {known})") from None
    terminating = spec.get("terminating", False)
    if not isinstance(terminating, bool):
        raise JobSpecError("spec.terminating", f"{terminating!r} is not true or false")
    volumes = spec.get("volumes") or []
    if not isinstance(volumes, list) or not all(isinstance(v, Mapping) and v.get("name") for v in volumes):
        raise JobSpecError("spec.volumes", "must be a list of volumes, each with a name")
    policies = spec.get("schedulerPolicy") or {}
    if not isinstance(policies, Mapping):
        raise JobSpecError("spec.schedulerPolicy", "must be an object")
    basic = _policy(policies, "basicPolicy", check_basic_policy)
    queue = _policy(policies, "jobQueuePolicy", check_job_queue_policy)
    return JobSpec(
        restart_limit=_int(spec, "restartLimit", DEFAULT_RESTART_LIMIT, "spec.restartLimit", low=0),
        volumes=tuple(volumes),
        leader=leader,
        worker_sets=tuple(sets),
        clean_pod_policy=clean,
        terminating=terminating,
        min_workers=min_workers,
        priority=_int(spec, "priority", DEFAULT_PRIORITY, "spec.priority", low=MIN_PRIORITY, high=MAX_PRIORITY),
        basic_policy=basic,
        job_queue_policy=queue,
    )


def _policy(policies: Mapping[str, Any], key: str, check: Any) -> str | None:
    raw = policies.get(key)
    if raw in (None, ""):
        return None
    try:
        return str(check(str(raw)))
    except ValueError as exc:
        raise JobSpecError(f"spec.schedulerPolicy.{key}", str(exc)) from None


def pod_name(job: str, role: str, index: int | None = None) -> str:
    """Deterministic: the same pod of the same job always has the same name, so creating it twice is a 409."""
    return f"{job}-{role}" if index is None else f"{job}-{role}-{index}"
