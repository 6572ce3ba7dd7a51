"""Fixtures for tests against a real kube-apiserver: the server (one per module, PodGroup CRDs installed),
a per-test view of the cluster (fresh namespaces, uniquely named nodes deleted afterwards), and the three
Phalanx services run in-process on loopback gRPC ports against it, on the wall clock.

Isolation between tests sharing one API server: every test's scheduler has its own schedulerName, so pods
left by earlier tests are other schedulers' pods; and nodes are deleted at the end of each test, so those
pods no longer hold capacity anywhere a later test looks.
"""

from __future__ import annotations

import itertools
import json
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from waiting import wait_for

from phalanx.model.keys import KOORD_GROUPS, KOORD_MIN_AVAILABLE, KOORD_NAME, KOORD_WAITING_TIME
from phalanx.security.cli import make_tree
from phalanx.security.tls import ALL_IDENTITIES, BINDER, QUEUE, SCHEDULER
from phalanx.state.keys import Keys
from phalanx.state.store import StateStore
from phalanx.testing.apiserver import LocalApiServer
from phalanx.testing.redis_server import RedisServer

REPO = Path(__file__).resolve().parents[2]
GPU = "nvidia.com/gpu"
_ids = itertools.count()


# --- the API server -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def apiserver() -> Iterator[LocalApiServer]:
    with LocalApiServer() as server:
        _install_crds(server)
        yield server


def _install_crds(server: LocalApiServer) -> None:
    from kubernetes import client

    api = server.api_client()
    ext = client.ApiextensionsV1Api(api)
    names = []
    for path in sorted((REPO / "deploy" / "crds").glob("*_podgroups.yaml")):
        crd = yaml.safe_load(path.read_text())
        ext.create_custom_resource_definition(crd)
        names.append((crd["spec"]["group"], crd["spec"]["versions"][0]["name"]))
    custom = client.CustomObjectsApi(api)
    for group, version in names:  # established and served
        wait_for(lambda: _served(custom, group, version), 30, f"CRD podgroups.{group} served")


def _served(custom: Any, group: str, version: str) -> bool:
    from kubernetes.client.rest import ApiException

    try:
        custom.list_cluster_custom_object(group, version, "podgroups", _preload_content=False)
        return True
    except ApiException:
        return False


# --- one test's view of the cluster ---------------------------------------------------------------------------


