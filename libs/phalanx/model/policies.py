"""Basic (placement) policies: named score sets a job picks with an annotation, the profile's scores being
the "Default" one. Seed 001 (Arranger) lets each job choose how its pods are placed; here a policy is only
a different weighting of score plugins, so every policy runs the same filters and keeps gang semantics."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from phalanx.model import keys
from phalanx.model.objects import PodInfo

DEFAULT_POLICY = "Default"

# The policies a job may name. What each one weighs is the plugins' business, kept with them in
# phalanx.plugins.registry (BASIC_POLICY_SCORES), so this layer names no plugin.
BASIC_POLICIES: tuple[str, ...] = (
    DEFAULT_POLICY,
    "Gang",  # seed 001's name for "just all-or-nothing": the profile's placement
    "BinPack",
    "MinFragment",
    "LeaderFirst",
    "JobAffinity",
    "JobAntiAffinity",
)


def _canonical(value: str, names: Iterable[str], what: str) -> str:
    """The name among `names` that `value` is in any letter case; ValueError naming the known ones."""
    names = tuple(names)
    for name in names:
        if name.lower() == value.strip().lower():
            return name
    raise ValueError(f"unknown {what} {value!r} (known: {', '.join(names)})")


def check_basic_policy(value: str) -> str:
    return _canonical(value, BASIC_POLICIES, "basic policy")


def basic_policy_of(pod: PodInfo, default: str = DEFAULT_POLICY) -> str:
    """The pod's policy (its annotation, validated at intake), else `default`."""
    raw = pod.annotations.get(keys.BASIC_POLICY)
    if not raw:
        return default
    try:
        return check_basic_policy(raw)
    except ValueError:  # intake refuses such pods; a pod that reached us another way gets the default
        return default


# Job-queue policies: how a job is ordered among the waiting ones (the queue service's default, a job's
# annotation overriding it). Priority: by priority, then creation. DRF: among jobs of equal priority, the
# tenant holding the smallest dominant share first.
PRIORITY_QUEUE_POLICY = "Priority"
DRF_QUEUE_POLICY = "DRF"
JOB_QUEUE_POLICIES = (PRIORITY_QUEUE_POLICY, DRF_QUEUE_POLICY)


def check_job_queue_policy(value: str) -> str:
    return _canonical(value, JOB_QUEUE_POLICIES, "job-queue policy")


class _JobPod(Protocol):
    """A model PodInfo or a protobuf Pod: both have these."""

    @property
    def namespace(self) -> str: ...

    @property
    def annotations(self) -> Mapping[str, str]: ...


def job_ordering(pod: _JobPod) -> tuple[str, str]:
    """(the tenant whose share a DRF job counts against: phalanx.dev/queue (which intake sets from a Volcano
    PodGroup's spec.queue), else its namespace; the job's
    own job-queue policy as written, "" when it names none)."""
    return pod.annotations.get(keys.QUEUE_NAME) or pod.namespace, pod.annotations.get(keys.JOB_QUEUE_POLICY, "")


def with_gang_queue(pod: PodInfo, queue: str) -> None:
    """Its gang's queue (Volcano spec.queue) becomes the pod's tenant, unless the pod names one itself."""
    if queue and keys.QUEUE_NAME not in pod.annotations:
        pod.annotations = {**pod.annotations, keys.QUEUE_NAME: queue}


def is_drf(written: str, default: str) -> bool:
    """Whether a job whose policy annotation says `written` ("" for none) is ordered by DRF."""
    policy = written or default
    return policy.strip().lower() == DRF_QUEUE_POLICY.lower()
