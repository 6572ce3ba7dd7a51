"""`phalanx bench-k8s`: Phalanx and kube-scheduler + Coscheduling side by side on a real kube-apiserver.

Every run starts a fresh etcd + kube-apiserver (LocalApiServer, with the PodGroup CRDs), creates fake Nodes
(no kubelet: capacity through the status subresource), one namespace, every PodGroup and every Pod, all
BEFORE the scheduler under test is started; then it launches the scheduler and watches what happens:

- time from launch to the first and to the last binding, and each pod's binding time (pod watch);
- status lag after the binding: the `Scheduled` Event (event watch), the pod's PodScheduled condition (pod
  watch) and, where the scheduler writes one, the PodGroup status that says the gang is scheduled
  (PodGroup watch);
- API requests made during the run, by verb and resource: kube-apiserver's `apiserver_request_total`
  from /metrics before launch and after the statuses settled (the harness itself sends nothing in that
  window: its watches are counted when they end, after it);
- peak RSS (VmHWM) and CPU seconds of every scheduler process, and of kube-apiserver and etcd over the
  window (psutil, and /proc for the peak);
- correctness, from a final LIST: no partial gang (each gang has 0 or >= minMember pods bound), no node
  over its allocatable cpu, memory, GPUs or pod count, and the expected number of pods bound.

The schedulers: Phalanx as deployed (phalanx.chaos.stack.ChaosStack: Redis with a password and the queue,
binder and scheduler as separate processes with mutual TLS and the Kubernetes backend), and the peer:
kube-scheduler with scheduler-plugins' Coscheduling (hack/build-peer-scheduler.sh). Both read the same
objects: a scheduling.x-k8s.io PodGroup per gang, pods labelled scheduling.x-k8s.io/pod-group; only the
pods' schedulerName differs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from phalanx.model.gpu import GPU

REPO = Path(__file__).resolve().parents[3]
PEER_MODDIR = REPO / "hack" / "peer-scheduler"
PG_GROUP, PG_VERSION = "scheduling.x-k8s.io", "v1alpha1"
PG_LABEL = "scheduling.x-k8s.io/pod-group"
NAMESPACE = "bench"
PHALANX = "phalanx"
PEER = "peer"
SCHEDULER_NAMES = {PHALANX: "phalanx-bench", PEER: "peer-scheduler"}
PEER_PERMIT_WAIT_SECONDS = 10  # scheduler-plugins' example configuration (manifests/coscheduling)
POD_CPU_MILLI = 100
POD_MEMORY = "128Mi"
NODE_MEMORY = "256Gi"
NODE_PODS = 110


class BenchK8sError(RuntimeError):
    pass


# --- workloads --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    name: str
    nodes: int
    node_cpu: int = 32
    node_gpus: int = 0
    gangs: int = 0
    gang_size: int = 0
    plain_pods: int = 0
    pod_gpus: int = 0
    expected_bound: int = 0  # pods that fit (all, unless the workload is a contention case)
    timeout: float = 300.0  # seconds from launch to give up waiting for expected_bound

    @property
    def pods(self) -> int:
        return self.gangs * self.gang_size + self.plain_pods

    @property
    def contention(self) -> bool:
        return self.expected_bound < self.pods

    def describe(self) -> str:
        node = f"{self.nodes:,} nodes ({self.node_cpu} cpu{f', {self.node_gpus} GPUs' if self.node_gpus else ''})"
        per_pod = f"{POD_CPU_MILLI}m cpu{f' + {self.pod_gpus} GPUs' if self.pod_gpus else ''} per pod"
        if self.gangs:
            what = f"{self.gangs:,} gangs of {self.gang_size} (minMember {self.gang_size}) = {self.pods:,} pods"
        else:
            what = f"{self.plain_pods:,} plain pods"
        fit = (
            f"; {self.expected_bound:,} pods ({self.expected_bound // max(self.gang_size, 1)} gangs) fit"
            if self.contention
            else ""
        )
        return f"{node}, {what}, {per_pod}{fit}"


def _gpu_contention(name: str, nodes: int, gangs: int, timeout: float) -> Shape:
    # 8 GPUs a node, gangs of 4 pods x 2 GPUs: each gang fills one node's worth, so exactly `nodes` gangs fit.
    return Shape(
        name,
        nodes=nodes,
        node_gpus=8,
        gangs=gangs,
        gang_size=4,
        pod_gpus=2,
        expected_bound=min(gangs, nodes) * 4,
        timeout=timeout,
    )


def workloads(quick: bool = False, large: bool = False) -> list[Shape]:
    if quick:
        return [
            Shape("gang-20n-30x3", nodes=20, gangs=30, gang_size=3, expected_bound=90, timeout=60),
            Shape("basic-10n-60", nodes=10, plain_pods=60, expected_bound=60, timeout=60),
            _gpu_contention("gpu-contention-3n-5x4", nodes=3, gangs=5, timeout=30),
        ]
    out = [
        Shape("gang-500n-1000x3", nodes=500, gangs=1000, gang_size=3, expected_bound=3000),
        Shape("basic-200n-2000", nodes=200, plain_pods=2000, expected_bound=2000),
        _gpu_contention("gpu-contention-20n-30x4", nodes=20, gangs=30, timeout=90),
    ]
    if large:
        out += [
            Shape("gang-5000n-1000x3", nodes=5000, gangs=1000, gang_size=3, expected_bound=3000, timeout=600),
            Shape("basic-5000n-2000", nodes=5000, plain_pods=2000, expected_bound=2000, timeout=600),
        ]
    return out


# --- small helpers ------------------------------------------------------------------------------------------


def _pct(values: Iterable[float], q: float) -> float | None:
    xs = sorted(values)
    if not xs:
        return None
    k = min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))
    return xs[k]


def _dist(values: list[float], scale: float = 1.0, digits: int = 3) -> dict[str, Any]:
    if not values:
        return {"n": 0, "p50": None, "p95": None, "max": None}
    p50, p95 = _pct(values, 0.5), _pct(values, 0.95)
    assert p50 is not None and p95 is not None  # `values` is not empty
    return {
        "n": len(values),
        "p50": round(p50 * scale, digits),
        "p95": round(p95 * scale, digits),
        "max": round(max(values) * scale, digits),
    }


def _cpu_milli(q: str) -> int:
    q = str(q)
    if q.endswith("m"):
        return int(q[:-1])
    return int(float(q) * 1000)


_BIN_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def _bytes(q: str) -> int:
    q = str(q)
    for suffix, mult in _BIN_SUFFIX.items():
        if q.endswith(suffix):
            return int(float(q[: -len(suffix)]) * mult)
    return int(float(q))


def peer_binary_path() -> Path | None:
    """The peer scheduler: $PHALANX_PEER_SCHEDULER, else where hack/build-peer-scheduler.sh puts it for the
    versions in hack/peer-scheduler/go.mod. None if it is not there."""
    explicit = os.environ.get("PHALANX_PEER_SCHEDULER")
    if explicit:
        return Path(explicit) if os.access(explicit, os.X_OK) else None
    try:
        gomod = (PEER_MODDIR / "go.mod").read_text()
    except OSError:
        gomod = ""

    def version(module: str) -> str:
        m = re.search(
            rf"^\s*{re.escape(module)}\s+=>\s+{re.escape(module)}\s+(v\S+)", gomod, re.MULTILINE
        ) or re.search(rf"^\s*{re.escape(module)}\s+(v\d\S*)", gomod, re.MULTILINE)
        return m.group(1) if m else ""

    root = Path(os.environ.get("PHALANX_PEER_CACHE") or Path.home() / ".cache" / "phalanx" / "peer-scheduler")
    k8s, sp = version("k8s.io/kubernetes"), version("sigs.k8s.io/scheduler-plugins")
    if k8s and sp:
        path = root / f"{k8s}-sp{sp}" / "peer-scheduler"
        return path if os.access(path, os.X_OK) else None
    found = sorted(root.glob("*/peer-scheduler"))
    return found[-1] if found else None


def peer_versions() -> dict[str, str]:
    try:
        gomod = (PEER_MODDIR / "go.mod").read_text()
    except OSError:
        return {}
    out = {}
    for module, key in (
        ("k8s.io/kubernetes", "kube_scheduler"),
        ("sigs.k8s.io/scheduler-plugins", "scheduler_plugins"),
    ):
        m = re.search(
            rf"^\s*{re.escape(module)}\s+=>\s+{re.escape(module)}\s+(v\S+)", gomod, re.MULTILINE
        ) or re.search(rf"^\s*{re.escape(module)}\s+(v\d\S*)", gomod, re.MULTILINE)
        if m:
            out[key] = m.group(1)
    return out


# --- the API server ---------------------------------------------------------------------------------------


class Api:
    """Raw JSON over one pooled urllib3 connection manager: light enough not to steal the CPU that the
    schedulers under test need (the kubernetes client's model classes are slow)."""

    def __init__(self, server: Any) -> None:
        import urllib3

        self.base = server.url
        self.headers = {"Authorization": f"Bearer {server.token}", "Accept": "application/json"}
        self.http = urllib3.PoolManager(
            maxsize=32,
            ca_certs=str(server.ca_cert_path),
            cert_reqs="CERT_REQUIRED",
            timeout=urllib3.Timeout(connect=10, read=60),
            retries=False,
        )

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        ok: tuple[int, ...] = (200, 201),
    ) -> Any:
        headers = dict(self.headers)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        for attempt in range(5):
            resp = self.http.request(method, self.base + path, body=data, headers=headers)
            if resp.status in ok:
                return json.loads(resp.data) if resp.data else None
            if resp.status in (429, 500, 503) and attempt < 4:
                time.sleep(0.2 * (attempt + 1))
                continue
            raise BenchK8sError(f"{method} {path}: {resp.status} {resp.data[:300]!r}")
        raise AssertionError("unreachable")

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def text(self, path: str) -> str:
        resp = self.http.request("GET", self.base + path, headers={**self.headers, "Accept": "text/plain"})
        if resp.status != 200:
            raise BenchK8sError(f"GET {path}: {resp.status}")
        return str(resp.data.decode())

    def metrics(self) -> dict[str, float]:
        """kube-apiserver's apiserver_request_total, summed by "VERB resource[/subresource]"."""
        return parse_request_totals(self.text("/metrics"))


