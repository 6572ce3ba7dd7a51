"""What the bind intent's WAIT costs per bind, measured on a real primary with replicas on this machine.

The binder's careful path as it runs against Kubernetes (mutex, reservation read, intent, bindings,
commit), with a backend that writes outside Redis and answers at once: the difference between binds with
and without `ReplicaWait` is the WAIT's round trip and the replica's acknowledgement, nothing else.
The two kinds alternate, so a neighbour's load on the shared cores hits both alike.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

from phalanx.backends.base import BindFailure
from phalanx.backends.simulated import SimulatedBackend
from phalanx.bench.stats import percentile
from phalanx.binding.batch_binder import BOUND, BatchBinder
from phalanx.binding.lock import FencedLock
from phalanx.model.binding import Assignment
from phalanx.model.objects import NodeInfo, PodInfo
from phalanx.state.connection import connect, parse_sentinels
from phalanx.state.durability import ReplicaWait
from phalanx.state.keys import Keys, rel_gang_assumed
from phalanx.state.store import StateStore
from phalanx.state.txn import Txn
from phalanx.testing.redis_sentinel import MASTER_NAME, SentinelCluster


class _OutsideRedis(SimulatedBackend):
    """Bindings written "elsewhere" at no cost: the binder records its intent first, as for Kubernetes."""

    transactional = False

    def bind(self, assignments: list[Any], now: float, commit: Txn) -> dict[str, BindFailure]:
        return {}


@dataclass
class WaitCost:
    binds: int  # per kind
    pods_per_bind: int
    replicas: int  # in the cluster; WAIT asks for 1
    without_p50_ms: float
    without_p99_ms: float
    without_mean_ms: float
    with_p50_ms: float
    with_p99_ms: float
    with_mean_ms: float

    @property
    def added_p50_ms(self) -> float:
        return self.with_p50_ms - self.without_p50_ms

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "added_p50_ms": round(self.added_p50_ms, 3)}

    def text(self) -> str:
        return (
            f"WAIT 1 replica on the bind intent ({self.replicas} replicas, {self.binds} binds of {self.pods_per_bind} "
            f"pods each way): per bind p50 {self.without_p50_ms:.2f} -> {self.with_p50_ms:.2f} ms "
            f"(+{self.added_p50_ms:.2f} ms), p99 {self.without_p99_ms:.2f} -> {self.with_p99_ms:.2f} ms, "
            f"mean {self.without_mean_ms:.2f} -> {self.with_mean_ms:.2f} ms"
        )


def _node(name: str) -> NodeInfo:
    return NodeInfo(name=name, allocatable={"cpu": 10**9, "pods": 10**9})


def measure(binds: int = 300, pods_per_bind: int = 4) -> WaitCost:
    cluster = SentinelCluster(password="bind-wait-bench").start()
    try:
        client = connect(
            "",
            password_file=str(cluster.password_file()),
            sentinel=parse_sentinels(cluster.sentinel_addresses, MASTER_NAME),
        )
        keys = Keys("bindwait")
        store = StateStore(client, keys)
        store.put_nodes([_node("n1")])
        lock = FencedLock(client, keys)
        backend = _OutsideRedis(client, keys)
        plain = BatchBinder(store, backend, lock)
        waiting = BatchBinder(store, backend, lock, ReplicaWait(client, keys.bind_durable, 1, 1.0))
        times: dict[bool, list[float]] = {False: [], True: []}
        for i in range(2 * binds + 20):
            durable = i % 2 == 1
            gang = f"default/g{i}"
            pods = [
                PodInfo(name=f"g{i}-{j}", namespace="default", requests={"cpu": 1, "pods": 1000}, gang=gang)
                for j in range(pods_per_bind)
            ]
            txn = Txn(reserve=[StateStore.reserve_entry(p, "n1") for p in pods])
            txn.cmd("SADD", rel_gang_assumed(gang), *[p.key for p in pods])
            store.must_apply(txn)
            batch = [Assignment(pod_key=p.key, uid=p.name, node="n1", gang=gang) for p in pods]
            started = time.perf_counter()
            results, _ = (waiting if durable else plain).bind(batch, True, now=float(i))
            took = time.perf_counter() - started
            if {r.status for r in results} != {BOUND}:
                raise RuntimeError(f"bind {i} did not bind: {results}")
            if i >= 20:  # the first ones warm the scripts and connections
                times[durable].append(took * 1000)
        client.close()
    finally:
        cluster.stop()

    def stats(xs: list[float]) -> tuple[float, float, float]:
        return percentile(xs, 50) or 0.0, percentile(xs, 99) or 0.0, statistics.fmean(xs)

    w50, w99, wm = stats(times[False])
    d50, d99, dm = stats(times[True])
    return WaitCost(binds, pods_per_bind, cluster.replicas, w50, w99, wm, d50, d99, dm)