class Cluster:
    """Creates and reads the test's objects; raw JSON dicts in and out."""

    def __init__(self, server: LocalApiServer, tid: str, scheduler_name: str) -> None:
        from kubernetes import client

        api = server.api_client()
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.tid = tid
        self.scheduler_name = scheduler_name
        self.nodes: list[str] = []
        self._canaries = itertools.count()

    # -- creating -------------------------------------------------------------------------------------
    def namespace(self, suffix: str = "ns") -> str:
        name = f"{self.tid}-{suffix}"
        self.core.create_namespace({"metadata": {"name": name}})
        return name

    def node(self, suffix: str, gpus: int = 0, cpu: str = "16") -> str:
        name = f"{self.tid}-{suffix}"
        self.core.create_node({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}})
        resources = {"cpu": cpu, "memory": "64Gi", "pods": "110", GPU: str(gpus)}
        # No kubelet: the capacity a kubelet would report goes in through the status subresource.
        self.core.patch_node_status(name, {"status": {"capacity": resources, "allocatable": resources}})
        self.nodes.append(name)
        return name

    def pod(
        self,
        namespace: str,
        name: str,
        *,
        gpus: int = 1,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        scheduler: str | None = None,
        spec: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """`spec`: more fields of the pod's spec (affinity, topologySpreadConstraints, ...)."""
        requests = {"cpu": "100m", **({GPU: str(gpus)} if gpus else {})}
        body = {
            "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
            "spec": {
                "schedulerName": scheduler or self.scheduler_name,
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": requests, "limits": {GPU: str(gpus)} if gpus else {}},
                    }
                ],
                **(spec or {}),
            },
        }
        resp = self.core.create_namespaced_pod(namespace, body, _preload_content=False)
        return json.loads(resp.data)  # type: ignore[no-any-return]

    def koord_pods(
        self,
        namespace: str,
        gang: str,
        count: int,
        *,
        min_available: int,
        gpus: int = 1,
        wait: str = "30s",
        groups: list[str] | None = None,
        start: int = 0,
    ) -> list[str]:
        annotations = {KOORD_NAME: gang, KOORD_MIN_AVAILABLE: str(min_available), KOORD_WAITING_TIME: wait}
        if groups:
            annotations[KOORD_GROUPS] = json.dumps(groups)
        names = [f"{gang}-{i}" for i in range(start, start + count)]
        for name in names:
            self.pod(namespace, name, gpus=gpus, annotations=annotations)
        return names

    def podgroup(
        self,
        group: str,
        namespace: str,
        name: str,
        min_member: int,
        *,
        timeout_seconds: int | None = None,
        annotations: dict[str, str] | None = None,
    ) -> None:
        from phalanx.kube.podgroups import VERSIONS

        spec: dict[str, Any] = {"minMember": min_member}
        if timeout_seconds is not None:
            spec["scheduleTimeoutSeconds"] = timeout_seconds
        body = {
            "apiVersion": f"{group}/{VERSIONS[group]}",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
            "spec": spec,
        }
        self.custom.create_namespaced_custom_object(group, VERSIONS[group], namespace, "podgroups", body)

    def delete_podgroup(self, group: str, namespace: str, name: str) -> None:
        from phalanx.kube.podgroups import VERSIONS

        self.custom.delete_namespaced_custom_object(group, VERSIONS[group], namespace, "podgroups", name)

    def configmap(self, namespace: str, name: str, data: dict[str, str]) -> None:
        self.core.create_namespaced_config_map(namespace, {"metadata": {"name": name}, "data": data})

    def bind(self, namespace: str, name: str, node: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        self.core.create_namespaced_pod_binding(name, namespace, body, _preload_content=False)

    def set_phase(self, namespace: str, name: str, phase: str) -> None:
        self.core.patch_namespaced_pod_status(
            name, namespace, {"status": {"phase": phase}}, _content_type="application/merge-patch+json"
        )

    def delete_pod(self, namespace: str, name: str) -> None:
        self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)

    # -- reading --------------------------------------------------------------------------------------
    def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return json.loads(self.core.read_namespaced_pod(name, namespace, _preload_content=False).data)  # type: ignore[no-any-return]

    def node_of(self, namespace: str, name: str) -> str:
        return (self.read_pod(namespace, name).get("spec") or {}).get("nodeName") or ""

    def all_bound(self, namespace: str, names: list[str]) -> dict[str, str] | None:
        nodes = {n: self.node_of(namespace, n) for n in names}
        return nodes if all(nodes.values()) else None

    def condition(self, namespace: str, name: str) -> dict[str, Any]:
        for c in (self.read_pod(namespace, name).get("status") or {}).get("conditions") or []:
            if c.get("type") == "PodScheduled":
                return c  # type: ignore[no-any-return]
        return {}

    def judged(self, namespace: str, names: list[str]) -> bool:
        """Every pod has its PodScheduled condition: False as Phalanx writes it on a pod it could not place
        (or holds for its gang), True as the API server sets it on binding. Waited for before asserting
        that pods were not bound: the scheduler has decided about each of them."""
        return all(self.condition(namespace, name).get("status") for name in names)

    def canary(self, bind_timeout: float = 20.0) -> None:
        """A pod that fits any node, in a namespace of its own, bound by the scheduler: it has run its rounds
        past everything the feed saw before the canary was created. Waited for before asserting that
        something else did not happen."""
        namespace = self.namespace(f"canary{next(self._canaries)}")
        self.pod(namespace, "canary", gpus=0)
        wait_for(lambda: self.node_of(namespace, "canary"), bind_timeout, "the canary pod bound")

    def annotations(self, namespace: str, name: str) -> dict[str, str]:
        return (self.read_pod(namespace, name).get("metadata") or {}).get("annotations") or {}

    def events(self, namespace: str, name: str, kind: str = "Pod") -> list[dict[str, Any]]:
        selector = f"involvedObject.name={name},involvedObject.kind={kind}"
        resp = self.core.list_namespaced_event(namespace, field_selector=selector, _preload_content=False)
        return json.loads(resp.data)["items"]  # type: ignore[no-any-return]

    def reasons(self, namespace: str, name: str, kind: str = "Pod") -> list[str]:
        return [e["reason"] for e in self.events(namespace, name, kind)]

    def podgroup_status(self, group: str, namespace: str, name: str) -> dict[str, Any]:
        from phalanx.kube.podgroups import VERSIONS

        obj = self.custom.get_namespaced_custom_object(group, VERSIONS[group], namespace, "podgroups", name)
        return obj.get("status") or {}  # type: ignore[no-any-return]

    def gpus_by_node(self, namespace: str, names: list[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        for name in names:
            pod = self.read_pod(namespace, name)
            node = pod["spec"].get("nodeName")
            if node:
                gpus = int(pod["spec"]["containers"][0]["resources"].get("requests", {}).get(GPU, "0"))
                out[node] = out.get(node, 0) + gpus
        return out

    def cleanup(self) -> None:
        for name in self.nodes:  # later tests must not see this test's capacity
            try:
                self.core.delete_node(name)
            except Exception:
                pass


# --- the services ---------------------------------------------------------------------------------------------

TLS_DIR = Path(tempfile.mkdtemp(prefix="phalanx-k8s-tls-"))
make_tree(TLS_DIR, list(ALL_IDENTITIES), [], ["127.0.0.1"], days=1)  # one CA for the test session


def transport(identity: str) -> list[str]:
    """Flags of a service as deployed: mutual TLS with its identity's files, plaintext health on its own port."""
    return ["--tls-dir", str(TLS_DIR / identity), "--health-listen", "127.0.0.1:0"]


def election_flags(
    identity: str, namespace: str, lease_name: str, lease: float, renew: float, retry: float
) -> list[str]:
    """A scheduler replica's leader-election flags (short timings make a takeover take seconds)."""
    return [
        "--leader-elect", "true", "--leader-elect-identity", identity,
        "--leader-elect-namespace", namespace, "--leader-elect-lease-name", lease_name,
        "--leader-elect-lease-duration", str(lease), "--leader-elect-renew-deadline", str(renew),
        "--leader-elect-retry-period", str(retry),
    ]  # fmt: skip


class GangTrickle:
    """`count` Koordinator-annotated gangs of `size` pods created one every `every` seconds on a thread: a
    workload that goes on while a test kills a leader. `gangs` fills as they are made; `join` raises what
    failed."""

    def __init__(self, cluster: Cluster, namespace: str, count: int = 20, size: int = 4, every: float = 0.25) -> None:
        self.cluster, self.namespace = cluster, namespace
        self.count, self.size, self.every = count, size, every
        self.gangs: dict[str, list[str]] = {}
        self.errors: list[Exception] = []
        self._thread = threading.Thread(target=self._run, name="gang-trickle", daemon=True)

    def start(self) -> GangTrickle:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            for i in range(self.count):
                name = f"g{i:02d}"
                self.gangs[name] = self.cluster.koord_pods(
                    self.namespace, name, self.size, min_available=self.size, wait="120s"
                )
                time.sleep(self.every)
        except Exception as exc:  # surfaced by join()
            self.errors.append(exc)

    def bound_gangs(self) -> int:
        return sum(1 for names in list(self.gangs.values()) if self.cluster.all_bound(self.namespace, names))

    def join(self, timeout: float) -> list[str]:
        """Every pod created, once all are; the creation's failure raised."""
        self._thread.join(timeout)
        assert not self.errors, self.errors
        assert len(self.gangs) == self.count
        return [n for names in self.gangs.values() for n in names]


class Phalanx:
    """Queue, binder and scheduler in this process, each through its service's own build(), on the wall
    clock against the API server, with mutual TLS as deployed; the scheduler can be stopped and started
    again (a restart). `combined`: wired as phalanx-combined wires them (phalanx_combined): the scheduler
    calls the queue's and binder's handlers directly, and the binder's view of pods and nodes follows the
    scheduler's feed instead of watching for itself."""

    def __init__(
        self, server: LocalApiServer, redis_url: str, prefix: str, scheduler_name: str, combined: bool = False
    ) -> None:
        self.combined = combined
        self.redis_url = redis_url
        self.prefix = prefix
        self.scheduler_name = scheduler_name
        self.kubeconfig = str(server.kubeconfig_path)
        self.store = StateStore(redis.Redis.from_url(redis_url, decode_responses=True), Keys(prefix))
        self.queue: Any = None
        self.binder: Any = None
        self.scheduler: Any = None  # (server, servicer, feed, stop event, loop thread)

    def start(self) -> Phalanx:

        self.start_queue("127.0.0.1:0")
        self.start_binder("127.0.0.1:0")
        self.start_scheduler()
        return self

    def start_binder(self, listen: str) -> None:
        from phalanx_binder import __main__ as binder_main

        args = binder_main.parser().parse_args(
            [
                "--listen",
                listen,
                "--clock",
                "real",
                "--backend",
                "kubernetes",
                "--kubeconfig",
                self.kubeconfig,
                *transport(BINDER),
                "--redis-url",
                self.redis_url,
                "--redis-prefix",
                self.prefix,
                "--finish-interval",
                "0.5",
                "--scheduler-name",
                self.scheduler_name,
            ]
        )
        self.binder = binder_main.build(args, own_view=not self.combined).start()

    def stop_binder(self) -> str:
        """Stops the binder (as if it crashed); returns its address, to start the next one on."""
        address = self.binder.address
        self.binder.stop(0)
        return str(address)

    def start_queue(self, listen: str) -> None:
        from phalanx_queue import __main__ as queue_main

        self.queue = queue_main.build(
            queue_main.parser().parse_args(
                [
                    "--listen",
                    listen,
                    "--clock",
                    "real",
                    *transport(QUEUE),
                    "--initial-backoff",
                    "0.2",
                    "--max-backoff",
                    "1",
                    "--unschedulable-flush",
                    "5",
                ]
            )
        ).start()

    def restart_queue(self) -> None:
        """A new queue process on the same address: it starts empty."""
        address = self.queue.address
        self.queue.stop(0)
        self.start_queue(address)

    def scheduler_flags(self, default_wait: float) -> list[str]:
        """The flags of a scheduler of this stack on the wall clock, watching the test API server."""
        return [
            "--listen", "127.0.0.1:0", "--clock", "real", "--backend", "kubernetes",
            "--kubeconfig", self.kubeconfig, *transport(SCHEDULER),
            "--scheduler-name", self.scheduler_name, "--redis-url", self.redis_url, "--redis-prefix", self.prefix,
            "--queue", self.queue.address, "--binder", self.binder.address,
            "--default-wait", f"{default_wait:g}", "--reconcile-interval", "1",
        ]  # fmt: skip

    def start_scheduler(self, *extra: str) -> None:
        from phalanx_scheduler import __main__ as scheduler_main

        args = scheduler_main.parser().parse_args([*self.scheduler_flags(default_wait=30), *extra])
        in_process = None
        if self.combined:
            view = self.binder.servicer.backend.view
            in_process = scheduler_main.InProcess(self.queue.servicer, self.binder.servicer, cluster_view=view)
        server, servicer = scheduler_main.build(args, in_process=in_process)
        server.start()
        feed = scheduler_main.start_feed(args, servicer, follower=in_process and in_process.cluster_view)
        assert feed is not None and feed.wait_synced(20), "the cluster feed did not sync"
        stop = threading.Event()
        loop = threading.Thread(target=servicer.loop.run, args=(stop,), name="schedule-loop", daemon=True)
        loop.start()
        self.scheduler = (server, servicer, feed, stop, loop)

    def stop_scheduler(self) -> None:
        if self.scheduler is None:
            return
        server, servicer, feed, stop, loop = self.scheduler
        self.scheduler = None
        stop.set()
        feed.stop()
        loop.join(10)
        server.stop(0)
        for client in (servicer.scheduler.queue, servicer.scheduler.binder):
            client.close()

    def stop(self) -> None:
        self.stop_scheduler()
        for svc in (self.binder, self.queue):
            if svc is not None:
                svc.stop(0)

    # -- Phalanx's own state --------------------------------------------------------------------------
    def reserved(self) -> dict[str, tuple[str, str]]:
        """Pod key -> (node, assumed|bound), as Redis has it."""
        return {k: (r.node, r.state) for k, r in self.store.load_pods().items()}


@pytest.fixture
def tid() -> str:
    return f"t{next(_ids)}"


@pytest.fixture
def cluster(apiserver: LocalApiServer, tid: str) -> Iterator[Cluster]:
    c = Cluster(apiserver, tid, f"phalanx-{tid}")
    yield c
    c.cleanup()


@pytest.fixture
def phalanx(apiserver: LocalApiServer, redis_server: RedisServer, cluster: Cluster, tid: str) -> Iterator[Phalanx]:
    stack = Phalanx(apiserver, redis_server.url, f"k8s-{tid}", cluster.scheduler_name).start()
    yield stack
    stack.stop()