_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_request_totals(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels_part, _, value = line.rpartition("} ")
        labels = dict(_LABEL.findall(labels_part))
        resource = labels.get("resource", "")
        if not resource:
            continue  # non-resource URLs (/metrics, /healthz, ...)
        if labels.get("group") not in (None, "", "core"):
            resource += "." + labels["group"]  # kubectl's notation: podgroups.scheduling.x-k8s.io
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        key = f"{labels.get('verb', '?')} {resource}"
        out[key] = out.get(key, 0.0) + float(value)
    return out


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, int]:
    out = {k: int(round(v - before.get(k, 0.0))) for k, v in after.items()}
    return {k: v for k, v in sorted(out.items(), key=lambda kv: -kv[1]) if v > 0}


class Watch(threading.Thread):
    """One watch stream of raw JSON lines; `on_event(t, type, obj)` with the monotonic time the line arrived.
    Re-watches from the last resourceVersion if the server ends the stream."""

    def __init__(
        self,
        api: Api,
        path: str,
        resource_version: str,
        on_event: Callable[[float, str, dict[str, Any]], None],
        params: str = "",
    ) -> None:
        super().__init__(name=f"watch {path}", daemon=True)
        self.api, self.path, self.rv, self.on_event, self.params = api, path, resource_version, on_event, params
        self._halt = threading.Event()
        self._resp: Any = None
        self.error: str = ""

    def run(self) -> None:
        import urllib3

        while not self._halt.is_set():
            url = f"{self.api.base}{self.path}?watch=1&resourceVersion={self.rv}{self.params}"
            try:
                self._resp = self.api.http.request(
                    "GET",
                    url,
                    headers=self.api.headers,
                    preload_content=False,
                    timeout=urllib3.Timeout(connect=10, read=None),
                )
                if self._resp.status != 200:
                    self.error = f"watch {self.path}: {self._resp.status}"
                    return
                buf = b""
                for chunk in self._resp.stream(65536):
                    t = time.monotonic()
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        if not line.strip():
                            continue
                        ev = json.loads(line)
                        obj = ev.get("object") or {}
                        if ev.get("type") == "ERROR":
                            self.error = str(obj.get("message", obj))
                            return
                        rv = (obj.get("metadata") or {}).get("resourceVersion")
                        if rv:
                            self.rv = rv
                        self.on_event(t, str(ev.get("type")), obj)
            except Exception as exc:  # stopped (connection shut down) or a dropped stream
                if self._halt.is_set():
                    return
                self.error = f"{type(exc).__name__}: {exc}"
                time.sleep(0.2)

    def stop(self) -> None:
        self._halt.set()
        resp = self._resp
        if resp is not None:
            try:
                resp.shutdown()
            except Exception:
                pass
            try:
                resp.release_conn()
            except Exception:
                pass
        self.join(5)


# --- what the watches saw -----------------------------------------------------------------------------------


