"""Fluent builders for Kubernetes objects as plain camelCase dicts, the form YAML and raw JSON give.

    make_pod("w0").annotation(KOORD_NAME, "train").gpu(1).build()
    make_node("n1").cpu("8").memory("32Gi").gpu(4).taint("gpu", effect="NoSchedule").build()
    make_podgroup("train").min_member(4).build()
    make_configmap("gpu-pg").data("minAvailable", "5").build()

Every builder has `set("spec.some.path", value)` to write anything, including values the API server
would refuse, and `build()` returns a fresh deep copy so one builder can produce several objects.

Tests that start after intake build the model objects it produces (milli-units) with `model_node`,
`model_pod` and `gang_spec`:

    model_node("n1", gpus=8)            model_pod("w0", "train", gpus=1)            gang_spec("train", 4)
"""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any, Self

from phalanx.model.objects import GangMode, GangSpec, NodeInfo, Placement, PodInfo, Resources, Taint

QuantityLike = str | int | float
GPU = "nvidia.com/gpu"
GIB = 2**30 * 1000  # one GiB of memory in milli-units


class _Builder:
    def __init__(self, obj: dict[str, Any]) -> None:
        self._obj = obj

    def set(self, path: str, value: Any) -> Self:
        """Write `value` at a dotted path ("spec.priority"), creating the mappings on the way."""
        *parents, last = path.split(".")
        target = self._obj
        for part in parents:
            target = target.setdefault(part, {})
        target[last] = value
        return self

    def namespace(self, namespace: str) -> Self:
        self._obj["metadata"]["namespace"] = namespace
        return self

    def label(self, key: str, value: Any) -> Self:
        self._obj["metadata"].setdefault("labels", {})[key] = value
        return self

    def annotation(self, key: str, value: Any) -> Self:
        self._obj["metadata"].setdefault("annotations", {})[key] = value
        return self

    def created(self, timestamp: str | datetime) -> Self:
        self._obj["metadata"]["creationTimestamp"] = timestamp
        return self

    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)


class PodBuilder(_Builder):
    def __init__(self, name: str, namespace: str) -> None:
        super().__init__(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"containers": []},
            }
        )

    @property
    def _spec(self) -> dict[str, Any]:
        return self._obj["spec"]

    def uid(self, uid: str) -> Self:
        self._obj["metadata"]["uid"] = uid
        return self

    def priority(self, priority: Any) -> Self:
        self._spec["priority"] = priority
        return self

    def scheduler(self, name: str) -> Self:
        self._spec["schedulerName"] = name
        return self

    def node_name(self, node: str) -> Self:
        self._spec["nodeName"] = node
        return self

    def container(
        self,
        requests: dict[str, QuantityLike] | None = None,
        limits: dict[str, QuantityLike] | None = None,
    ) -> Self:
        self._spec["containers"].append(_container(f"c{len(self._spec['containers'])}", requests, limits))
        return self

    def init_container(
        self,
        requests: dict[str, QuantityLike] | None = None,
        limits: dict[str, QuantityLike] | None = None,
        *,
        sidecar: bool = False,
    ) -> Self:
        inits = self._spec.setdefault("initContainers", [])
        container = _container(f"init{len(inits)}", requests, limits)
        if sidecar:
            container["restartPolicy"] = "Always"
        inits.append(container)
        return self

    def request(self, resource: str, quantity: QuantityLike) -> Self:
        """Add to the last container's requests (creating a container when there is none)."""
        self._last_container()["resources"].setdefault("requests", {})[resource] = quantity
        return self

    def limit(self, resource: str, quantity: QuantityLike) -> Self:
        self._last_container()["resources"].setdefault("limits", {})[resource] = quantity
        return self

    def cpu(self, quantity: QuantityLike) -> Self:
        return self.request("cpu", quantity)

    def memory(self, quantity: QuantityLike) -> Self:
        return self.request("memory", quantity)

    def gpu(self, count: QuantityLike) -> Self:
        """GPUs as limits only, the way GPU pods are usually written (requests default to limits)."""
        return self.limit("nvidia.com/gpu", count)

    def overhead(self, resource: str, quantity: QuantityLike) -> Self:
        self._spec.setdefault("overhead", {})[resource] = quantity
        return self

    def node_selector(self, key: str, value: str) -> Self:
        self._spec.setdefault("nodeSelector", {})[key] = value
        return self

    def toleration(
        self, key: str = "", operator: str | None = None, value: str | None = None, effect: str | None = None
    ) -> Self:
        item = {
            name: v
            for name, v in (("key", key), ("operator", operator), ("value", value), ("effect", effect))
            if v is not None
        }
        self._spec.setdefault("tolerations", []).append(item)
        return self

    def affinity_term(self, *expressions: dict[str, Any], fields: list[dict[str, Any]] | None = None) -> Self:
        """Add one required nodeSelectorTerm; build its requirements with `requirement(...)`."""
        required = (
            self._spec.setdefault("affinity", {})
            .setdefault("nodeAffinity", {})
            .setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
        )
        term: dict[str, Any] = {}
        if expressions:
            term["matchExpressions"] = list(expressions)
        if fields:
            term["matchFields"] = fields
        required.setdefault("nodeSelectorTerms", []).append(term)
        return self

    def _last_container(self) -> dict[str, Any]:
        if not self._spec["containers"]:
            self.container()
        return self._spec["containers"][-1]


