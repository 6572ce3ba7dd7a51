"""The Kubernetes objects a PhalanxJob is made of, built from its spec: one pod per leader and worker (names
fixed by the job, so the controller can always create-if-absent), a headless Service giving the leader a
stable DNS name, and the Volcano PodGroup that makes the pods one gang.

The gang. A Volcano PodGroup (scheduling.volcano.sh/v1beta1), pods linked by `scheduling.k8s.io/group-name`,
with `minMember` = 1 + MinWorkersNum and `minTaskMember` = {leader: 1, worker: MinWorkersNum} over the pods'
`volcano.sh/task-spec`. Phalanx already reads this form (README "How a pod opts in"), and it is the one form
that can say the gang needs *the leader* and MinWorkersNum workers: with a plain count (minMember, a
Koordinator min-available) MinWorkersNum + 1 workers would satisfy the gang without a leader when a job has
more workers than its minimum. Volcano's gangs are also retried after a timeout rather than given up, which
suits a controller that keeps its pending pods. Pods beyond the minimum are placed as capacity frees (the
gang's default once-satisfied match policy), which is seed 001's "start at the minimum, add the rest".

Priority: seed 001's 1-10 becomes the pods' priorityClassName `<prefix><n>` (the chart and manifests ship
`phalanx-job-priority-1` .. `-10`); Phalanx's queue and preemption read the pod priority the API server's
admission fills in from the class. SchedulerPolicy: the annotations Phalanx reads (docs/job-policies.md).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from phalanx.jobs.api import API_VERSION, KIND, JobSpec, Role, pod_name
from phalanx.model.keys import (
    BASIC_POLICY,
    GROUP_VOLCANO,
    JOB_QUEUE_POLICY,
    ROLE,
    VOLCANO_GROUP_NAME,
    VOLCANO_TASK_SPEC,
)

JOB_LABEL = "phalanx.dev/job-name"  # every object of a job; the controller lists its pods by it
SET_LABEL = "phalanx.dev/replica-set"  # the leader's or the worker set's name
INDEX_LABEL = "phalanx.dev/replica-index"
RESTARTS_ANNOTATION = "phalanx.dev/restarts"  # how many times this pod's place had been restarted before it
LEADER_ROLE, WORKER_ROLE = "leader", "worker"  # the pods' task-spec and phalanx.dev/role

# What each container is told (workers learn the leader's address from the first).
ENV_LEADER_ADDRESS = "PHALANX_LEADER_ADDRESS"
ENV_JOB_NAME = "PHALANX_JOB_NAME"
ENV_REPLICA_SET = "PHALANX_REPLICA_SET"
ENV_REPLICA_INDEX = "PHALANX_REPLICA_INDEX"

VOLCANO_VERSION = "v1beta1"
DEFAULT_PRIORITY_CLASS_PREFIX = "phalanx-job-priority-"


def owner(job: Mapping[str, Any]) -> dict[str, Any]:
    meta = job["metadata"]
    # No blockOwnerDeletion: setting it needs update rights on the job's finalizers, which nothing uses.
    return {"apiVersion": API_VERSION, "kind": KIND, "name": meta["name"], "uid": meta["uid"], "controller": True}


def leader_address(job: str, namespace: str, spec: JobSpec) -> str:
    """The leader's DNS name: its hostname under the job's headless Service."""
    return f"{pod_name(job, spec.leader.name)}.{job}.{namespace}.svc"


def desired_pods(job: str, spec: JobSpec) -> list[tuple[str, Role, int]]:
    """(pod name, role, index) of every pod of the job, the leader first."""
    out = [(pod_name(job, spec.leader.name), spec.leader, 0)]
    for s in spec.worker_sets:
        out += [(pod_name(job, s.name, i), s, i) for i in range(s.counts)]
    return out


def pod(
    job: Mapping[str, Any],
    spec: JobSpec,
    role: Role,
    index: int,
    *,
    restarts: int,
    scheduler_name: str,
    priority_class_prefix: str = DEFAULT_PRIORITY_CLASS_PREFIX,
) -> dict[str, Any]:
    meta = job["metadata"]
    name, namespace = str(meta["name"]), str(meta["namespace"])
    template = copy.deepcopy(dict(role.template))
    tmeta = dict(template.get("metadata") or {})
    body = dict(template.get("spec") or {})
    kind = LEADER_ROLE if role.leader else WORKER_ROLE
    labels = {
        **(tmeta.get("labels") or {}),
        JOB_LABEL: name,
        SET_LABEL: role.name,
        INDEX_LABEL: str(index),
        ROLE: kind,
        VOLCANO_TASK_SPEC: kind,
    }
    annotations = {
        **(tmeta.get("annotations") or {}),
        VOLCANO_GROUP_NAME: name,
        VOLCANO_TASK_SPEC: kind,
        RESTARTS_ANNOTATION: str(restarts),
    }
    if spec.basic_policy:
        annotations[BASIC_POLICY] = spec.basic_policy
    if spec.job_queue_policy:
        annotations[JOB_QUEUE_POLICY] = spec.job_queue_policy
    pod_name_ = pod_name(name, role.name, None if role.leader else index)
    env = [
        {"name": ENV_LEADER_ADDRESS, "value": leader_address(name, namespace, spec)},
        {"name": ENV_JOB_NAME, "value": name},
        {"name": ENV_REPLICA_SET, "value": role.name},
        {"name": ENV_REPLICA_INDEX, "value": str(index)},
    ]
    ours = {e["name"] for e in env}
    for key in ("containers", "initContainers"):
        containers = []
        for c in body.get(key) or []:
            c = dict(c)
            c["env"] = [e for e in c.get("env") or [] if e.get("name") not in ours] + env
            containers.append(c)
        if containers:
            body[key] = containers
    body["volumes"] = list(body.get("volumes") or []) + [dict(v) for v in spec.volumes]
    body.setdefault("schedulerName", scheduler_name)
    body.setdefault("restartPolicy", "Never")
    body["priorityClassName"] = f"{priority_class_prefix}{spec.priority}"
    body["hostname"] = pod_name_
    body["subdomain"] = name  # the headless Service: <hostname>.<job>.<namespace>.svc resolves to the pod
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name_,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner(job)],
        },
        "spec": body,
    }


def service(job: Mapping[str, Any]) -> dict[str, Any]:
    """Headless, selecting the job's pods, publishing them before they are ready (a worker may resolve the
    leader while both start)."""
    meta = job["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": {JOB_LABEL: meta["name"]},
            "ownerReferences": [owner(job)],
        },
        "spec": {"clusterIP": "None", "selector": {JOB_LABEL: meta["name"]}, "publishNotReadyAddresses": True},
    }


def podgroup(job: Mapping[str, Any], spec: JobSpec) -> dict[str, Any]:
    meta = job["metadata"]
    return {
        "apiVersion": f"{GROUP_VOLCANO}/{VOLCANO_VERSION}",
        "kind": "PodGroup",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": {JOB_LABEL: meta["name"]},
            "ownerReferences": [owner(job)],
        },
        "spec": {
            "minMember": 1 + spec.min_workers,
            "minTaskMember": {LEADER_ROLE: 1, WORKER_ROLE: spec.min_workers},
        },
    }