@dataclass
class Observed:
    lock: threading.Lock = field(default_factory=threading.Lock)
    bound: dict[str, float] = field(default_factory=dict)  # pod -> time its nodeName was first seen
    node_of: dict[str, str] = field(default_factory=dict)
    condition: dict[str, float] = field(default_factory=dict)  # pod -> PodScheduled=True first seen
    event: dict[str, float] = field(default_factory=dict)  # pod -> `Scheduled` Event first seen
    event_sources: set[str] = field(default_factory=set)
    podgroup: dict[str, float] = field(default_factory=dict)  # gang -> status saying it is scheduled
    podgroup_writes: int = 0  # status changes seen on any PodGroup

    def on_pod(self, t: float, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        node = (obj.get("spec") or {}).get("nodeName")
        conds = (obj.get("status") or {}).get("conditions") or []
        with self.lock:
            if node and name not in self.bound:
                self.bound[name] = t
                self.node_of[name] = node
            if name not in self.condition and any(
                c.get("type") == "PodScheduled" and c.get("status") == "True" for c in conds
            ):
                self.condition[name] = t

    def on_event(self, t: float, kind: str, obj: dict[str, Any]) -> None:
        if obj.get("reason") != "Scheduled":
            return
        involved = obj.get("involvedObject") or {}
        if involved.get("kind") != "Pod":
            return
        with self.lock:
            self.event.setdefault(involved.get("name", ""), t)
            source = obj.get("reportingComponent") or (obj.get("source") or {}).get("component") or ""
            self.event_sources.add(source)

    def on_podgroup(self, t: float, kind: str, obj: dict[str, Any]) -> None:
        status = obj.get("status") or {}
        if kind != "MODIFIED" or not status:
            return
        name = obj["metadata"]["name"]
        min_member = int((obj.get("spec") or {}).get("minMember") or 1)
        with self.lock:
            self.podgroup_writes += 1
            if name not in self.podgroup and (
                status.get("phase") in ("Scheduled", "Running", "Finished")
                or int(status.get("scheduled") or 0) >= min_member
            ):
                self.podgroup[name] = t


# --- the schedulers under test --------------------------------------------------------------------------------


class SchedulerUnderTest:
    name = ""

    def launch(self) -> None:
        raise NotImplementedError

    def pids(self) -> dict[str, int]:
        raise NotImplementedError

    def alive(self) -> bool:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def log_hint(self) -> str:
        return ""


class PhalanxUnderTest(SchedulerUnderTest):
    """Phalanx as deployed: ChaosStack (Redis with a password + three service processes, mutual TLS)."""

    name = PHALANX

    def __init__(self, kubeconfig: str, run_dir: Path) -> None:
        from phalanx.chaos.stack import ChaosStack, StackConfig

        self.run_dir = run_dir
        self.stack = ChaosStack.create(
            StackConfig(kubeconfig, SCHEDULER_NAMES[PHALANX], "bench-k8s", run_dir, log_level="WARNING")
        )

    def launch(self) -> None:
        self.stack.start(timeout=120)

    def pids(self) -> dict[str, int]:
        return self.stack.pids()

    def alive(self) -> bool:
        return all(self.stack.alive(n) for n in self.stack.names())

    def stop(self) -> None:
        self.stack.stop()

    def log_hint(self) -> str:
        return f"logs in {self.run_dir}"


def peer_config(kubeconfig: str) -> dict[str, Any]:
    """kube-scheduler configuration: one profile with Coscheduling at queueSort (replacing PrioritySort),
    preFilter, postFilter, permit and reserve, as scheduler-plugins documents it; client QPS/burst lifted
    as scheduler_perf does; no leader election."""
    plugin = [{"name": "Coscheduling"}]
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "clientConnection": {"kubeconfig": kubeconfig, "qps": 5000, "burst": 5000},
        "profiles": [
            {
                "schedulerName": SCHEDULER_NAMES[PEER],
                "plugins": {
                    "queueSort": {"enabled": plugin, "disabled": [{"name": "*"}]},
                    "preFilter": {"enabled": plugin},
                    "postFilter": {"enabled": plugin},
                    "permit": {"enabled": plugin},
                    "reserve": {"enabled": plugin},
                },
                "pluginConfig": [
                    {"name": "Coscheduling", "args": {"permitWaitingTimeSeconds": PEER_PERMIT_WAIT_SECONDS}}
                ],
            }
        ],
    }


class PeerUnderTest(SchedulerUnderTest):
    name = PEER

    def __init__(self, binary: Path, kubeconfig: str, run_dir: Path) -> None:
        from phalanx.testing.children import exit_with_parent_argv
        from phalanx.testing.ports import free_port

        run_dir.mkdir(parents=True, exist_ok=True)
        self.run_dir = run_dir
        config = run_dir / "peer-scheduler.yaml"
        config.write_text(json.dumps(peer_config(kubeconfig), indent=2))  # JSON is YAML
        self.log_path = run_dir / "peer-scheduler.log"
        self.argv = exit_with_parent_argv(
            [str(binary), f"--config={config}", "--bind-address=127.0.0.1", f"--secure-port={free_port()}"]
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def launch(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)

    def pids(self) -> dict[str, int]:
        return {"kube-scheduler": self.proc.pid} if self.proc is not None and self.proc.poll() is None else {}

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def log_hint(self) -> str:
        return f"log: {self.log_path}"


# --- one run ----------------------------------------------------------------------------------------------------


@dataclass
class RunOptions:
    peer_binary: Path | None = None
    log_dir: Path | None = None
    status_timeout: float = 30.0  # seconds after the last binding to wait for Events / PodGroup statuses
    settle: float = 2.0  # contention: seconds to keep watching after the expected bindings
    workers: int = 8  # threads creating objects


def _create_objects(api: Api, shape: Shape, scheduler_name: str, workers: int) -> dict[str, int]:
    """Nodes, namespace, PodGroups, pods. Returns the gangs' minMember by name."""

    def node(i: int) -> None:
        name = f"node-{i:05d}"
        api.request(
            "POST",
            "/api/v1/nodes",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            },
        )
        res = {"cpu": str(shape.node_cpu), "memory": NODE_MEMORY, "pods": str(NODE_PODS), GPU: str(shape.node_gpus)}
        api.request(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            {"status": {"capacity": res, "allocatable": res}},
            content_type="application/merge-patch+json",
        )

    gangs = {f"gang-{g:05d}": shape.gang_size for g in range(shape.gangs)}

    def podgroup(name: str) -> None:
        api.request(
            "POST",
            f"/apis/{PG_GROUP}/{PG_VERSION}/namespaces/{NAMESPACE}/podgroups",
            {
                "apiVersion": f"{PG_GROUP}/{PG_VERSION}",
                "kind": "PodGroup",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {"minMember": shape.gang_size},
            },
        )

    def pod(spec: tuple[str, str]) -> None:
        name, gang = spec
        requests = {"cpu": f"{POD_CPU_MILLI}m", "memory": POD_MEMORY}
        limits: dict[str, str] = {}
        if shape.pod_gpus:
            requests[GPU] = limits[GPU] = str(shape.pod_gpus)
        api.request(
            "POST",
            f"/api/v1/namespaces/{NAMESPACE}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": NAMESPACE, "labels": {PG_LABEL: gang} if gang else {}},
                "spec": {
                    "schedulerName": scheduler_name,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": requests, "limits": limits},
                        }
                    ],
                },
            },
        )

    api.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    )
    pods = [(f"{g}-{i}", g) for g in gangs for i in range(shape.gang_size)]
    pods += [(f"pod-{i:05d}", "") for i in range(shape.plain_pods)]
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(node, range(shape.nodes)))
        list(pool.map(podgroup, gangs))
        list(pool.map(pod, pods))
    return gangs


