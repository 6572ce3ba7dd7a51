"""Two scheduler replicas against a real kube-apiserver: leader election on a coordination.k8s.io/v1 Lease
and the fencing of the leader's writes to Redis.

- only the leader schedules; the standby serves health (ready) and writes nothing;
- the leader crashes (its loop, feed and server stop, the Lease is not released) in the middle of a gang
  workload: the standby takes over after the lease duration, and every gang ends bound whole, within the
  nodes' capacity; the takeover time is measured and printed;
- a leader paused past its Lease (its renewals stop, its threads go on) is fenced out at its first write
  after the new leader claimed its term, and steps down; a write under the old term changes nothing;
- a graceful stop releases the Lease: the standby takes over within a retry period;
- the RBAC rules of deploy/manifests (a Role: create leases; get and update the one Lease by name) are
  enough for the election, and do not reach other Leases.

The replicas run in this process as main() wires them (build(standby=True) + Leadership), with short
election timings (lease 4 s, renew deadline 3 s, retry 0.5 s) so that a takeover takes seconds.
"""

from __future__ import annotations

import copy
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import redis
import yaml
from conftest import TLS_DIR, Cluster, GangTrickle, Phalanx, election_flags
from waiting import recording_calls, wait_for

from phalanx.cluster.leader import JITTER_FACTOR
from phalanx.rpc.server import dial
from phalanx.security import tls
from phalanx.security.tls import Security
from phalanx.state.keys import Keys
from phalanx.state.store import FencedOut, StateStore, Txn
from phalanx.testing.apiserver import APISERVER_MISSING_REASON, LocalApiServer, apiserver_available
from phalanx.testing.redis_server import RedisServer
from phalanx.v1 import scheduler_pb2, scheduler_pb2_grpc

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not apiserver_available(), reason=APISERVER_MISSING_REASON),
]

REPO = Path(__file__).resolve().parents[2]
# PHALANX_TEST_LEADER_TIMING="15,10,2" runs them with kube-scheduler's defaults (slower: a takeover takes ~17 s).
LEASE, RENEW, RETRY = (float(x) for x in os.environ.get("PHALANX_TEST_LEADER_TIMING", "4,3,0.5").split(","))
BIND = 30.0


class Replica:
    """One scheduler replica, wired as services/scheduler/__main__.py's main() does with --leader-elect."""

    def __init__(self, stack: Phalanx, name: str, lease_namespace: str, lease_name: str) -> None:
        from phalanx_scheduler import __main__ as scheduler_main

        self.name = name
        args = scheduler_main.parser().parse_args(
            [
                *stack.scheduler_flags(default_wait=60),
                *election_flags(name, lease_namespace, lease_name, LEASE, RENEW, RETRY),
            ]
        )
        self.server, self.servicer = scheduler_main.build(args, standby=True)
        self.server.start()
        self.lost: list[str] = []
        self.leadership = scheduler_main.Leadership(args, self.server, self.servicer, on_lost=self.lost.append).start()
        self.down = False

    @property
    def store(self) -> StateStore:
        return self.servicer.scheduler.store  # type: ignore[no-any-return]

    def scheduling(self) -> bool:
        return self.leadership.scheduling_since is not None and not self.leadership.closed

    def _close(self) -> None:
        self.server.stop(0)
        for client in (self.servicer.scheduler.queue, self.servicer.scheduler.binder):
            client.close()
        self.down = True

    def crash(self) -> None:
        """Everything stops at once; the Lease is left as it was (not released)."""
        if not self.down:
            self.leadership.abandon()
            self._close()

    def stop(self) -> None:
        """A graceful stop (SIGTERM): scheduling stops, the Lease is released."""
        if not self.down:
            self.leadership.stop()
            self._close()


@pytest.fixture
def stack(apiserver: LocalApiServer, redis_server: RedisServer, cluster: Cluster, tid: str) -> Iterator[Phalanx]:
    """Queue and binder (no scheduler: the test's replicas are the schedulers)."""
    s = Phalanx(apiserver, redis_server.url, f"k8s-{tid}", cluster.scheduler_name)
    s.start_queue("127.0.0.1:0")
    s.start_binder("127.0.0.1:0")
    yield s
    s.stop()


@pytest.fixture
def replicas(stack: Phalanx, cluster: Cluster) -> Iterator[list[Replica]]:
    """Two replicas on one Lease in the test's own namespace."""
    namespace = cluster.namespace("lease")
    started = [
        Replica(stack, f"sched-{cluster.tid}-{i}", namespace, f"{cluster.scheduler_name}-scheduler") for i in range(2)
    ]
    yield started
    for r in started:
        r.crash()


