"""Per-role minimums of a gang: Volcano's PodGroup `spec.minTaskMember` (role -> least pods of that role).

A pod's role is its task's name, `volcano.sh/task-spec` (annotation, else label, as Volcano reads it). A
gang with role minimums reaches its minimum only when, besides min_available, each role has at least its
minimum among the gang's counted pods (`phalanx.gang.manager`). As in Volcano (JobInfo.CheckTaskReady):
a role of 0 asks nothing, and when the roles' minimums add up to more than min_available none of them
applies, only min_available does.

Pure functions: no state, no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from phalanx.model.keys import VOLCANO_TASK_SPEC
from phalanx.model.objects import GangSpec, PodInfo

T = TypeVar("T")


def role_in(annotations: Mapping[str, str], labels: Mapping[str, str]) -> str:
    """The role a pod's metadata names: the annotation, else the label; "" when it names none."""
    return annotations.get(VOLCANO_TASK_SPEC) or labels.get(VOLCANO_TASK_SPEC) or ""


def pod_role(pod: PodInfo) -> str:
    return role_in(pod.annotations, pod.labels)


def role_minimums(spec: GangSpec) -> dict[str, int]:
    """The role minimums that apply to the gang, by role name: none when they add up to more than its
    min_available (Volcano then skips the per-role check), roles of 0 left out."""
    minimums = {role: count for role, count in sorted(spec.min_task_member.items()) if count > 0}
    if sum(minimums.values()) > spec.min_available:
        return {}
    return minimums


def role_counts(pods: Iterable[str], roles: Mapping[str, str]) -> Counter[str]:
    """How many of `pods` each role has; `roles` maps a pod to its role (a pod missing from it has none)."""
    return Counter(role for pod in pods if (role := roles.get(pod, "")))


def missing(minimums: Mapping[str, int], placed: Mapping[str, int]) -> dict[str, int]:
    """Role -> how many more of its pods it needs, in role-name order; roles at their minimum left out."""
    return {
        role: count - placed.get(role, 0) for role, count in sorted(minimums.items()) if placed.get(role, 0) < count
    }


def required_first(
    spec: GangSpec,
    items: Sequence[T],
    role_of: Callable[[T], str],
    placed: Mapping[str, int] | None = None,
) -> list[T]:
    """`items` (a gang's pods tried together) with the pods its role minimums need first: for each role in
    name order, its first pods up to what the role still lacks (its minimum less `placed`, the pods of
    that role the gang already counts), then every other item in its original order.

    A gang without role minimums (or with all of them met) keeps its order. Trying the required pods first
    means the pods a failure would cost are the surplus ones, which the gang can do without."""
    need = missing(role_minimums(spec), placed or {})
    if not need:
        return list(items)
    picked: dict[str, list[int]] = {role: [] for role in need}
    for i, item in enumerate(items):
        role = role_of(item)
        if role in need and len(picked[role]) < need[role]:
            picked[role].append(i)
    first = [i for role in need for i in picked[role]]
    taken = set(first)
    return [items[i] for i in first] + [item for i, item in enumerate(items) if i not in taken]