def install_podgroup_crd(api: Api, timeout: float = 30.0) -> None:
    """Only the scheduling.x-k8s.io PodGroup CRD (deploy/crds; the upstream schema's fields): what a cluster
    running scheduler-plugins has. Phalanx's watches of the other PodGroup APIs see 404 and back off."""
    import yaml

    crd = yaml.safe_load((REPO / "deploy" / "crds" / f"{PG_GROUP}_podgroups.yaml").read_text())
    api.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    deadline = time.monotonic() + timeout
    while True:
        resp = api.http.request(
            "GET", f"{api.base}/apis/{PG_GROUP}/{PG_VERSION}/podgroups?limit=1", headers=api.headers
        )
        if resp.status == 200:
            return
        if time.monotonic() > deadline:
            raise BenchK8sError(f"CRD podgroups.{PG_GROUP} not served after {timeout:g}s")
        time.sleep(0.05)


def _pid_of(server: Any, attr: str) -> int | None:
    proc = getattr(server, attr, None)  # LocalApiServer keeps its children as _apiserver / _etcd
    return getattr(proc, "pid", None)


def correctness(
    pods: list[dict[str, Any]], nodes: list[dict[str, Any]], gangs: dict[str, int], expected: int
) -> dict[str, Any]:
    alloc: dict[str, dict[str, int]] = {}
    for n in nodes:
        a = (n.get("status") or {}).get("allocatable") or {}
        alloc[n["metadata"]["name"]] = {
            "cpu": _cpu_milli(a.get("cpu", "0")),
            "memory": _bytes(a.get("memory", "0")),
            "pods": int(a.get("pods", "0")),
            "gpu": int(a.get(GPU, "0")),
        }
    used: dict[str, dict[str, int]] = {}
    per_gang: dict[str, int] = {g: 0 for g in gangs}
    bound = 0
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        if not node:
            continue
        bound += 1
        gang = ((p.get("metadata") or {}).get("labels") or {}).get(PG_LABEL)
        if gang:
            per_gang[gang] = per_gang.get(gang, 0) + 1
        u = used.setdefault(node, {"cpu": 0, "memory": 0, "pods": 0, "gpu": 0})
        for c in p["spec"].get("containers") or []:
            req = (c.get("resources") or {}).get("requests") or {}
            u["cpu"] += _cpu_milli(req.get("cpu", "0"))
            u["memory"] += _bytes(req.get("memory", "0"))
            u["gpu"] += int(req.get(GPU, "0"))
        u["pods"] += 1
    over = sorted(
        n
        for n, u in used.items()
        if n not in alloc or any(u[k] > alloc[n][k] for k in ("cpu", "memory", "pods", "gpu"))
    )
    partial = sorted(g for g, c in per_gang.items() if 0 < c < gangs[g])
    return {
        "pods_bound": bound,
        "pods_expected": expected,
        "expected_bound": bound == expected,
        "gangs_total": len(gangs),
        "gangs_bound": sum(1 for g, c in per_gang.items() if c >= gangs[g]),
        "partial_gangs": len(partial),
        "partial_gang_names": partial[:10],
        "overcommitted_nodes": len(over),
        "overcommitted_node_names": over[:10],
        "ok": bound == expected and not partial and not over,
    }


