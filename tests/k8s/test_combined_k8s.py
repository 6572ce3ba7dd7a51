"""The combined layout (phalanx-combined: the queue, binder and scheduler in one process) against a real
kube-apiserver, with two replicas under leader election as the chart's `layout: combined` runs them: each
replica has its own queue and binder, and its scheduler talks only to those.

The leader's process is SIGKILLed in the middle of a gang workload (its queue, its binder and any batch it
was binding die with it): the standby's scheduler takes the Lease, its rebuild fills its own queue (empty
until then) from the API server, its binder rolls forward whatever batch the dead one had started (the
intent is in Redis), and every gang ends bound whole within the nodes' capacity. The single-replica kills
(at a random moment, and at the binder's kill point between two pods of a gang) are chaos trials in
test_chaos.py.

In the one process the binder's view of pods and nodes follows the scheduler's feed instead of watching the
same objects itself: shown here with the services built in this test's process as phalanx-combined wires
them (the training-operator's jobs run through that wiring too: test_job_controllers.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import TLS_DIR, Cluster, GangTrickle, Phalanx, election_flags
from waiting import wait_for

from phalanx.security import tls
from phalanx.state.store import StateStore
from phalanx.testing.apiserver import APISERVER_MISSING_REASON, LocalApiServer, apiserver_available
from phalanx.testing.ports import free_ports
from phalanx.testing.redis_server import RedisServer
from phalanx.testing.services import CombinedProcess, ServiceProcess

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not apiserver_available(), reason=APISERVER_MISSING_REASON),
]

LEASE, RENEW, RETRY = 4.0, 3.0, 0.5
BIND = 30.0


def _replica(
    name: str, apiserver: LocalApiServer, redis_url: str, cluster: Cluster, lease_ns: str, run_dir: Path
) -> CombinedProcess:
    """One replica of the chart's combined Deployment: mutual TLS with each service's own certificate, the
    scheduler's --queue and --binder on this replica's own loopback ports."""
    queue_port, binder_port, scheduler_port, *health = free_ports(6)
    kube = ["--backend", "kubernetes", "--kubeconfig", str(apiserver.kubeconfig_path)]
    state = ["--redis-url", redis_url, "--redis-prefix", f"combined-{cluster.tid}"]

    def part(service: str, port: int, health_port: int, flags: list[str]) -> ServiceProcess:
        identity = tls.SERVICE_IDENTITIES[service]
        transport = ["--tls-dir", str(TLS_DIR / identity), "--health-listen", f"127.0.0.1:{health_port}"]
        return ServiceProcess(
            service,
            f"phalanx_{service}",
            ["--clock", "real", *transport, *flags],
            port,
            run_dir / f"{name}-{service}.log",
            health_port=health_port,
        )

    parts = [
        part("queue", queue_port, health[0], ["--backend", "kubernetes"]),
        part(
            "binder",
            binder_port,
            health[1],
            [*state, *kube, "--scheduler-name", cluster.scheduler_name, "--identity", name],
        ),
        part(
            "scheduler",
            scheduler_port,
            health[2],
            [
                *state,
                *kube,
                "--scheduler-name",
                cluster.scheduler_name,
                "--queue",
                f"127.0.0.1:{queue_port}",
                "--binder",
                f"127.0.0.1:{binder_port}",
                "--default-wait",
                "120",
                "--reconcile-interval",
                "1",
                *election_flags(name, lease_ns, f"{cluster.scheduler_name}-scheduler", LEASE, RENEW, RETRY),
            ],
        ),
    ]
    return CombinedProcess.of(parts, run_dir / f"{name}.log", health_port=health[2])


@pytest.fixture
def replicas(
    apiserver: LocalApiServer, redis_server: RedisServer, cluster: Cluster, tmp_path: Path
) -> Iterator[dict[str, CombinedProcess]]:
    lease_ns = cluster.namespace("lease")
    made = {
        f"combined-{cluster.tid}-{i}": _replica(
            f"combined-{cluster.tid}-{i}", apiserver, redis_server.url, cluster, lease_ns, tmp_path
        )
        for i in range(2)
    }
    for process in made.values():
        process.start(wait=False)
    for process in made.values():
        process.wait_healthy(60, health_port=True)
    yield made
    for process in made.values():
        process.stop()


def _holder(cluster: Cluster) -> str:
    """The pod part of the Lease's holderIdentity ("" while none holds it)."""
    from kubernetes import client

    api = client.CoordinationV1Api(cluster.core.api_client)
    lease = json.loads(
        api.read_namespaced_lease(
            f"{cluster.scheduler_name}-scheduler", f"{cluster.tid}-lease", _preload_content=False
        ).data
    )
    holder = (lease.get("spec") or {}).get("holderIdentity") or ""
    return holder.rsplit("_", 1)[0]