class NodeBuilder(_Builder):
    def __init__(self, name: str) -> None:
        super().__init__(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {}, "status": {"allocatable": {}}}
        )

    def resource(self, name: str, quantity: QuantityLike) -> Self:
        self._obj["status"].setdefault("allocatable", {})[name] = quantity
        return self

    def cpu(self, quantity: QuantityLike) -> Self:
        return self.resource("cpu", quantity)

    def memory(self, quantity: QuantityLike) -> Self:
        return self.resource("memory", quantity)

    def gpu(self, count: QuantityLike) -> Self:
        return self.resource("nvidia.com/gpu", count)

    def capacity_only(self) -> Self:
        """Move allocatable to status.capacity, as a hand-written node without allocatable looks."""
        status = self._obj["status"]
        status["capacity"] = status.pop("allocatable", {})
        return self

    def taint(self, key: str, value: str | None = None, effect: str | None = "NoSchedule") -> Self:
        item = {name: v for name, v in (("key", key), ("value", value), ("effect", effect)) if v is not None}
        self._obj["spec"].setdefault("taints", []).append(item)
        return self

    def unschedulable(self, value: Any = True) -> Self:
        self._obj["spec"]["unschedulable"] = value
        return self


class PodGroupBuilder(_Builder):
    def __init__(self, name: str, namespace: str, api_version: str) -> None:
        super().__init__(
            {
                "apiVersion": api_version,
                "kind": "PodGroup",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {},
            }
        )

    def min_member(self, value: Any) -> Self:
        self._obj["spec"]["minMember"] = value
        return self

    def min_resource(self, name: str, quantity: QuantityLike) -> Self:
        self._obj["spec"].setdefault("minResources", {})[name] = quantity
        return self

    def timeout(self, seconds: Any) -> Self:
        self._obj["spec"]["scheduleTimeoutSeconds"] = seconds
        return self


class ConfigMapBuilder(_Builder):
    def __init__(self, name: str, namespace: str) -> None:
        super().__init__(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": {}}
        )

    def data(self, key: str, value: Any) -> Self:
        self._obj["data"][key] = value
        return self


def make_pod(name: str, namespace: str = "default") -> PodBuilder:
    return PodBuilder(name, namespace)


def make_node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def make_podgroup(
    name: str, namespace: str = "default", *, api_version: str = "scheduling.x-k8s.io/v1alpha1"
) -> PodGroupBuilder:
    return PodGroupBuilder(name, namespace, api_version)


def make_configmap(name: str, namespace: str = "default") -> ConfigMapBuilder:
    return ConfigMapBuilder(name, namespace)


def requirement(key: str, operator: str, *values: Any) -> dict[str, Any]:
    """One matchExpressions/matchFields entry; values omitted when none are given."""
    item: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        item["values"] = list(values)
    return item


def _container(
    name: str, requests: dict[str, QuantityLike] | None, limits: dict[str, QuantityLike] | None
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = dict(requests)
    if limits:
        resources["limits"] = dict(limits)
    return {"name": name, "image": "busybox", "resources": resources}


# -- model objects, as intake produces them -------------------------------------------------------------------


def model_node(
    name: str,
    *,
    gpus: int = 0,
    cpu: float = 64,
    memory_gib: float = 256,
    pods: int = 110,
    labels: dict[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
) -> NodeInfo:
    """A node of `cpu` cores, `memory_gib` GiB, `pods` pod slots and `gpus` whole GPUs (0 leaves a resource
    out), labelled with its hostname."""
    allocatable = _milli_units(cpu=cpu, memory_gib=memory_gib, pods=pods, gpus=gpus)
    return NodeInfo(name, allocatable, {"kubernetes.io/hostname": name, **(labels or {})}, taints)


def model_pod(
    name: str,
    gang: str = "",
    *,
    gpus: int = 0,
    cpu: float = 1,
    memory_gib: float = 0,
    pods: int = 1,
    requests: Resources | None = None,
    ns: str = "default",
    created: float = 0.0,
    priority: int = 0,
    placement: Placement | None = None,
) -> PodInfo:
    """A pod of gang `ns/gang` (none when empty) asking `cpu` cores, `memory_gib` GiB, `pods` pod slots and
    `gpus` whole GPUs (0 asks none of it), and `requests` in milli-units besides (they win for a resource named
    in both). Its uid is its name, and its gang is taken to be as old as the pod."""
    asked = {**_milli_units(cpu=cpu, memory_gib=memory_gib, pods=pods, gpus=gpus), **(requests or {})}
    return PodInfo(
        ns,
        name,
        uid=name,
        priority=priority,
        created_at=created,
        requests=asked,
        placement=placement or Placement(),
        gang=f"{ns}/{gang}" if gang else "",
        gang_created_at=created,
    )


def gang_spec(
    name: str,
    min_available: int,
    total: int | None = None,
    mode: GangMode = GangMode.STRICT,
    wait: float | None = 20.0,
    groups: tuple[str, ...] = (),
    ns: str = "default",
    *,
    source: str = "",
    invalid: str = "",
) -> GangSpec:
    """A gang of `total` pods (`min_available` when not given) waiting `wait` seconds (None: the scheduler's
    default)."""
    return GangSpec(ns, name, min_available, total or min_available, mode, groups, wait, source=source, invalid=invalid)


def _milli_units(*, cpu: float, memory_gib: float, pods: int, gpus: int) -> Resources:
    amounts = {"cpu": round(cpu * 1000), "memory": round(memory_gib * GIB), "pods": pods * 1000, GPU: gpus * 1000}
    return {resource: amount for resource, amount in amounts.items() if amount}