def run_once(
    shape: Shape, which: str, opts: RunOptions, progress: Callable[[str], None] = lambda s: None
) -> dict[str, Any]:
    from phalanx.bench.procs import ProcSample, machine_busy_s, proc_sample, reset_peak_rss
    from phalanx.testing.apiserver import LocalApiServer

    base_dir = Path(tempfile.mkdtemp(prefix=f"bench-k8s-{shape.name}-{which}-", dir=opts.log_dir))
    t_setup = time.monotonic()
    server = LocalApiServer().start()
    sut: SchedulerUnderTest | None = None
    watches: list[Watch] = []
    try:
        api = Api(server)
        install_podgroup_crd(api)
        gangs = _create_objects(api, shape, SCHEDULER_NAMES[which], opts.workers)
        listing = api.get(f"/api/v1/namespaces/{NAMESPACE}/pods?limit=1")
        pods_rv = listing["metadata"]["resourceVersion"]
        if len(api.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]) != shape.pods:
            raise BenchK8sError("not every pod was created")
        seen = Observed()
        ev_rv = api.get(f"/api/v1/namespaces/{NAMESPACE}/events?limit=1")["metadata"]["resourceVersion"]
        pg_rv = api.get(f"/apis/{PG_GROUP}/{PG_VERSION}/namespaces/{NAMESPACE}/podgroups?limit=1")["metadata"][
            "resourceVersion"
        ]
        watches = [
            Watch(api, f"/api/v1/namespaces/{NAMESPACE}/pods", pods_rv, seen.on_pod),
            Watch(
                api, f"/api/v1/namespaces/{NAMESPACE}/events", ev_rv, seen.on_event, "&fieldSelector=reason%3DScheduled"
            ),
            Watch(api, f"/apis/{PG_GROUP}/{PG_VERSION}/namespaces/{NAMESPACE}/podgroups", pg_rv, seen.on_podgroup),
        ]
        for w in watches:
            w.start()
        kubeconfig = str(server.kubeconfig_path)
        if which == PHALANX:
            sut = PhalanxUnderTest(kubeconfig, base_dir / "phalanx")
        else:
            if opts.peer_binary is None:
                raise BenchK8sError("no peer-scheduler binary (hack/build-peer-scheduler.sh)")
            sut = PeerUnderTest(opts.peer_binary, kubeconfig, base_dir / "peer")
        time.sleep(0.5)  # the watches are established
        api_pid, etcd_pid = _pid_of(server, "_apiserver"), _pid_of(server, "_etcd")
        peak_reset = bool(api_pid and reset_peak_rss(api_pid))
        api_before = proc_sample(api_pid) if api_pid else ProcSample()
        etcd_before = proc_sample(etcd_pid) if etcd_pid else ProcSample()
        metrics_before = api.metrics()
        setup_s = time.monotonic() - t_setup

        # -- launch and watch ------------------------------------------------------------------------------
        launch = time.monotonic()
        harness_cpu0 = time.process_time()
        busy0 = machine_busy_s()
        sut.launch()
        reached: float | None = None
        deadline = launch + shape.timeout
        samples: dict[str, ProcSample] = {}
        startup_cpu: dict[str, float] | None = None  # each process's CPU when the first binding was seen
        busy_at_first: float | None = None
        last_report = launch
        while True:
            now = time.monotonic()
            with seen.lock:
                n_bound = len(seen.bound)
            for name, pid in sut.pids().items():  # keep the latest sample of each process while it lives
                s = proc_sample(pid)
                if s.alive:
                    samples[name] = s
            if n_bound and startup_cpu is None:
                startup_cpu = {k: s.cpu_s for k, s in samples.items()}
                busy_at_first = machine_busy_s() - busy0
            if n_bound >= shape.expected_bound and reached is None:
                reached = now
            if reached is not None and (not shape.contention or now - reached >= opts.settle):
                break
            if now > deadline:
                break
            if not sut.alive():
                raise BenchK8sError(f"{which} exited during the run ({sut.log_hint()})")
            if now - last_report > 15:
                progress(f"      ... {n_bound:,}/{shape.expected_bound:,} bound after {now - launch:.0f}s")
                last_report = now
            time.sleep(0.05)
        # -- statuses after the binding ----------------------------------------------------------------------
        status_deadline = time.monotonic() + opts.status_timeout
        while time.monotonic() < status_deadline:
            with seen.lock:
                bound = set(seen.bound)
                events_done = bound <= set(seen.event)
                gangs_bound = {g for g in gangs if sum(1 for i in range(gangs[g]) if f"{g}-{i}" in bound) >= gangs[g]}
                pg_done = which != PHALANX or gangs_bound <= set(seen.podgroup)
            if events_done and pg_done:
                break
            time.sleep(0.1)
        time.sleep(0.5)
        for name, pid in sut.pids().items():
            s = proc_sample(pid)
            if s.alive:
                samples[name] = s
        api_after = proc_sample(api_pid) if api_pid else ProcSample()
        etcd_after = proc_sample(etcd_pid) if etcd_pid else ProcSample()
        metrics_after = api.metrics()
        window_s = time.monotonic() - launch
        harness_cpu = time.process_time() - harness_cpu0
        busy = machine_busy_s() - busy0
        alive_at_end = sut.alive()
        sut.stop()
        for w in watches:
            w.stop()
        watch_errors = [w.error for w in watches if w.error]
        # -- correctness from a final LIST ---------------------------------------------------------------
        pods = api.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
        nodes = api.get("/api/v1/nodes")["items"]
        check = correctness(pods, nodes, gangs, shape.expected_bound)
    finally:
        for w in watches:
            w.stop()
        if sut is not None:
            sut.stop()
        server.stop()
    if opts.log_dir is None:
        shutil.rmtree(base_dir, ignore_errors=True)

    with seen.lock:
        bind_times = sorted(t - launch for t in seen.bound.values())
        first = bind_times[0] if bind_times else None
        last = bind_times[-1] if bind_times else None
        event_lag = [seen.event[p] - t for p, t in seen.bound.items() if p in seen.event]
        cond_lag = [seen.condition[p] - t for p, t in seen.bound.items() if p in seen.condition]
        pg_lag = []
        for g, t_pg in seen.podgroup.items():
            members = sorted(seen.bound[f"{g}-{i}"] for i in range(gangs.get(g, 0)) if f"{g}-{i}" in seen.bound)
            if len(members) >= gangs.get(g, 1):
                pg_lag.append(t_pg - members[gangs[g] - 1])
        events_missing = len(set(seen.bound) - set(seen.event))
        sources = sorted(seen.event_sources)
        pg_writes = seen.podgroup_writes
    requests = _delta(metrics_after, metrics_before)
    n = max(shape.pods, 1)
    total_requests = sum(requests.values())
    sched_cpu = sum(s.cpu_s for s in samples.values())
    sched_peak = sum(s.peak_rss_mib for s in samples.values())
    bound_n = check["pods_bound"]
    return {
        "workload": shape.name,
        "scheduler": which,
        "pods": shape.pods,
        "setup_s": round(setup_s, 1),
        "launch_to_last_binding_s": round(last, 3) if last is not None else None,
        "first_binding_s": round(first, 3) if first is not None else None,
        "binding_span_s": round(last - first, 3) if first is not None and last is not None else None,
        "pods_per_second": round(bound_n / last, 1) if last else None,
        "pods_per_second_after_first": round((bound_n - 1) / (last - first), 1)
        if first is not None and last is not None and last > first
        else None,
        "bind_time_s": _dist(bind_times),
        "status_lag_ms": {
            "scheduled_event": _dist(event_lag, 1000, 1),
            "pod_condition": _dist(cond_lag, 1000, 1),
            "podgroup_status": _dist(pg_lag, 1000, 1),
        },
        "scheduled_events_missing": events_missing,
        "event_sources": sources,
        "podgroup_status_writes_seen": pg_writes,
        "api_requests": requests,
        "api_requests_total": total_requests,
        "api_requests_per_pod": round(total_requests / n, 3),
        "api_requests_per_pod_by_kind": {k: round(v / n, 3) for k, v in requests.items()},
        "processes": {
            k: {"cpu_s": round(s.cpu_s, 2), "peak_rss_mib": round(s.peak_rss_mib, 1)}
            for k, s in sorted(samples.items())
        },
        # Launch to the first binding (sampled every 50 ms): each process's CPU, and the whole machine's.
        "startup_cpu_s": {k: round(v, 3) for k, v in sorted((startup_cpu or {}).items())},
        "machine_busy_to_first_binding_s": round(busy_at_first, 2) if busy_at_first is not None else None,
        "scheduler_cpu_s": round(sched_cpu, 2),
        "scheduler_peak_rss_mib": round(sched_peak, 1),
        "apiserver_cpu_s": round(api_after.cpu_s - api_before.cpu_s, 2),
        "apiserver_peak_rss_mib": round(api_after.peak_rss_mib, 1),
        "apiserver_peak_rss_reset_at_launch": peak_reset,
        "etcd_cpu_s": round(etcd_after.cpu_s - etcd_before.cpu_s, 2),
        "harness_cpu_s": round(harness_cpu, 2),  # this process (watches, polling) over the window
        # CPU the machine spent on anything else over the window (other users' jobs): a noisy-run flag.
        "other_cpu_s": round(
            max(
                0.0,
                busy
                - sched_cpu
                - harness_cpu
                - (api_after.cpu_s - api_before.cpu_s)
                - (etcd_after.cpu_s - etcd_before.cpu_s),
            ),
            2,
        ),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "window_s": round(window_s, 2),
        "scheduler_alive_at_end": alive_at_end,
        "watch_errors": watch_errors,
        "correctness": check,
    }


