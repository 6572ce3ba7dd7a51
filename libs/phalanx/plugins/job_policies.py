"""Score plugins for seed 001's per-job placement policies that look at the job's own pods:

- LeaderFirst: the job's leader (learner, master, launcher) goes to the least loaded node, GPU use weighing
  most; its workers go to the most loaded nodes, cpu use weighing most, leaving room for the next leaders.
- JobAffinity: a job's pods on as few nodes as possible (nodes holding its pods first, then nodes in the
  same topology domain, then the emptiest node, where most of the job still fits).
- JobAntiAffinity: a job's pods spread over nodes, then over topology domains.

A "job" is the pod's gang (snap.gang_pod_counts counts its pods placed so far, this round's included). A
pod without a gang is a job of one: the job terms are then zero everywhere and only the load terms decide.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from phalanx.framework.plugin import PodRequest
from phalanx.framework.snapshot import Snapshot
from phalanx.model import keys
from phalanx.model.gpu import gpu_milli
from phalanx.model.objects import PodInfo
from phalanx.plugins.gpu_share import device_columns

DEFAULT_TOPOLOGY_KEY = "topology.kubernetes.io/zone"

# Values that mark a job's leader, in the role keys that training operators set (case-insensitive).
_LEADER_VALUES = frozenset({"leader", "learner", "master", "launcher", "chief"})
_ROLE_KEYS = (keys.ROLE, "training.kubeflow.org/replica-type", "volcano.sh/task-spec")


def is_leader(pod: PodInfo) -> bool:
    """Whether the pod is its job's leader: phalanx.dev/role (annotation or label), else the role label
    Kubeflow's training operator (replica-type) or Volcano (task-spec) puts on the pod."""
    for key in _ROLE_KEYS:
        value = pod.annotations.get(key) or pod.labels.get(key)
        if value:
            return value.strip().lower() in _LEADER_VALUES
    return False


