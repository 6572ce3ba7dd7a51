"""docker-compose.yml + docker-compose.observability.yml, up for real: a gang goes through the stack.

The stack (conftest.py) runs the services on the wall clock with the simulated backend, as compose defines
them: mutual TLS between them, Redis with a password, traces to the collector and on to Jaeger. This test
plays the cluster from the host with the simulator's certificate (taken from the certs volume, as the
compose file's header tells an operator to): it registers two nodes and two gangs through the scheduler's
API, hands their pods to the queue, and then reads back what happened, three ways:

- Redis: the simulated backend's bind log (the binds an API server would have received);
- the services: the scheduler's ListGangs and the three /metrics endpoints;
- Jaeger's HTTP API: the bound gang's path is one trace with spans from all three services.

It also looks inside each service's container: the certificate volumes give it its own key and no other.

The gang that cannot fit (three pods that each need most of a node, on two nodes) must bind nothing:
all-or-nothing across the real services, not a partial placement.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
import redis
from compose_e2e import Stack

from phalanx.model.objects import GangMode, GangSpec, NodeInfo, PodInfo
from phalanx.rpc.clients import QueueClient, SchedulerClient
from phalanx.security.tls import Security
from phalanx.state.keys import Keys

pytestmark = pytest.mark.timeout(3600)  # the first run builds Go binaries and images

NS = "e2e"
MI = 2**20 * 1000  # quantities are milli-units: 1Mi of memory
SLOT = 1000  # one of a node's "pods"
NODE: dict[str, int] = {"cpu": 4000, "memory": 16 * 1024 * MI, "pods": 110 * SLOT}
SERVICES = ("phalanx-queue", "phalanx-scheduler", "phalanx-binder")
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, every: float = 1.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout:g}s")
        time.sleep(every)


def gang(name: str, size: int, cpu: int, now: float) -> tuple[GangSpec, list[PodInfo]]:
    spec = GangSpec(
        namespace=NS,
        name=name,
        min_available=size,
        total_number=size,
        mode=GangMode.STRICT,
        created_at=now,
        source="e2e",
    )
    pods = [
        PodInfo(
            namespace=NS,
            name=f"{name}-{i}",
            uid=f"uid-{name}-{i}",
            created_at=now,
            requests={"cpu": cpu, "memory": 512 * MI, "pods": SLOT},
            gang=spec.key,
            gang_created_at=now,
        )
        for i in range(size)
    ]
    return spec, pods


@pytest.fixture(scope="module")
def run(stack: Stack) -> Iterator[dict[str, Any]]:
    """Feeds the workload once; yields what the tests read back from."""
    sim_tls = stack.copy_out("certs:/certs/phalanx-simulator", "simulator-tls")
    password = stack.copy_out("certs:/certs/redis/password", "redis-password").read_text().strip()
    security = Security.tls(sim_tls)
    queue = QueueClient(f"127.0.0.1:{stack.ports['PHALANX_QUEUE_HOST_PORT']}", security, timeout=30)
    scheduler = SchedulerClient(f"127.0.0.1:{stack.ports['PHALANX_SCHEDULER_HOST_PORT']}", security, timeout=30)
    client = redis.Redis(
        host="127.0.0.1", port=stack.ports["REDIS_HOST_PORT"], password=password, decode_responses=True
    )
    now = time.time()
    nodes = [NodeInfo("node-a", dict(NODE)), NodeInfo("node-b", dict(NODE))]
    # 4 x 1.5 CPU needs both 4-CPU nodes; 3 x 3 CPU never fits (one per node at most).
    train, train_pods = gang("train", 4, 1500, now)
    big, big_pods = gang("too-big", 3, 3000, now)
    try:
        scheduler.apply(now, nodes=nodes, gangs=[train, big])
        added = queue.add(big_pods + train_pods, time.time())
        assert not added.rejected, list(added.rejected)
        binds_key = Keys("phalanx").sim_binds

        def train_bound() -> list[dict[str, Any]] | None:
            binds = [json.loads(b) for b in client.lrange(binds_key, 0, -1)]
            return binds if sum(b["pod"].startswith(f"{NS}/train-") for b in binds) == len(train_pods) else None

        start = time.monotonic()
        binds = wait_for("the gang's four pods bound", train_bound, timeout=120, every=0.2)
        bound_after = time.monotonic() - start
        time.sleep(3)  # a bind of the other gang, which must not happen, would have had time to show
        binds = [json.loads(b) for b in client.lrange(binds_key, 0, -1)]
        yield {
            "binds": binds,
            "bound_after": bound_after,
            "train": train_pods,
            "big": big_pods,
            "scheduler": scheduler,
            "stack": stack,
        }
    finally:
        queue.close()
        scheduler.close()
        client.close()


def test_gang_bound_all_or_nothing(run: dict[str, Any]) -> None:
    binds = run["binds"]
    by_pod = {b["pod"]: b["node"] for b in binds}
    assert len(by_pod) == len(binds), f"a pod bound twice: {binds}"
    train = {p.key for p in run["train"]}
    assert train <= set(by_pod), f"not every pod of the gang is bound: {binds}"
    assert not {p.key for p in run["big"]} & set(by_pod), f"part of a gang that cannot fit was bound: {binds}"
    assert set(by_pod) == train
    # The capacity holds on each node, and the gang needed both.
    per_node: dict[str, int] = {}
    for pod in run["train"]:
        per_node[by_pod[pod.key]] = per_node.get(by_pod[pod.key], 0) + pod.requests["cpu"]
    assert set(per_node) == {"node-a", "node-b"}
    assert all(cpu <= NODE["cpu"] for cpu in per_node.values()), per_node
    print(
        f"\ngang of 4 bound {run['bound_after']:.1f}s after its pods were added: "
        + ", ".join(f"{k} -> {v}" for k, v in sorted(by_pod.items()))
    )


def test_services_report_the_gang(run: dict[str, Any]) -> None:
    """The same, through the scheduler's API (the simulator's certificate may read it)."""
    gangs = {g.key: g for g in run["scheduler"].list_gangs()}
    train, big = gangs[f"{NS}/train"], gangs[f"{NS}/too-big"]
    assert (train.bound, train.satisfied) == (4, True), train
    assert (big.bound, big.assumed, big.satisfied) == (0, 0, False), big


@pytest.mark.parametrize("service", ["queue", "scheduler", "binder"])
def test_each_service_reads_only_its_own_key(stack: Stack, service: str) -> None:
    """The certificate volumes as deployed: a service's container holds its own key (and Redis' password when
    it talks to Redis), no other identity's key and not the CA's."""
    find = (
        "find / \\( -path /proc -o -path /sys -o -path /dev -o -path /opt \\) -prune -o "
        "\\( -name '*.key' -o -path '*auth*/password' \\) -print 2>/dev/null || true"
    )
    found = sorted(stack.compose("exec", "-T", service, "sh", "-c", find).stdout.split())
    expected = ["/etc/phalanx/tls/tls.key"]
    if service != "queue":
        expected.insert(0, "/etc/phalanx/redis-auth/password")
    assert found == expected
    subject = stack.compose(
        "exec",
        "-T",
        service,
        "/opt/phalanx/bin/python",
        "-c",
        "from cryptography import x509; print(x509.load_pem_x509_certificate("
        "open('/etc/phalanx/tls/tls.crt', 'rb').read()).subject.rfc4514_string())",
    ).stdout
    assert subject.strip() == f"CN=phalanx-{service}"


def scrape(port: int) -> dict[str, float]:
    """`name{labels}` -> value from a Prometheus text page (comments skipped)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_metrics_count_the_binds(run: dict[str, Any]) -> None:
    ports = run["stack"].ports
    binder = scrape(ports["PHALANX_BINDER_METRICS_HOST_PORT"])
    assert binder['phalanx_bind_results_total{result="bound"}'] == len(run["binds"]) == 4
    scheduler = scrape(ports["PHALANX_SCHEDULER_METRICS_HOST_PORT"])
    assert scheduler["phalanx_gang_wait_duration_seconds_count"] == 1  # gangs bound
    assert scheduler["phalanx_gangs_partially_bound"] == 0
    # The gang that cannot fit is still the queue's: waiting, or popped for another try at this instant.
    queue = scrape(ports["PHALANX_QUEUE_METRICS_HOST_PORT"])
    waiting = sum(v for k, v in queue.items() if k.startswith("scheduler_pending_pods{"))
    assert waiting + queue["phalanx_queue_in_flight_pods"] == len(run["big"]), queue