# --- many runs, medians, the table ------------------------------------------------------------------------------

MEDIAN_FIELDS: list[tuple[str, str, str]] = [
    # (label, dotted path in a run, format)
    ("pods/s (launch -> last binding)", "pods_per_second", "{:,.1f}"),
    ("launch -> last binding, s", "launch_to_last_binding_s", "{:.2f}"),
    ("launch -> first binding, s", "first_binding_s", "{:.2f}"),
    ("pods/s (first -> last binding)", "pods_per_second_after_first", "{:,.1f}"),
    ("pod bound at, p50 s", "bind_time_s.p50", "{:.2f}"),
    ("pod bound at, p95 s", "bind_time_s.p95", "{:.2f}"),
    ("Scheduled Event lag p50, ms", "status_lag_ms.scheduled_event.p50", "{:,.0f}"),
    ("Scheduled Event lag p95, ms", "status_lag_ms.scheduled_event.p95", "{:,.0f}"),
    ("Scheduled Event lag max, ms", "status_lag_ms.scheduled_event.max", "{:,.0f}"),
    ("PodScheduled condition lag p95, ms", "status_lag_ms.pod_condition.p95", "{:,.0f}"),
    ("PodGroup status lag p50, ms", "status_lag_ms.podgroup_status.p50", "{:,.0f}"),
    ("PodGroup status lag p95, ms", "status_lag_ms.podgroup_status.p95", "{:,.0f}"),
    ("PodGroup status lag max, ms", "status_lag_ms.podgroup_status.max", "{:,.0f}"),
    ("API requests per pod (all)", "api_requests_per_pod", "{:.2f}"),
    ("scheduler CPU, s (all processes)", "scheduler_cpu_s", "{:.1f}"),
    ("scheduler peak RSS, MiB (sum)", "scheduler_peak_rss_mib", "{:,.0f}"),
    ("kube-apiserver CPU, s", "apiserver_cpu_s", "{:.1f}"),
    ("kube-apiserver peak RSS, MiB", "apiserver_peak_rss_mib", "{:,.0f}"),
    ("etcd CPU, s", "etcd_cpu_s", "{:.1f}"),
    ("bench harness CPU, s (its watches)", "harness_cpu_s", "{:.1f}"),
    ("measured window, s (to statuses settled)", "window_s", "{:.1f}"),
    ("other processes' CPU in the window, s", "other_cpu_s", "{:.1f}"),
]

NOTES = [
    "Times are from the scheduler's launch (its processes started; Phalanx's include Python start-up, Redis and",
    "the three services becoming healthy) as seen by this harness's watches on the same machine. Status lag: the",
    "pod's `Scheduled` Event (or PodScheduled condition, or its gang's PodGroup status saying scheduled) seen",
    "after the pod's binding was seen; negative: the Event arrived on its watch before the pod update did.",
    "The peer's Coscheduling plugin writes no PodGroup status (scheduler-plugins' separate controller does, and",
    "only counts Running pods, which need a kubelet): '-' there. API requests: kube-apiserver's",
    "apiserver_request_total over the measured window divided by the workload's pods (WATCH counted at its end;",
    "a few are kube-apiserver's own, e.g. its lease). CPU and peak RSS: /proc (VmHWM; kube-apiserver's reset",
    "at launch); Phalanx's processes are redis + queue + binder + scheduler.",
]