def _ratio(used: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """used / cap clipped to [0, 1]; a node without the resource counts as empty of it (0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.clip(np.where(cap > 0, used / np.maximum(cap, 1), 0.0), 0.0, 1.0)


def load_after(req: PodRequest, snap: Snapshot, candidates: np.ndarray) -> dict[str, np.ndarray]:
    """cpu, memory and GPU use (0..1) of each candidate after placing the pod; GPU over all the node's
    devices, shares included."""
    out: dict[str, np.ndarray] = {}
    for resource in ("cpu", "memory"):
        j = snap.column.get(resource)
        if j is None:
            out[resource] = np.zeros(len(candidates))
            continue
        used = snap.used[candidates, j] + req.pod.requests.get(resource, 0)
        out[resource] = _ratio(used.astype(np.float64), snap.cap[candidates, j].astype(np.float64))
    devices = device_columns(snap)
    if devices.size:
        used = snap.used[np.ix_(candidates, devices)].sum(axis=1) + gpu_milli(req.pod.requests)
        cap = snap.cap[np.ix_(candidates, devices)].sum(axis=1)
        out["gpu"] = _ratio(used.astype(np.float64), cap.astype(np.float64))
    else:
        out["gpu"] = np.zeros(len(candidates))
    return out


def _weighted(load: Mapping[str, np.ndarray], weights: Mapping[str, float]) -> np.ndarray:
    total = sum(weights.values())
    return sum(w * load[r] for r, w in weights.items()) / total  # type: ignore[return-value]


class LeaderFirst:
    name = "LeaderFirst"
    LEADER_WEIGHTS = {"gpu": 3.0, "cpu": 1.0, "memory": 1.0}
    WORKER_WEIGHTS = {"cpu": 3.0, "gpu": 1.0, "memory": 1.0}

    def score(self, req: PodRequest, snap: Snapshot, candidates: np.ndarray) -> np.ndarray:
        load = load_after(req, snap, candidates)
        if is_leader(req.pod):
            return (1.0 - _weighted(load, self.LEADER_WEIGHTS)) * 100.0
        return _weighted(load, self.WORKER_WEIGHTS) * 100.0


def topology_key(pod: PodInfo) -> str:
    return pod.annotations.get(keys.JOB_TOPOLOGY_KEY, "").strip() or DEFAULT_TOPOLOGY_KEY


def job_counts(req: PodRequest, snap: Snapshot, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the job's pods on each candidate node, the job's pods in each candidate's topology domain; 0 for a
    node without the domain label)."""
    if not req.pod.gang:
        zeros = np.zeros(len(candidates), dtype=np.int64)
        return zeros, zeros
    per_node = snap.gang_pod_counts(req.pod.gang)
    key = topology_key(req.pod)
    per_domain: dict[str, int] = {}
    for i in np.flatnonzero(per_node).tolist():
        domain = snap.nodes[i].labels.get(key)
        if domain is not None:
            per_domain[domain] = per_domain.get(domain, 0) + int(per_node[i])
    in_domain = np.array(
        [
            per_domain.get(snap.nodes[i].labels.get(key, ""), 0) if key in snap.nodes[i].labels else 0
            for i in candidates.tolist()
        ],
        dtype=np.int64,
    )
    return per_node[candidates], in_domain


def _mean_load(req: PodRequest, snap: Snapshot, candidates: np.ndarray) -> np.ndarray:
    load = load_after(req, snap, candidates)
    return (load["cpu"] + load["memory"] + load["gpu"]) / 3.0


def _free_share(snap: Snapshot) -> np.ndarray:
    """Each node's free share of its cpu, memory and GPUs (mean of the three it has), now."""
    parts = []
    for cols in ([snap.column[r]] for r in ("cpu", "memory") if r in snap.column):
        cap, used = snap.cap[:, cols].sum(axis=1), snap.used[:, cols].sum(axis=1)
        parts.append(1.0 - _ratio(used.astype(np.float64), cap.astype(np.float64)))
    devices = device_columns(snap)
    if devices.size:
        cap, used = snap.cap[:, devices].sum(axis=1), snap.used[:, devices].sum(axis=1)
        parts.append(np.where(cap > 0, 1.0 - _ratio(used.astype(np.float64), cap.astype(np.float64)), 0.0))
    return sum(parts) / len(parts) if parts else np.zeros(len(snap))  # type: ignore[return-value]


def domain_room(snap: Snapshot, key: str, candidates: np.ndarray) -> np.ndarray:
    """The free room (summed free shares) of each candidate's topology domain; a node without the label is a
    domain of its own."""
    free = _free_share(snap)
    room: dict[str, float] = {}
    for node, share in zip(snap.nodes, free.tolist()):
        domain = node.labels.get(key)
        if domain is not None:
            room[domain] = room.get(domain, 0.0) + share
    return np.array(
        [room[d] if (d := snap.nodes[i].labels.get(key)) is not None else free[i] for i in candidates.tolist()]
    )


class JobAffinity:
    name = "JobAffinity"

    def score(self, req: PodRequest, snap: Snapshot, candidates: np.ndarray) -> np.ndarray:
        on_node, in_domain = job_counts(req, snap, candidates)
        # Same node first, then same domain; a job's first pod picks the domain with the most room (where
        # the rest of the job is likeliest to fit), and in it the emptiest node.
        room = domain_room(snap, topology_key(req.pod), candidates)
        room_term = room / room.max() if room.max() > 0 else np.zeros(len(candidates))
        emptiness = 1.0 - _mean_load(req, snap, candidates)
        return 60.0 * (on_node > 0) + 25.0 * (in_domain > 0) + 10.0 * room_term + 5.0 * emptiness


class JobAntiAffinity:
    name = "JobAntiAffinity"

    def score(self, req: PodRequest, snap: Snapshot, candidates: np.ndarray) -> np.ndarray:
        on_node, in_domain = job_counts(req, snap, candidates)
        node_term = 1.0 - on_node / (on_node.max() + 1.0)
        domain_term = 1.0 - in_domain / (in_domain.max() + 1.0)
        return 60.0 * node_term + 30.0 * domain_term + 10.0 * (1.0 - _mean_load(req, snap, candidates))