def jaeger_traces(port: int, service: str, tags: dict[str, str]) -> list[dict[str, Any]]:
    """Traces with a span of `service` carrying `tags` (Jaeger's query API; the scheduler's idle polls are
    traces of their own, so a search without tags can miss the gang's behind them)."""
    query = urllib.parse.urlencode({"service": service, "lookback": "1h", "limit": "20", "tags": json.dumps(tags)})
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/traces?{query}", timeout=10) as resp:
        return list(json.load(resp)["data"] or [])


def tag(span: dict[str, Any], key: str) -> Any:
    return next((t["value"] for t in span.get("tags", []) if t["key"] == key), None)


def test_gang_trace_spans_three_services(run: dict[str, Any]) -> None:
    port = run["stack"].ports["JAEGER_HOST_PORT"]
    gang_key = f"{NS}/train"

    def complete() -> list[dict[str, Any]] | None:
        try:
            traces = jaeger_traces(port, "phalanx-scheduler", {"phalanx.gang": gang_key})
        except OSError:
            return None
        mine = [t for t in traces if any(tag(s, "phalanx.gang") == gang_key for s in t["spans"])]
        # Spans arrive in batches (the services' exporter, then the collector's): wait for the bind.
        if mine and all(any(s["operationName"] == "phalanx.binder.bind_batch" for s in t["spans"]) for t in mine):
            return mine
        return None

    mine = wait_for("the gang's trace in Jaeger, with its bind", complete, timeout=120, every=2)
    assert len(mine) == 1, f"the gang's path is {len(mine)} traces"
    trace = mine[0]
    services = {trace["processes"][s["processID"]]["serviceName"] for s in trace["spans"]}
    assert set(SERVICES) <= services, services
    spans = {s["spanID"]: s for s in trace["spans"]}

    def service_of(span: dict[str, Any]) -> str:
        return str(trace["processes"][span["processID"]]["serviceName"])

    # bind_batch (binder) -> dispatch_bind (scheduler) -> enqueue (queue), the hops carried in the messages.
    [bind] = [s for s in spans.values() if s["operationName"] == "phalanx.binder.bind_batch"]
    assert tag(bind, "phalanx.pods") == 4
    chain = []
    span = bind
    while True:
        parents = [r["spanID"] for r in span.get("references", []) if r["refType"] == "CHILD_OF"]
        if not parents or parents[0] not in spans:
            break
        span = spans[parents[0]]
        chain.append((service_of(span), span["operationName"]))
    assert ("phalanx-scheduler", "phalanx.scheduler.dispatch_bind") in chain, chain
    assert chain[-1] == ("phalanx-queue", "phalanx.queue.enqueue"), chain
    print(
        f"\nJaeger trace {trace['traceID']}: {len(spans)} spans from {', '.join(sorted(services))}; "
        f"bind path: {' <- '.join(name for _, name in [(service_of(bind), bind['operationName']), *chain])}"
    )