def _get(run: dict[str, Any], path: str) -> Any:
    cur: Any = run
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _median(values: list[Any]) -> float | None:
    xs = [float(v) for v in values if isinstance(v, (int, float))]
    return statistics.median(xs) if xs else None


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per workload and scheduler: medians over the repeats; ratios of medians (phalanx / peer)."""
    out: dict[str, Any] = {}
    failed = [r for r in runs if "error" in r]
    runs = [r for r in runs if "error" not in r]
    for wl in dict.fromkeys(r["workload"] for r in runs + failed):
        entry: dict[str, Any] = {}
        for which in (PHALANX, PEER):
            rs = [r for r in runs if r["workload"] == wl and r["scheduler"] == which]
            errors = [r["error"] for r in failed if r["workload"] == wl and r["scheduler"] == which]
            if not rs:
                if errors:
                    entry[which] = {"runs": 0, "failed_runs": len(errors), "errors": errors}
                continue
            med = {path: _median([_get(r, path) for r in rs]) for _, path, _ in MEDIAN_FIELDS}
            kinds = sorted({k for r in rs for k in r["api_requests_per_pod_by_kind"]})
            med_kinds = {k: _median([r["api_requests_per_pod_by_kind"].get(k, 0.0) for r in rs]) for k in kinds}
            procs = sorted({p for r in rs for p in r["processes"]})
            med_procs = {
                p: {m: _median([r["processes"].get(p, {}).get(m) for r in rs]) for m in ("cpu_s", "peak_rss_mib")}
                for p in procs
            }
            entry[which] = {
                "runs": len(rs),
                "failed_runs": len(errors),
                "errors": errors,
                "median": med,
                "api_requests_per_pod_by_kind": med_kinds,
                "processes": med_procs,
                "all_correct": all(r["correctness"]["ok"] for r in rs),
                "partial_gangs_max": max(r["correctness"]["partial_gangs"] for r in rs),
                "overcommitted_nodes_max": max(r["correctness"]["overcommitted_nodes"] for r in rs),
                "pods_bound": [r["correctness"]["pods_bound"] for r in rs],
                "gangs_bound": [r["correctness"]["gangs_bound"] for r in rs],
                "event_sources": sorted({s for r in rs for s in r["event_sources"]}),
            }
        if entry.get(PHALANX, {}).get("runs") and entry.get(PEER, {}).get("runs"):
            ratios = {}
            for _, path, _ in MEDIAN_FIELDS:
                a, b = entry[PHALANX]["median"][path], entry[PEER]["median"][path]
                ratios[path] = round(a / b, 3) if a is not None and b is not None and a > 0 and b > 0 else None
            entry["ratio_phalanx_over_peer"] = ratios
        out[wl] = entry
    return out


def _fmt(fmt: str, v: Any) -> str:
    return "-" if v is None else fmt.format(v)


def table(summary: dict[str, Any], shapes: dict[str, Shape]) -> str:
    lines: list[str] = []
    for wl, entry in summary.items():
        shape = shapes.get(wl)
        lines.append(f"== {wl}: {shape.describe() if shape else ''}")
        cols = [c for c in (PHALANX, PEER) if entry.get(c, {}).get("runs")]
        for c in (PHALANX, PEER):
            if entry.get(c, {}).get("failed_runs"):
                lines.append(f"  {c}: {entry[c]['failed_runs']} run(s) FAILED: {entry[c]['errors'][0][:300]}")
        if not cols:
            lines.append("")
            continue
        has_ratio = "ratio_phalanx_over_peer" in entry
        head = (
            f"{'median of ' + str(max(entry[c]['runs'] for c in cols)) + ' run(s)':48}"
            + "".join(f"{c:>14}" for c in cols)
            + (f"{'phalanx/peer':>14}" if has_ratio else "")
        )
        lines.append(head)
        for label, path, fmt in MEDIAN_FIELDS:
            vals = [entry[c]["median"][path] for c in cols]
            if all(v is None for v in vals):
                continue
            row = f"{label:48}" + "".join(f"{_fmt(fmt, v):>14}" for v in vals)
            if has_ratio:
                r = entry["ratio_phalanx_over_peer"][path]
                row += f"{_fmt('{:.2f}x', r):>14}"
            lines.append(row)
        kinds = sorted(
            {k for c in cols for k in entry[c]["api_requests_per_pod_by_kind"]},
            key=lambda k: -max(entry[c]["api_requests_per_pod_by_kind"].get(k) or 0 for c in cols),
        )
        lines.append("  API requests per pod, by verb and resource:")
        other = [0.0 for _ in cols]
        n_other = 0
        for k in kinds:
            vals = [entry[c]["api_requests_per_pod_by_kind"].get(k) or 0.0 for c in cols]
            if max(vals) < 0.02:  # informers' initial LISTs and the like: one line for all of them
                other = [o + v for o, v in zip(other, vals)]
                n_other += 1
                continue
            lines.append(f"    {k:44}" + "".join(f"{v:>14.3f}" for v in vals))
        if n_other:
            lines.append(f"    {f'{n_other} others (< 0.02 each)':44}" + "".join(f"{v:>14.3f}" for v in other))
        lines.append("  processes (CPU s / peak RSS MiB):")
        for c in cols:
            procs = ", ".join(
                f"{p} {_fmt('{:.1f}', m['cpu_s'])} / {_fmt('{:.0f}', m['peak_rss_mib'])}"
                for p, m in entry[c]["processes"].items()
            )
            lines.append(f"    {c:10} {procs}")
        lines.append("  correctness:")
        for c in cols:
            e = entry[c]
            lines.append(
                f"    {c:10} {'OK' if e['all_correct'] else 'FAILED'}: pods bound {e['pods_bound']}, "
                f"gangs bound {e['gangs_bound']}, partial gangs (max) {e['partial_gangs_max']}, "
                f"over-committed nodes (max) {e['overcommitted_nodes_max']}"
            )
        lines.append("")
    lines += NOTES
    return "\n".join(lines)


def versions(peer_binary: Path | None) -> dict[str, Any]:
    from phalanx.testing.apiserver import find_k8s_bin_dir, pinned_k8s_version

    out: dict[str, Any] = {"kube_apiserver": pinned_k8s_version() or ""}
    bin_dir = find_k8s_bin_dir()
    if bin_dir is not None:
        try:
            out["kube_apiserver"] = subprocess.run(
                [str(bin_dir / "kube-apiserver"), "--version"], capture_output=True, text=True, timeout=20
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    out["peer"] = {**peer_versions(), "binary": str(peer_binary) if peer_binary else None}
    if peer_binary is not None:
        try:
            out["peer"]["version"] = subprocess.run(
                [str(peer_binary), "--version"], capture_output=True, text=True, timeout=20
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        from importlib.metadata import version

        out["phalanx"] = version("phalanx")
    except Exception:
        out["phalanx"] = ""
    return out


def run_suite(
    shapes: list[Shape], schedulers: list[str], repeats: int, opts: RunOptions, progress: Callable[[str], None]
) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    total = len(shapes) * len(schedulers) * repeats
    k = 0
    for rep in range(repeats):
        for shape in shapes:
            order = schedulers if rep % 2 == 0 else list(reversed(schedulers))  # alternate who goes first
            for which in order:
                k += 1
                progress(f"[{k}/{total}] {shape.name} {which} (run {rep + 1}/{repeats}) ...")
                t = time.monotonic()
                try:
                    r = run_once(shape, which, opts, progress)
                except Exception as exc:  # one failed run is reported, the others still run
                    runs.append(
                        {
                            "workload": shape.name,
                            "scheduler": which,
                            "repeat": rep + 1,
                            "error": f"{type(exc).__name__}: {exc}"[:2000],
                        }
                    )
                    progress(f"      FAILED: {type(exc).__name__}: {str(exc)[:500]}")
                    continue
                r["repeat"] = rep + 1
                runs.append(r)
                c = r["correctness"]
                lag = r["status_lag_ms"]["scheduled_event"]["p95"]
                progress(
                    f"      {c['pods_bound']:,}/{c['pods_expected']:,} bound, last binding "
                    f"{_fmt('{:.2f}', r['launch_to_last_binding_s'])}s after launch "
                    f"({_fmt('{:,.0f}', r['pods_per_second'])} pods/s), first {_fmt('{:.2f}', r['first_binding_s'])}s, "
                    f"Event lag p95 {_fmt('{:,.0f}', lag)} ms, {r['api_requests_per_pod']:.2f} requests/pod, "
                    f"CPU {r['scheduler_cpu_s']:.1f}s, RSS {r['scheduler_peak_rss_mib']:,.0f} MiB, "
                    f"{'OK' if c['ok'] else 'NOT OK'} (setup {r['setup_s']:.0f}s, total {time.monotonic() - t:.0f}s)"
                )
    return runs


def header(doc: dict[str, Any]) -> str:
    m, v = doc["machine"], doc["versions"]
    peer = v.get("peer") or {}
    lines = [
        f"phalanx bench-k8s{' --quick' if doc['quick'] else ''}: Phalanx vs kube-scheduler + Coscheduling on a real "
        f"kube-apiserver, {doc['repeats']} repeat(s), medians",
        f"machine: {m.get('cpu_count')} cores ({m.get('cpu_model')}), {m.get('platform')}, Python {m.get('python')}, "
        f"redis-server {m.get('redis_server')}",
        f"commit {str(m.get('git_commit'))[:12]}{' (dirty)' if m.get('git_dirty') else ''}, {m.get('date')}"
        + (f" ({m['note']})" if m.get("note") else ""),
        f"API server: {v.get('kube_apiserver')} + etcd (fresh for every run, LocalApiServer), no kubelet",
        f"phalanx {v.get('phalanx')}: ChaosStack (redis + queue, binder, scheduler processes, mutual TLS), "
        f"schedulerName {SCHEDULER_NAMES[PHALANX]}",
        f"peer: kube-scheduler {peer.get('kube_scheduler', '?')} + scheduler-plugins {peer.get('scheduler_plugins', '?')} "
        f"Coscheduling (queueSort, preFilter, postFilter, permit, reserve; permitWaitingTimeSeconds "
        f"{PEER_PERMIT_WAIT_SECONDS}; clientConnection qps/burst 5000; no leader election)"
        + ("" if doc.get("peer_ran") else f" -- NOT RUN: {doc.get('peer_skipped_reason')}"),
        "gangs: scheduling.x-k8s.io/v1alpha1 PodGroup per gang, pods labelled scheduling.x-k8s.io/pod-group",
        "workloads:",
        *(f"  {s['name']}: {s['describe']}" for s in doc["workloads"]),
        "",
    ]
    return "\n".join(lines)


def main(args: Any) -> int:
    from phalanx.bench.report import machine
    from phalanx.testing.apiserver import APISERVER_MISSING_REASON, apiserver_available

    if args.render:  # the table again from a JSON this command wrote (e.g. after a format change)
        doc = json.loads(Path(args.render).read_text())
        by_name = {w["name"]: Shape(**{k: w[k] for k in Shape.__dataclass_fields__}) for w in doc["workloads"]}
        doc["summary"] = summarize(doc["runs"])
        text = header(doc) + table(doc["summary"], by_name)
        print(text)
        if args.table:
            Path(args.table).write_text(text + "\n")
        if args.output:
            Path(args.output).write_text(json.dumps(doc, indent=2) + "\n")
        return 0
    from phalanx.bench.extra import extra_missing

    if (missing := extra_missing()) is not None:
        print(f"phalanx bench-k8s: {missing}", file=sys.stderr)
        return 2
    shapes = workloads(quick=args.quick, large=args.large)
    if args.only:
        shapes = [s for s in shapes if any(o in s.name for o in args.only)]
    if args.list:
        for s in shapes:
            print(f"{s.name:26} {s.describe()}")
        return 0
    if not shapes:
        print("phalanx bench-k8s: no workload selected", file=sys.stderr)
        return 2
    if not apiserver_available():
        print(f"phalanx bench-k8s: {APISERVER_MISSING_REASON}", file=sys.stderr)
        return 2
    repeats = 1 if args.quick and args.repeats is None else (args.repeats or 3)
    schedulers = [s.strip() for s in args.schedulers.split(",") if s.strip()]
    peer_binary = Path(args.peer_binary) if args.peer_binary else peer_binary_path()
    peer_skipped = ""
    if PEER in schedulers and (peer_binary is None or not os.access(peer_binary, os.X_OK)):
        peer_skipped = (
            "peer-scheduler binary not found (build it with hack/build-peer-scheduler.sh, "
            "or set PHALANX_PEER_SCHEDULER)"
        )
        print(f"phalanx bench-k8s: SKIPPING the peer half: {peer_skipped}", file=sys.stderr)
        schedulers = [s for s in schedulers if s != PEER]
    if not schedulers:
        print("phalanx bench-k8s: no scheduler to run", file=sys.stderr)
        return 2

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    info = machine()
    progress(
        f"phalanx bench-k8s: {len(shapes)} workload(s) x {', '.join(schedulers)} x {repeats} repeat(s) on "
        f"{info['cpu_count']} cores ({info['cpu_model']})"
    )
    opts = RunOptions(peer_binary=peer_binary, log_dir=Path(args.log_dir) if args.log_dir else None)
    if opts.log_dir is not None:
        opts.log_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    runs = run_suite(shapes, schedulers, repeats, opts, progress)
    summary = summarize(runs)
    doc = {
        "machine": info,
        "versions": versions(peer_binary if PEER in schedulers else None),
        "quick": bool(args.quick),
        "repeats": repeats,
        "schedulers": schedulers,
        "peer_ran": PEER in schedulers,
        "peer_skipped_reason": peer_skipped,
        "peer_config": peer_config("<kubeconfig>"),
        "workloads": [{**asdict(s), "pods": s.pods, "describe": s.describe()} for s in shapes],
        "seconds": round(time.monotonic() - started, 1),
        "summary": summary,
        "runs": runs,
    }
    text = header(doc) + table(summary, {s.name: s for s in shapes})
    print(text)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(doc, indent=2) + "\n")
    if args.table:
        Path(args.table).parent.mkdir(parents=True, exist_ok=True)
        Path(args.table).write_text(text + "\n")
    bad = [
        f"{r['workload']}/{r['scheduler']}#{r['repeat']}" for r in runs if "error" in r or not r["correctness"]["ok"]
    ]
    if bad:
        progress(f"phalanx bench-k8s: correctness failed in {', '.join(bad)}")
    return 1 if bad and args.strict else 0


def add_bench_k8s_command(sub: Any) -> None:
    p = sub.add_parser(
        "bench-k8s",
        help="Phalanx vs kube-scheduler + Coscheduling on a real kube-apiserver",
        description="For each workload and scheduler (alternating), on a fresh etcd + kube-apiserver: fake "
        "nodes, all PodGroups and pods created first, then the scheduler launched; measures time to "
        "the first and last binding, status lag, API requests per pod, CPU and memory, and checks "
        "that no gang is partial and no node over-committed. Needs `make tools`; the peer needs "
        "hack/build-peer-scheduler.sh (skipped, and said so, when it is missing).",
    )
    p.add_argument(
        "--repeats", type=int, default=None, metavar="N", help="runs per workload and scheduler (default 3; quick: 1)"
    )
    p.add_argument("--quick", action="store_true", help="small shapes, 1 repeat (CI smoke)")
    p.add_argument("--large", action="store_true", help="also the 5,000-node variants")
    p.add_argument(
        "--only", action="append", metavar="NAME", help="only workloads whose name contains NAME (repeatable)"
    )
    p.add_argument("--schedulers", default=f"{PHALANX},{PEER}", help="comma-separated: phalanx, peer (default both)")
    p.add_argument(
        "--peer-binary", metavar="PATH", help="the peer scheduler (default: hack/build-peer-scheduler.sh's cache)"
    )
    p.add_argument("--output", "-o", metavar="FILE.json", help="write runs, medians and ratios as JSON")
    p.add_argument("--table", metavar="FILE.txt", help="write the printed table here")
    p.add_argument("--log-dir", metavar="DIR", help="keep each run's scheduler logs and configs here")
    p.add_argument("--strict", action="store_true", help="exit 1 if any run fails a correctness check")
    p.add_argument("--list", action="store_true", help="list the workloads and exit")
    p.add_argument(
        "--render",
        metavar="FILE.json",
        help="print (and --table/--output) the summary of an earlier run's JSON again; runs nothing",
    )
    p.set_defaults(func=main)
