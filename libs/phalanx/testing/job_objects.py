"""The objects the job-controller tests create: Nodes kwok manages, and Kubeflow PyTorchJobs.

A node annotated KWOK_NODE_ANNOTATION is one kwok plays the kubelet of (phalanx.testing.job_controllers.Kwok);
a pod annotated SUCCEED_AFTER (a Go duration) turns Succeeded that long after it runs. PyTorchJobs are
training-operator's (phalanx.testing.job_controllers.TrainingOperator), created through CustomObjectsApi with
PYTORCHJOB's group and version.
"""

from __future__ import annotations

from typing import Any

KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
SUCCEED_AFTER = "phalanx.test/succeed-after"
GPU = "nvidia.com/gpu"
# group, version for CustomObjectsApi; plural "pytorchjobs"
PYTORCHJOB = ("kubeflow.org", "v1")


def fake_node(name: str, *, gpus: int = 0, cpu: str = "32", memory: str = "256Gi") -> dict[str, Any]:
    """A Node kwok manages. Its capacity is in the object it is created with, as a kubelet registers a node,
    so kwok's first look at it already has the GPUs (node-initialize keeps what is there)."""
    resources = {"cpu": cpu, "memory": memory, "pods": "110", GPU: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "type": "kwok"},
            "annotations": {KWOK_NODE_ANNOTATION[0]: KWOK_NODE_ANNOTATION[1]},
        },
        "status": {"capacity": resources, "allocatable": resources},
    }


def pytorchjob(
    name: str,
    *,
    workers: int = 3,
    gpus: int = 1,
    succeed_after: str | None = "3s",
    scheduler_name: str | None = None,
    priority_class: str | None = None,
    schedule_timeout_seconds: int | None = None,
    clean_pod_policy: str = "None",
) -> dict[str, Any]:
    """A PyTorchJob of one master and `workers` workers, `gpus` GPUs each; every pod Succeeds `succeed_after`
    after it runs (None: runs until deleted). `scheduler_name`: the pods' schedulerName (default: the
    operator's --gang-scheduler-name). `schedule_timeout_seconds`: runPolicy.schedulingPolicy's, which the
    operator copies into its PodGroup."""

    def replica(count: int) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "containers": [
                {
                    "name": "pytorch",  # the container name the operator looks for
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "64Mi", GPU: str(gpus)},
                        "limits": {GPU: str(gpus)},
                    },
                }
            ]
        }
        if scheduler_name:
            spec["schedulerName"] = scheduler_name
        if priority_class:
            spec["priorityClassName"] = priority_class
        annotations = {SUCCEED_AFTER: succeed_after} if succeed_after else {}
        return {
            "replicas": count,
            "restartPolicy": "OnFailure",
            "template": {"metadata": {"annotations": annotations}, "spec": spec},
        }

    run_policy: dict[str, Any] = {"cleanPodPolicy": clean_pod_policy}
    if schedule_timeout_seconds is not None:
        run_policy["schedulingPolicy"] = {"scheduleTimeoutSeconds": schedule_timeout_seconds}
    specs = {"Master": replica(1)}
    if workers:
        specs["Worker"] = replica(workers)
    return {
        "apiVersion": "/".join(PYTORCHJOB),
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {"runPolicy": run_policy, "pytorchReplicaSpecs": specs},
    }


def job_conditions(job: dict[str, Any]) -> dict[str, str]:
    """A PyTorchJob's condition types -> status ("Created", "Running", "Succeeded", "Failed", ...)."""
    return {c["type"]: c["status"] for c in (job.get("status") or {}).get("conditions") or []}
