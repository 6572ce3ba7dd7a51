"""The API server a chaos run shares between its trials, and one trial's objects in it.

Trials are isolated as tests/k8s isolates tests: every trial has its own namespaces, scheduler name and
uniquely named nodes, and at its end its pods and nodes are deleted, so no later trial sees its capacity
or its pods.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from phalanx.chaos.snapshot import TRIAL_LABEL
from phalanx.chaos.workload import PodPlan, Workload, pod_body
from phalanx.model.gpu import GPU
from phalanx.testing.apiserver import LocalApiServer

REPO = Path(__file__).resolve().parents[3]
CRD_DIR = REPO / "deploy" / "crds"


def start_apiserver() -> LocalApiServer:
    """etcd + kube-apiserver with the three PodGroup CRDs installed and served."""
    server = LocalApiServer().start()
    try:
        install_crds(server)
    except BaseException:
        server.stop()
        raise
    return server


def install_crds(server: LocalApiServer, timeout: float = 30.0) -> None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    api = server.api_client()
    ext = client.ApiextensionsV1Api(api)
    custom = client.CustomObjectsApi(api)
    served = []
    for path in sorted(CRD_DIR.glob("*_podgroups.yaml")):
        crd = yaml.safe_load(path.read_text())
        ext.create_custom_resource_definition(crd)
        served.append((crd["spec"]["group"], crd["spec"]["versions"][0]["name"]))
    deadline = time.monotonic() + timeout
    for group, version in served:  # established and served before any scheduler lists them
        while True:
            try:
                custom.list_cluster_custom_object(group, version, "podgroups", _preload_content=False)
                break
            except ApiException:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"CRD podgroups.{group} not served after {timeout:g}s") from None
                time.sleep(0.1)


def core_api(server: LocalApiServer) -> Any:
    from kubernetes import client

    return client.CoreV1Api(server.api_client())


def create_nodes(core: Any, workload: Workload) -> None:
    for node in workload.nodes:
        core.create_node(
            {
                "metadata": {
                    "name": node.name,
                    "labels": {"kubernetes.io/hostname": node.name, TRIAL_LABEL: workload.trial},
                }
            },
            _preload_content=False,
        )
        resources = {"cpu": str(node.cpu), "memory": "256Gi", "pods": "110", GPU: str(node.gpus)}
        # No kubelet: the capacity a kubelet would report goes in through the status subresource.
        core.patch_node_status(
            node.name, {"status": {"capacity": resources, "allocatable": resources}}, _preload_content=False
        )


def create_namespaces(core: Any, workload: Workload) -> None:
    for ns in workload.namespaces:
        core.create_namespace(
            {"metadata": {"name": ns, "labels": {TRIAL_LABEL: workload.trial}}}, _preload_content=False
        )


def delete_trial_objects(core: Any, workload: Workload) -> None:
    """Pods (at once, whatever their state), nodes, then namespaces (which stay Terminating: no
    namespace controller runs, but they are empty by then)."""
    for ns in workload.namespaces:
        try:
            core.delete_collection_namespaced_pod(ns, grace_period_seconds=0, _preload_content=False)
        except Exception:
            pass
    for node in workload.nodes:
        try:
            core.delete_node(node.name, _preload_content=False)
        except Exception:
            pass
    for ns in workload.namespaces:
        try:
            core.delete_namespace(ns, _preload_content=False)
        except Exception:
            pass


class PodCreator:
    """Creates the workload's pods at their planned times on its own thread; `created` grows as it goes."""

    def __init__(self, core: Any, workload: Workload, plans: list[PodPlan], waiting_time: str, started: float) -> None:
        self.core = core
        self.workload = workload
        self.plans = plans
        self.waiting_time = waiting_time
        self.started = started
        self.created: set[str] = set()
        self.first_created_at: float | None = None
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-creator", daemon=True)

    def start(self) -> PodCreator:
        self._thread.start()
        return self

    def add(self, plans: list[PodPlan]) -> None:
        """More pods (the soak's continuous arrivals); created after those already planned."""
        with self._lock:
            self.plans.extend(plans)

    def done(self) -> bool:
        with self._lock:
            return len(self.created) + len(self.errors) >= len(self.plans)

    def created_keys(self) -> set[str]:
        with self._lock:
            return set(self.created)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            with self._lock:
                plan = self.plans[i] if i < len(self.plans) else None
            if plan is None:
                self._stop.wait(0.05)
                continue
            delay = self.started + plan.at - time.monotonic()
            if delay > 0 and self._stop.wait(delay):
                return
            body = pod_body(self.workload, plan.gang, plan.name, self.waiting_time)
            key = f"{plan.gang.namespace}/{plan.name}"
            try:
                self.core.create_namespaced_pod(plan.gang.namespace, body, _preload_content=False)
                with self._lock:
                    self.created.add(key)
                    if self.first_created_at is None:
                        self.first_created_at = time.monotonic()
            except Exception as exc:  # reported with the trial; the pod's gang then never completes
                with self._lock:
                    self.errors.append(f"{key}: {getattr(exc, 'status', '')} {str(exc)[:200]}")
            i += 1


def pod_json(core: Any, namespace: str, name: str) -> dict[str, Any]:
    return json.loads(core.read_namespaced_pod(name, namespace, _preload_content=False).data)