def leader_of(replicas: list[Replica], timeout: float = 20.0) -> Replica:
    wait_for(lambda: sum(r.scheduling() for r in replicas) == 1, timeout, "one replica scheduling")
    [leader] = [r for r in replicas if r.scheduling()]
    return leader


def lease(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    from kubernetes import client

    api = client.CoordinationV1Api(cluster.core.api_client)
    return json.loads(api.read_namespaced_lease(name, namespace, _preload_content=False).data)["spec"]  # type: ignore[no-any-return]


def gpus_used(cluster: Cluster, namespace: str, names: list[str]) -> dict[str, int]:
    return cluster.gpus_by_node(namespace, names)


# --- (a) one leader schedules ---------------------------------------------------------------------------------


def test_only_the_leader_schedules(cluster: Cluster, stack: Phalanx, replicas: list[Replica]) -> None:
    leader = leader_of(replicas)
    [standby] = [r for r in replicas if r is not leader]
    cfg = leader.leadership.config
    spec = lease(cluster, cfg.namespace, cfg.name)
    assert spec["holderIdentity"] == leader.leadership.identity
    assert spec["holderIdentity"].startswith(leader.name + "_")
    assert stack.store.leader_term() == leader.store.term == spec["leaseTransitions"]

    ns = cluster.namespace()
    for i in range(2):
        cluster.node(f"n{i}", gpus=8)
    gangs = {f"g{i}": cluster.koord_pods(ns, f"g{i}", 4, min_available=4) for i in range(4)}
    for names in gangs.values():
        wait_for(lambda names=names: cluster.all_bound(ns, names), BIND, "gang bound")
    with recording_calls(standby.leadership.elector, "on_tick") as looks:  # a tick: one look at the Lease
        wait_for(lambda: len(looks) >= 2, 10 * RETRY + 5, "the standby to look at the Lease twice more")
    # The standby took no part: no term, no feed, no loop, no memory of the cluster, and yet ready.
    assert standby.store.term is None and standby.leadership.scheduling is None
    assert not standby.servicer.scheduler.assumed and not standby.servicer.scheduler.bound
    assert not standby.servicer.scheduler.snapshot.index
    assert standby.server.monitor.evaluate() == ("", ""), "a standby is live and ready"
    with dial(standby.server.address, Security.tls(TLS_DIR / tls.OPERATOR), tls.SCHEDULER) as ch:
        with pytest.raises(grpc.RpcError) as err:  # not an empty list: it holds no gangs, the leader does
            scheduler_pb2_grpc.SchedulerStub(ch).ListGangs(scheduler_pb2.ListGangsRequest(), timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "standby" in (err.value.details() or "")
    assert leader.server.monitor.evaluate() == ("", "")
    assert lease(cluster, cfg.namespace, cfg.name)["holderIdentity"] == leader.leadership.identity
    assert not leader.lost and not standby.lost


# --- (b) the leader crashes in the middle of a gang workload ------------------------------------------------------


def test_the_standby_takes_over_a_crashed_leaders_gang_workload(
    cluster: Cluster, stack: Phalanx, replicas: list[Replica]
) -> None:
    leader = leader_of(replicas)
    [standby] = [r for r in replicas if r is not leader]
    ns = cluster.namespace()
    nodes = [cluster.node(f"n{i}", gpus=8) for i in range(10)]  # 80 GPUs: exactly the 20 gangs of 4
    trickle = GangTrickle(cluster, ns).start()  # 20 gangs of 4, one every 0.25 s, before and after the crash
    gangs = trickle.gangs
    wait_for(lambda: trickle.bound_gangs() >= 4, BIND, "the leader bound some gangs")
    held = set(stack.reserved())  # what the leader had decided (reserved or bound) when it crashed
    crashed_at = time.monotonic()
    leader.crash()

    def new_binding() -> bool:  # a pod the dead leader had not decided, bound now: the new leader's work
        for names in list(gangs.values()):
            for name in names:
                if f"{ns}/{name}" not in held and cluster.node_of(ns, name):
                    return True
        return False

    wait_for(lambda: standby.leadership.elector.leading.is_set(), 3 * LEASE + 10, "the standby leads")
    leads_after = time.monotonic() - crashed_at
    wait_for(new_binding, BIND, "the new leader binds")
    binds_after = time.monotonic() - crashed_at
    all_pods = trickle.join(30)
    wait_for(lambda: cluster.all_bound(ns, all_pods), 90, "every gang bound")
    done_after = time.monotonic() - crashed_at
    print(
        f"\ntakeover: the standby led {leads_after:.1f}s after the crash, bound its first pod after "
        f"{binds_after:.1f}s, every gang after {done_after:.1f}s (lease {LEASE:g}s, retry {RETRY:g}s)"
    )
    # Whole gangs, within capacity, nothing bound twice, Redis in agreement.
    for gang_name, names in gangs.items():
        assert cluster.all_bound(ns, names), f"gang {gang_name} partly bound"
    used = gpus_used(cluster, ns, all_pods)
    assert set(used) <= set(nodes) and all(v <= 8 for v in used.values()), used
    assert sum(used.values()) == 80
    wait_for(
        lambda: (
            {k: s for k, (_, s) in stack.reserved().items() if k.startswith(f"{ns}/")}
            == {f"{ns}/{n}": "bound" for n in all_pods}
        ),
        BIND,
        "Redis records every pod bound",
    )
    for name in all_pods:
        assert stack.reserved()[f"{ns}/{name}"][0] == cluster.node_of(ns, name)
    assert standby.store.term == stack.store.leader_term() and standby.store.term is not None
    assert standby.store.term > (leader.store.term or 0)
    assert leads_after < LEASE + 4 * RETRY + 5, "taken over after about the lease duration"
    # The Lease's own bound: the standby saw the last renewal within a jittered retry period of it and tries
    # when that record expires (not a retry period later); the takeover (term, recovery from Redis, the
    # feed's first list) then binds within 2 s.
    assert binds_after < LEASE + (1 + JITTER_FACTOR) * RETRY + 2.0, "first binding within the lease's bound"
    assert binds_after - leads_after < 2.0, "the new leader binds within 2 s of winning the Lease"
    assert not standby.lost


# --- (c) a deposed leader cannot commit --------------------------------------------------------------------------


def test_a_paused_leader_is_fenced_out_and_steps_down(
    cluster: Cluster, stack: Phalanx, replicas: list[Replica]
) -> None:
    leader = leader_of(replicas)
    [standby] = [r for r in replicas if r is not leader]
    old_term = leader.store.term
    assert old_term is not None
    ns = cluster.namespace()
    cluster.node("n0", gpus=8)
    first = cluster.koord_pods(ns, "before", 2, min_available=2)
    wait_for(lambda: cluster.all_bound(ns, first), BIND, "gang bound by the first leader")

    # The leader's renewals stop (a long pause, or cut off from the API server) while its loop and feed go on:
    # it still believes it leads when the standby takes the expired Lease and claims the next term. Its next
    # write (the feed's, the loop's, or the once-a-second check of Redis' identity) is refused, and it steps
    # down on its own, without having noticed the Lease change.
    leader.leadership._stop.set()
    wait_for(lambda: standby.leadership.elector.leading.is_set(), 3 * LEASE + 20, "the standby took over")
    cluster.node("n1", gpus=8)  # something for the old leader's feed to write
    wait_for(lambda: leader.lost, 20, "the old leader stepped down")
    assert "fenced out" in leader.lost[0] and f"term {old_term} is older" in leader.lost[0], leader.lost
    assert leader.leadership.elector.leading.is_set(), "it was fenced, not told by the Lease"
    assert leader.leadership.closed and leader.servicer.scheduler.store._deposed
    wait_for(lambda: standby.scheduling(), 20, "the new leader schedules")
    assert stack.store.leader_term() == standby.store.term and standby.store.term > old_term

    # A commit under the old term is refused and changes nothing.
    keys = Keys(stack.prefix)
    stale = StateStore(redis.Redis.from_url(stack.redis_url, decode_responses=True), keys, term=old_term)
    client = stack.store.redis
    before = {k: client.dump(k) for k in sorted(client.scan_iter(match=keys.pattern))}
    with pytest.raises(FencedOut):
        stale.must_apply(Txn(reserve=[["x/y", f"{cluster.tid}-n0", {"cpu": 1}, json.dumps({"node": "n0"})]]))
    with pytest.raises(FencedOut):
        stale.remove_gangs(["x/y"])
    with pytest.raises(FencedOut):
        stale.repair_usage()
    after = {k: client.dump(k) for k in sorted(client.scan_iter(match=keys.pattern))}
    assert after == before
    stale.redis.close()

    # The new leader schedules what comes next, on both nodes.
    second = cluster.koord_pods(ns, "after", 12, min_available=12)
    wait_for(lambda: cluster.all_bound(ns, second), BIND, "gang bound by the new leader")
    assert set(gpus_used(cluster, ns, second)) == {f"{cluster.tid}-n0", f"{cluster.tid}-n1"}
    assert not standby.lost


# --- a graceful stop hands over at once ---------------------------------------------------------------------------


def test_a_graceful_stop_releases_the_lease(cluster: Cluster, stack: Phalanx, replicas: list[Replica]) -> None:
    leader = leader_of(replicas)
    [standby] = [r for r in replicas if r is not leader]
    cfg = leader.leadership.config
    stopped_at = time.monotonic()
    leader.stop()
    assert lease(cluster, cfg.namespace, cfg.name)["holderIdentity"] in ("", standby.leadership.identity)
    wait_for(lambda: standby.leadership.elector.leading.is_set(), 10, "the standby leads")
    took = time.monotonic() - stopped_at
    print(f"\nhandover after a graceful stop: {took:.1f}s")
    assert took < LEASE, "a released Lease is taken without waiting out its duration"
    assert not leader.lost, "stopping is not losing"
    ns = cluster.namespace()
    cluster.node("n0", gpus=8)
    names = cluster.koord_pods(ns, "g", 4, min_available=4)
    wait_for(lambda: cluster.all_bound(ns, names), BIND, "the new leader schedules")


# --- the deployed RBAC is enough, and no more -----------------------------------------------------------------------


def _manifest_role() -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((REPO / "deploy" / "manifests" / "20-rbac.yaml").read_text()) if d]
    [role] = [d for d in docs if d["kind"] == "Role"]
    return role


def test_the_manifests_lease_role_suffices(apiserver: LocalApiServer, cluster: Cluster) -> None:
    """A ServiceAccount with exactly the Role of deploy/manifests/20-rbac.yaml (lease name and namespace
    adapted) runs the election: create, get, update, release; other Leases stay out of reach."""
    import kubernetes.client
    from kubernetes.client.rest import ApiException

    from phalanx.cluster.leader import ElectionConfig, LeaderElector

    ns = cluster.namespace("rbac")
    role = copy.deepcopy(_manifest_role())
    name = f"{cluster.scheduler_name}-scheduler"
    role["metadata"] = {"name": "lease", "namespace": ns}
    for rule in role["rules"]:
        if "resourceNames" in rule:
            assert rule["resourceNames"] == ["phalanx-scheduler"]
            rule["resourceNames"] = [name]
    admin = apiserver.api_client()
    rbac = kubernetes.client.RbacAuthorizationV1Api(admin)
    rbac.create_namespaced_role(ns, role)
    cluster.core.create_namespaced_service_account(ns, {"metadata": {"name": "sched"}})
    rbac.create_namespaced_role_binding(
        ns,
        {
            "metadata": {"name": "lease"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "lease"},
            "subjects": [{"kind": "ServiceAccount", "name": "sched", "namespace": ns}],
        },
    )
    token = cluster.core.create_namespaced_service_account_token("sched", ns, {"spec": {"expirationSeconds": 3600}})
    config = copy.copy(admin.configuration)
    config.api_key = {"authorization": f"Bearer {token.status.token}"}
    config.api_key_prefix = {}
    config.refresh_api_key_hook = None  # the kubeconfig loader's hook would put the admin token back
    api = kubernetes.client.CoordinationV1Api(kubernetes.client.ApiClient(config))

    started: list[int] = []
    e = LeaderElector(
        api,
        ElectionConfig(ns, name, "sched-0_x", LEASE, RENEW, RETRY),
        on_started_leading=started.append,
        on_stopped_leading=lambda why: None,
    )
    stop = threading.Event()
    thread = e.start(stop)
    wait_for(lambda: started, 20, "leading with the Role's rights (create)")
    renewed = e._renewed_at
    wait_for(lambda: e._renewed_at > renewed, 10, "renewing (update by name)")
    stop.set()
    thread.join(10)
    assert e.release(), "released (update by name)"
    for call in (
        lambda: api.read_namespaced_lease("other", ns),
        lambda: api.read_namespaced_lease(name, "default"),
        lambda: api.replace_namespaced_lease("other", ns, {"metadata": {"name": "other"}}),
    ):
        with pytest.raises(ApiException) as exc:
            call()
        assert exc.value.status == 403
