"""Redis behind Sentinel, for real: a primary, two replicas and three Sentinels (redis-server processes).

The services' client follows a failover (and says so in one log line); a client left on a primary that was
frozen while a replica was promoted moves to the new one; the binder's WAIT keeps a bind intent written on
such a deposed primary from reaching the API server.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from builders import model_node, model_pod

from phalanx.backends.base import BindFailure
from phalanx.backends.simulated import SimulatedBackend
from phalanx.binding.batch_binder import BOUND, PENDING, BatchBinder
from phalanx.binding.lock import FencedLock
from phalanx.model.binding import Assignment
from phalanx.state.connection import connect, parse_sentinels
from phalanx.state.durability import ReplicaWait
from phalanx.state.keys import Keys, rel_gang_assumed
from phalanx.state.store import StateStore
from phalanx.state.txn import Txn
from phalanx.testing.redis_sentinel import MASTER_NAME, SentinelCluster

pytestmark = pytest.mark.integration

PASSWORD = "sentinel-test-pw"


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> Iterator[SentinelCluster]:
    min_replicas = getattr(request, "param", 1)
    c = SentinelCluster(password=PASSWORD, min_replicas_to_write=min_replicas).start()
    try:
        yield c
    finally:
        c.stop()


def through_sentinel(c: SentinelCluster, timeout: float = 1.0) -> redis.Redis:
    return connect(
        "", password_file=str(c.password_file()), sentinel=parse_sentinels(c.sentinel_addresses, MASTER_NAME, timeout)
    )


def write_until_accepted(client: redis.Redis, key: str, value: str, seconds: float = 30.0) -> float:
    """Seconds until a write succeeds (the services retry the same way: the next step, the next bind)."""
    started = time.monotonic()
    while True:
        try:
            client.set(key, value)
            return time.monotonic() - started
        except redis.RedisError:
            if time.monotonic() - started > seconds:
                raise
            time.sleep(0.1)


def test_the_client_follows_a_killed_primary_and_names_the_new_one(
    cluster: SentinelCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="phalanx.state.connection")
    client = through_sentinel(cluster)
    client.set("before", "1")
    assert client.execute_command("WAIT", 2, 2000) == 2
    old = cluster.nodes[0].port
    cluster.kill(0)
    took = write_until_accepted(client, "after", "2")
    new = cluster.primary_index()
    assert new != 0 and took < 15
    assert cluster.client(new).get("before") == "1" and cluster.client(new).get("after") == "2"
    moved = [r.getMessage() for r in caplog.records if "Redis failover" in r.getMessage()]
    assert moved == [
        f"Redis failover: primary '{MASTER_NAME}' is now 127.0.0.1:{cluster.nodes[new].port} (was 127.0.0.1:{old}); "
        "using it from this command on"
    ]
    cluster.restart(0)  # comes back as a replica of the new primary, never as a second primary
    deadline = time.monotonic() + 10
    while cluster.client(0).info("replication")["role"] != "slave":
        assert time.monotonic() < deadline, "the restarted node did not come back as a replica"
        time.sleep(0.1)


def test_a_client_left_on_a_frozen_primary_writes_to_the_promoted_one_once_it_runs_again(
    cluster: SentinelCluster,
) -> None:
    """SIGSTOP is a partition as far as the Sentinels can tell. Thawed, the old primary still calls itself
    primary for some 10 s; it refuses writes (min-replicas-to-write: its replicas follow the new one), and
    the client takes that refusal as a cue to ask the Sentinels again."""
    client = through_sentinel(cluster)
    client.set("k", "before")  # the pool now holds a connection to the primary
    cluster.freeze(0)
    new = cluster.wait_failover(cluster.nodes[0].port)
    cluster.thaw(0)
    assert cluster.client(0).info("replication")["role"] == "master"  # not demoted yet
    write_until_accepted(client, "k", "after", seconds=10)
    assert cluster.client(new).get("k") == "after"
    assert cluster.client(0).get("k") == "before"  # nothing reached the deposed primary


def test_wait_confirms_a_write_on_a_replica_and_gives_up_after_its_timeout(cluster: SentinelCluster) -> None:
    client = through_sentinel(cluster)
    keys = Keys("durable")
    # A replica acknowledges within milliseconds on a quiet machine; 2 s leaves a loaded one room.
    assert ReplicaWait(client, keys.bind_durable, replicas=1, timeout=2.0).confirm().ok
    wait = ReplicaWait(client, keys.bind_durable, replicas=1, timeout=0.5)
    for i in (1, 2):
        cluster.freeze(i)
    try:
        started = time.monotonic()
        durable = wait.confirm()
        assert not durable.ok and durable.acknowledged == 0
        assert time.monotonic() - started < 3.0  # bounded: the timeout, or an immediate NOREPLICAS
        assert "on 0 of the 1 Redis replica(s) required" in durable.reason()
    finally:
        for i in (1, 2):
            cluster.thaw(i)


# -- the binder on a deposed primary --------------------------------------------------------------------


class RecordingApi(SimulatedBackend):
    """Writes bindings outside Redis, like the Kubernetes backend (so the binder records an intent first),
    and records every pod it was asked to bind: what would have reached the API server."""

    transactional = False

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        super().__init__(client, keys)
        self.calls: list[str] = []

    def bind(self, assignments: list[Any], now: float, commit: Txn) -> dict[str, BindFailure]:
        self.calls += [a.pod_key for a in assignments]
        return super().bind(assignments, now, commit)


GANG = "default/train"
NAMES = ["w0", "w1"]


def reserve_gang(store: StateStore) -> list[Assignment]:
    store.put_nodes([model_node("n1", cpu=4)])
    pods = [model_pod(n, "train", requests={"cpu": 500}) for n in NAMES]
    txn = Txn(reserve=[StateStore.reserve_entry(p, "n1") for p in pods])
    txn.cmd("SADD", rel_gang_assumed(GANG), *[p.key for p in pods])
    store.must_apply(txn)
    return [Assignment(pod_key=p.key, uid=p.name, node="n1", gang=GANG) for p in pods]


def bind_on_deposed_primary(cluster: SentinelCluster, durable: bool) -> tuple[RecordingApi, Any, int]:
    """A binder connected straight to the primary (as one whose connection predates the failover); the
    gang is reserved and replicated; the primary is frozen, a replica promoted, and the bind sent while it
    is frozen; then it runs again. Returns the backend, the bind's outcome (results or the exception) and
    the new primary's index."""
    keys = Keys("deposed")
    old = cluster.client(0, socket_timeout=30)
    store = StateStore(old, keys)
    batch = reserve_gang(store)
    assert old.execute_command("WAIT", 2, 2000) == 2
    api = RecordingApi(old, keys)
    wait = ReplicaWait(old, keys.bind_durable, replicas=1, timeout=0.5) if durable else None
    binder = BatchBinder(store, api, FencedLock(old, keys), wait)
    cluster.freeze(0)
    new = cluster.wait_failover(cluster.nodes[0].port)
    outcome: dict[str, Any] = {}

    def bind() -> None:
        try:
            outcome["results"] = binder.bind(batch, True, now=1.0)[0]
        except redis.RedisError as exc:
            outcome["results"] = exc

    thread = threading.Thread(target=bind)
    thread.start()
    time.sleep(0.3)  # the binder's first command waits in the frozen primary's socket
    cluster.thaw(0)
    thread.join(timeout=30)
    assert not thread.is_alive()
    return api, outcome["results"], new