def test_the_standby_replica_finishes_a_killed_combined_leaders_gangs(
    cluster: Cluster, redis_server: RedisServer, replicas: dict[str, CombinedProcess]
) -> None:
    wait_for(lambda: _holder(cluster) in replicas, 20, "a replica leads")
    leader_name = _holder(cluster)
    leader = replicas[leader_name]
    [standby_name] = [n for n in replicas if n != leader_name]
    ns = cluster.namespace()
    nodes = [cluster.node(f"n{i}", gpus=8) for i in range(10)]  # 80 GPUs: exactly the 20 gangs of 4
    trickle = GangTrickle(cluster, ns).start()  # 20 gangs of 4, one every 0.25 s
    wait_for(lambda: trickle.bound_gangs() >= 3, BIND, "the leader bound some gangs")
    killed_at = time.monotonic()
    leader.kill()  # SIGKILL: its queue, binder and scheduler at once; the Lease is not released
    wait_for(lambda: _holder(cluster) == standby_name, 3 * LEASE + 10, "the standby leads")
    leads_after = time.monotonic() - killed_at
    all_pods = trickle.join(30)
    wait_for(lambda: cluster.all_bound(ns, all_pods), 90, "every gang bound")
    done_after = time.monotonic() - killed_at
    print(
        f"\ncombined takeover: the standby led {leads_after:.1f}s after the kill, every gang bound after {done_after:.1f}s"
    )
    for gang_name, names in trickle.gangs.items():
        assert cluster.all_bound(ns, names), f"gang {gang_name} partly bound"
    used = cluster.gpus_by_node(ns, all_pods)
    assert set(used) <= set(nodes) and all(v <= 8 for v in used.values()), used
    assert sum(used.values()) == 80
    store = StateStore.from_url(redis_server.url, f"combined-{cluster.tid}")

    def recorded() -> dict[str, str]:
        return {k: r.state for k, r in store.load_pods().items() if k.startswith(f"{ns}/")}

    wait_for(lambda: recorded() == {f"{ns}/{n}": "bound" for n in all_pods}, BIND, "Redis records every pod bound")
    for name in all_pods:
        assert store.load_pods()[f"{ns}/{name}"].node == cluster.node_of(ns, name)
    assert replicas[standby_name].alive()


@pytest.fixture
def combined(apiserver: LocalApiServer, redis_server: RedisServer, cluster: Cluster, tid: str) -> Iterator[Phalanx]:
    stack = Phalanx(apiserver, redis_server.url, f"k8s-{tid}", cluster.scheduler_name, combined=True).start()
    yield stack
    stack.stop()


def test_the_binders_view_follows_the_schedulers_feed(cluster: Cluster, combined: Phalanx) -> None:
    ns = cluster.namespace()
    cluster.node("n1")
    cluster.pod(ns, "theirs", gpus=0, scheduler="default-scheduler")
    view = combined.binder.servicer.backend.view
    assert view.wait_synced(10), "the feed's first lists did not reach the binder's view"
    names = cluster.koord_pods(ns, "train", 4, min_available=4, gpus=0)
    keys = [f"{ns}/{n}" for n in names]
    wait_for(lambda: cluster.all_bound(ns, names), BIND, "the gang to be bound")

    # Every bind was checked from the view (no GET), which no watch of the binder's own filled.
    assert (view.hits, view.misses) == (len(names), 0)
    assert view.watches == 0
    assert all(view.cached(k) for k in keys)
    assert not view.cached(f"{ns}/theirs")  # another scheduler's pod: the feed sees it, the view keeps it out
    assert view.pod(keys[0]) is not None and view.pod(keys[0]).node  # type: ignore[union-attr]  # the binding followed
    cluster.delete_pod(ns, names[0])
    wait_for(lambda: not view.cached(keys[0]), 10, "the deletion to reach the view")