@pytest.mark.parametrize("cluster", [0], indirect=True)
def test_without_wait_a_binder_on_a_deposed_primary_would_bind(cluster: SentinelCluster) -> None:
    """What the WAIT is for: with no min-replicas-to-write and no WAIT, the deposed primary takes the
    intent and the bindings go out, though the promoted replica has the pods merely assumed."""
    api, results, new = bind_on_deposed_primary(cluster, durable=False)
    assert sorted(api.calls) == [f"default/{n}" for n in NAMES]
    assert {r.status for r in results} == {BOUND}
    states = cluster.client(new).hgetall(Keys("deposed").podstate)
    assert set(states.values()) == {"assumed"}  # the new primary never heard of it


@pytest.mark.parametrize("cluster", [0], indirect=True)
def test_wait_keeps_a_binder_on_a_deposed_primary_from_binding(cluster: SentinelCluster) -> None:
    api, results, new = bind_on_deposed_primary(cluster, durable=True)
    assert api.calls == []
    assert {r.status for r in results} == {PENDING}
    assert all("replica" in r.message for r in results)
    assert set(cluster.client(new).hgetall(Keys("deposed").podstate).values()) == {"assumed"}


def test_min_replicas_to_write_refuses_the_deposed_primary_too(cluster: SentinelCluster) -> None:
    """As deployed (min-replicas-to-write 1), with the WAIT as well: nothing reaches the API server."""
    api, results, _ = bind_on_deposed_primary(cluster, durable=True)
    assert api.calls == []
    if not isinstance(results, Exception):
        assert BOUND not in {r.status for r in results}
