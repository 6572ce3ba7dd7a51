"""The optimistic Lua transaction, the fenced bind mutex and the batch binder, against a real redis-server."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import process_workers
import pytest
import redis
from builders import model_node, model_pod
from process_workers import CarefulBackend
from waiting import recording_calls, wait_for

from phalanx.backends.base import BindFailure
from phalanx.backends.simulated import SimulatedBackend
from phalanx.binding.batch_binder import BOUND, FAILED, GONE, PENDING, ROLLED_BACK, BatchBinder
from phalanx.binding.lock import FencedLock, LockTimeout
from phalanx.model.objects import PodInfo
from phalanx.state.keys import REL_TIMERS, Keys, node_field, rel_gang_assumed
from phalanx.state.reads import FULL_SCAN_EVERY
from phalanx.state.store import StateStore, Txn
from phalanx.v1 import binder_pb2

GANG = "default/train"


def pod(name: str, cpu: int = 1000, gang: str = "") -> PodInfo:
    """default/`name` asking `cpu` milli-cores and a pod slot, in the gang keyed `gang` (none when empty)."""
    return model_pod(name, gang.removeprefix("default/"), requests={"cpu": cpu})


def reserve(p: PodInfo, node: str) -> list[Any]:
    return StateStore.reserve_entry(p, node)


def used(store: StateStore) -> dict[tuple[str, str], int]:
    return {k: v for k, v in store.load_used().items() if v}


def snapshot_keys(client: redis.Redis, keys: Keys) -> dict[str, Any]:
    """Every key of the prefix with its contents, to show that a refused transaction wrote nothing."""
    out: dict[str, Any] = {}
    for k in client.scan_iter(match=keys.pattern):
        kind = client.type(k)
        out[k] = {
            "hash": client.hgetall,
            "set": client.smembers,
            "zset": lambda x: client.zrange(x, 0, -1, withscores=True),
            "list": lambda x: client.lrange(x, 0, -1),
            "string": client.get,
        }[kind](k)
    return out


@pytest.fixture
def nodes(store: StateStore) -> StateStore:
    store.put_nodes([model_node("n1", cpu=4), model_node("n2", cpu=2)])
    return store


# -- the Lua transaction ----------------------------------------------------------------------------


def test_reserve_within_capacity_writes_record_state_and_usage(nodes: StateStore) -> None:
    ok, reason = nodes.apply(Txn(reserve=[reserve(pod("a", 3000, GANG), "n1")]))
    assert (ok, reason) == (True, "")
    assert used(nodes) == {("n1", "cpu"): 3000, ("n1", "pods"): 1000}
    rec = nodes.get_pods(["default/a"])["default/a"]
    assert (rec.node, rec.state, rec.gang, rec.requests["cpu"]) == ("n1", "assumed", GANG, 3000)
    assert rec.pod.name == "a"


@pytest.mark.parametrize(
    "entries, reason",
    [
        ([("a", 5000, "n1")], "conflict: node n1 has 4000 cpu free, needs 5000"),
        # Each fits alone; together they exceed n1, and a fitting reservation on n2 is not written either.
        ([("b", 1000, "n2"), ("a", 2500, "n1"), ("c", 2000, "n1")], "conflict: node n1 has 4000 cpu free, needs 4500"),
        ([("a", 1000, "nx")], "node nx does not exist"),
        ([("a", 1000, "n1"), ("a", 1000, "n2")], "pod default/a is already reserved"),
    ],
)
def test_refused_reservations_write_nothing(
    nodes: StateStore, redis_client: redis.Redis, keys: Keys, entries: list[tuple[str, int, str]], reason: str
) -> None:
    before = snapshot_keys(redis_client, keys)
    txn = Txn(reserve=[reserve(pod(n, cpu), node) for n, cpu, node in entries])
    txn.cmd("HSET", "marker", "x", "1")
    ok, why = nodes.apply(txn)
    assert not ok
    assert why == reason
    assert snapshot_keys(redis_client, keys) == before


def test_cumulative_reservations_that_fit_together_are_accepted(nodes: StateStore) -> None:
    ok, _ = nodes.apply(Txn(reserve=[reserve(pod("a", 1500), "n1"), reserve(pod("b", 2500), "n1")]))
    assert ok
    assert used(nodes)[("n1", "cpu")] == 4000
    ok, why = nodes.apply(Txn(reserve=[reserve(pod("c", 1), "n1")]))
    assert not ok and why == "conflict: node n1 has 0 cpu free, needs 1"


def test_reserving_an_already_reserved_pod_is_refused(nodes: StateStore) -> None:
    nodes.must_apply(Txn(reserve=[reserve(pod("a"), "n1")]))
    ok, why = nodes.apply(Txn(reserve=[reserve(pod("a"), "n2")]))
    assert not ok and why == "pod default/a is already reserved"
    assert nodes.get_pods(["default/a"])["default/a"].node == "n1"


def test_a_release_and_a_reservation_in_one_txn_net_out(nodes: StateStore) -> None:
    nodes.must_apply(Txn(reserve=[reserve(pod("a", 4000), "n1")]))
    # n1 is full: b fits only because a's release counts first in the same transaction.
    ok, why = nodes.apply(Txn(release=["default/a"], reserve=[reserve(pod("b", 4000), "n1")]))
    assert (ok, why) == (True, "")
    assert used(nodes) == {("n1", "cpu"): 4000, ("n1", "pods"): 1000}
    assert set(nodes.load_pods()) == {"default/b"}


def test_a_pod_can_move_by_release_and_reserve(nodes: StateStore) -> None:
    nodes.must_apply(Txn(reserve=[reserve(pod("a", 2000, GANG), "n1")]))
    nodes.must_apply(Txn(release=["default/a"], reserve=[reserve(pod("a", 2000, GANG), "n2")]))
    assert used(nodes) == {("n2", "cpu"): 2000, ("n2", "pods"): 1000}
    assert nodes.get_pods(["default/a"])["default/a"].node == "n2"


def test_release_frees_usage_and_gang_sets(nodes: StateStore, redis_client: redis.Redis, keys: Keys) -> None:
    txn = Txn(reserve=[reserve(pod("a", gang=GANG), "n1"), reserve(pod("b", gang=GANG), "n1")])
    txn.cmd("SADD", rel_gang_assumed(GANG), "default/a", "default/b")
    nodes.must_apply(txn)
    nodes.must_apply(Txn(release=["default/a", "default/never-reserved"]))
    assert redis_client.smembers(keys.gang_assumed(GANG)) == {"default/b"}
    assert used(nodes) == {("n1", "cpu"): 1000, ("n1", "pods"): 1000}


def test_a_stale_fence_is_refused(nodes: StateStore, redis_client: redis.Redis, keys: Keys) -> None:
    ok, why = nodes.apply(Txn(fence=1, set_state=[["default/a", "bound"]]))
    assert not ok and why == "fenced: lock token 1 is stale (current 0)"
    redis_client.set(keys.bind_fence, 7)
    before = snapshot_keys(redis_client, keys)
    ok, why = nodes.apply(Txn(fence=6, reserve=[reserve(pod("a"), "n1")]))
    assert not ok and why == "fenced: lock token 6 is stale (current 7)"
    assert snapshot_keys(redis_client, keys) == before
    assert nodes.apply(Txn(fence=7, reserve=[reserve(pod("a"), "n1")])) == (True, "")
    assert nodes.apply(Txn(fence=7)) == (True, "")  # a fence alone is a check


EXPECT_CASES = {
    "assumed on its node": (["default/a", "assumed", "n1"], None),
    "assumed anywhere": (["default/a", "assumed", ""], None),
    "assumed on another node": (["default/a", "assumed", "n2"], "pod default/a is on n1, expected n2"),
    "not bound yet": (["default/a", "bound", ""], "pod default/a is assumed, expected bound"),
    "absent pod is absent": (["default/z", "absent", ""], None),
    "reserved pod is not absent": (["default/a", "absent", ""], "pod default/a is already assumed"),
    "absent pod expected assumed": (["default/z", "assumed", ""], "pod default/z is absent, expected assumed"),
}


@pytest.mark.parametrize("expect, reason", EXPECT_CASES.values(), ids=EXPECT_CASES.keys())
def test_expect(
    nodes: StateStore, redis_client: redis.Redis, keys: Keys, expect: list[str], reason: str | None
) -> None:
    nodes.must_apply(Txn(reserve=[reserve(pod("a"), "n1")]))
    before = snapshot_keys(redis_client, keys)
    ok, why = nodes.apply(Txn(expect=[expect], set_state=[["default/a", "bound"]]))
    if reason is None:
        assert (ok, why) == (True, "")
        assert nodes.get_pods(["default/a"])["default/a"].state == "bound"
    else:
        assert (ok, why) == (False, reason)
        assert snapshot_keys(redis_client, keys) == before


@pytest.mark.parametrize("op", ["FLUSHALL", "SET", "EVAL", "hset", "KEYS"])
def test_disallowed_commands_are_rejected_before_anything_is_written(
    nodes: StateStore, redis_client: redis.Redis, keys: Keys, op: str
) -> None:
    before = snapshot_keys(redis_client, keys)
    txn = Txn(reserve=[reserve(pod("a"), "n1")], set_state=[["default/a", "bound"]])
    txn.cmd("HSET", "marker", "x", "1")
    txn.cmd(op, "marker", "y")
    with pytest.raises(redis.ResponseError, match=f"txn: command {op} is not allowed"):
        nodes.apply(txn)
    assert snapshot_keys(redis_client, keys) == before


def test_commands_address_keys_under_the_base(nodes: StateStore, redis_client: redis.Redis, keys: Keys) -> None:
    txn = Txn()
    txn.cmd("HSET", "gang:x", "cycle", 3).cmd("ZADD", REL_TIMERS, 12.5, "x").cmd("RPUSH", "sim:binds", "e")
    nodes.must_apply(txn)
    assert redis_client.hget(keys.gang("x"), "cycle") == "3"
    assert redis_client.zscore(keys.timers, "x") == 12.5
    assert redis_client.lrange(keys.sim_binds, 0, -1) == ["e"]


# -- the fenced lock --------------------------------------------------------------------------------


def test_fences_strictly_increase(redis_client: redis.Redis, keys: Keys) -> None:
    lock = FencedLock(redis_client, keys)
    fences = []
    for _ in range(5):
        with lock.hold() as fence:
            assert redis_client.get(keys.bind_lock) is not None
            fences.append(fence)
        assert redis_client.get(keys.bind_lock) is None
    assert fences == sorted(set(fences)) and fences[0] >= 1
    assert int(redis_client.get(keys.bind_fence)) == fences[-1]


def test_a_held_lock_times_out_for_others(redis_client: redis.Redis, keys: Keys) -> None:
    a, b = FencedLock(redis_client, keys), FencedLock(redis_client, keys)
    with a.hold():
        started = time.monotonic()
        with pytest.raises(LockTimeout, match=keys.bind_lock):
            with b.hold(timeout=0.1):
                pass
        assert time.monotonic() - started < 1.0
    with b.hold(timeout=0.1):
        pass


def test_a_holder_whose_lease_expired_is_fenced_out(store: StateStore, redis_client: redis.Redis, keys: Keys) -> None:
    slow, fast = FencedLock(redis_client, keys, lease_seconds=0.1), FencedLock(redis_client, keys)
    slow_cm = slow.hold()
    slow_fence = slow_cm.__enter__()
    time.sleep(0.2)  # stalls past its lease
    fast_cm = fast.hold(timeout=2)
    fast_fence = fast_cm.__enter__()
    assert fast_fence > slow_fence
    ok, why = store.apply(Txn(fence=slow_fence, cmds=[["HSET", "marker", "by", "slow"]]))
    assert not ok and why.startswith(f"fenced: lock token {slow_fence} is stale")
    slow_cm.__exit__(None, None, None)  # must not release the new holder's lock
    assert redis_client.get(keys.bind_lock) is not None
    assert store.apply(Txn(fence=fast_fence, cmds=[["HSET", "marker", "by", "fast"]])) == (True, "")
    fast_cm.__exit__(None, None, None)
    assert redis_client.get(keys.bind_lock) is None
    assert redis_client.hget(f"{keys.base}:marker", "by") == "fast"


def test_processes_never_hold_the_lock_at_once(redis_server: Any, redis_client: redis.Redis, keys: Keys) -> None:
    process_workers.run_together(
        redis_client,
        keys,
        [process_workers.command("hammer_lock", redis_server.url, keys.prefix, i, 0.6) for i in range(4)],
    )
    assert redis_client.lrange(f"{keys.base}:test:violations", 0, -1) == []
    log = [tuple(map(int, x.split(":"))) for x in redis_client.lrange(f"{keys.base}:test:log", 0, -1)]
    assert {w for w, _ in log} == {0, 1, 2, 3}, "every process got the lock"
    assert len(log) >= 40
    fences = [f for _, f in log]
    assert fences == sorted(fences) and len(set(fences)) == len(fences)  # acquisition order = fence order
    # The holders really alternated: the lock changed hands between processes.
    assert sum(1 for x, y in zip(log, log[1:]) if x[0] != y[0]) >= 3


# -- the batch binder -------------------------------------------------------------------------------


class FlakyBackend(SimulatedBackend):
    """The simulated cluster, refusing the pods it is told to (an API error or a deleted pod)."""

    def __init__(self, client: redis.Redis, keys: Keys, failures: dict[str, BindFailure]) -> None:
        super().__init__(client, keys)
        self.failures = failures

    def bind(self, assignments: list[binder_pb2.Assignment], now: float, commit: Txn) -> dict[str, BindFailure]:
        ok = [a for a in assignments if a.pod_key not in self.failures]
        super().bind(ok, now, commit)
        return {a.pod_key: self.failures[a.pod_key] for a in assignments if a.pod_key in self.failures}


class StallingBackend(SimulatedBackend):
    """Stalls past the lock's lease while another binder takes the lock over (a backend writing outside
    Redis, so the binder takes the mutex itself and commits with its fence)."""

    transactional = False

    def __init__(self, client: redis.Redis, keys: Keys, lease: float) -> None:
        super().__init__(client, keys)
        self.lease = lease
        self.other = FencedLock(client, keys)

    def bind(self, assignments: list[binder_pb2.Assignment], now: float, commit: Txn) -> dict[str, BindFailure]:
        time.sleep(self.lease * 2)
        with self.other.hold(timeout=2):
            pass
        return super().bind(assignments, now, commit)


def reserve_gang(
    store: StateStore, names: list[str], node: str = "n1", gang: str = GANG, deadline: float = 60.0
) -> None:
    pods = [pod(n, 500, gang) for n in names]
    txn = Txn(reserve=[reserve(p, node) for p in pods])
    if gang:
        txn.cmd("SADD", rel_gang_assumed(gang), *[p.key for p in pods])
        txn.cmd("ZADD", REL_TIMERS, deadline, gang)
    store.must_apply(txn)


def assignments(names: list[str], node: str = "n1", gang: str = GANG) -> list[binder_pb2.Assignment]:
    return [binder_pb2.Assignment(pod_key=f"default/{n}", uid=n, node=node, gang=gang) for n in names]


def sim_binds(store: StateStore) -> list[dict[str, Any]]:
    return [json.loads(x) for x in store.redis.lrange(store.keys.sim_binds, 0, -1)]


def make_binder(store: StateStore, backend: Any = None, lease: float = 30.0) -> BatchBinder:
    backend = backend or SimulatedBackend(store.redis, store.keys)
    return BatchBinder(store, backend, FencedLock(store.redis, store.keys, lease_seconds=lease))


def statuses(results: list[binder_pb2.BindResult]) -> dict[str, int]:
    return {r.pod_key.split("/")[1]: r.status for r in results}


def test_a_gang_batch_binds_and_moves_pods_from_assumed_to_bound(nodes: StateStore, keys: Keys) -> None:
    names = ["w0", "w1", "w2"]
    reserve_gang(nodes, names)
    results, fence = make_binder(nodes).bind(assignments(names), True, now=7.0)
    assert statuses(results) == {n: BOUND for n in names}
    assert fence >= 1
    r = nodes.redis
    assert r.smembers(keys.gang_assumed(GANG)) == set()
    assert r.smembers(keys.gang_bound(GANG)) == {f"default/{n}" for n in names}
    assert r.zscore(keys.timers, GANG) is None
    assert float(r.hget(keys.gang(GANG), "satisfied_at")) == 7.0
    assert {p.state for p in nodes.load_pods().values()} == {"bound"}
    assert sim_binds(nodes) == [{"pod": f"default/{n}", "node": "n1", "at": 7.0} for n in names]
    assert used(nodes)[("n1", "cpu")] == 1500  # bound pods keep their capacity


def _spoil_release(store: StateStore) -> None:
    store.must_apply(Txn(release=["default/w1"]))


def _spoil_move(store: StateStore) -> None:
    store.must_apply(Txn(release=["default/w1"], reserve=[reserve(pod("w1", 500, GANG), "n2")]))


@pytest.mark.parametrize(
    "spoil, w1_status, message",
    [
        (_spoil_release, FAILED, "its reservation no longer exists"),  # the pod may exist: it is placed again
        (_spoil_move, FAILED, "it is reserved on n2, not n1"),
    ],
)
def test_all_or_nothing_rolls_back_the_whole_batch(
    nodes: StateStore, keys: Keys, spoil: Any, w1_status: int, message: str
) -> None:
    names = ["w0", "w1", "w2"]
    reserve_gang(nodes, names)
    spoil(nodes)
    results, _ = make_binder(nodes).bind(assignments(names), True, now=1.0)
    assert statuses(results) == {"w0": ROLLED_BACK, "w1": w1_status, "w2": ROLLED_BACK}
    by_name = {r.pod_key: r.message for r in results}
    assert by_name["default/w1"] == message
    assert by_name["default/w0"] == f"rolled back with its gang: default/w1: {message}"
    assert sim_binds(nodes) == []
    assert nodes.load_pods() == {}  # every reservation released
    assert used(nodes) == {}
    assert nodes.redis.smembers(keys.gang_assumed(GANG)) == set()
    assert nodes.redis.smembers(keys.gang_bound(GANG)) == set()


def test_a_bind_delivered_twice_answers_bound_and_binds_nothing_again(nodes: StateStore) -> None:
    """A gang Bind delivered twice (the scheduler retries when the first answer was lost): the second
    finds its pods bound on the same nodes, answers BOUND, and neither releases nor re-binds them."""
    names = ["w0", "w1"]
    reserve_gang(nodes, names)
    binder = make_binder(nodes)
    binder.bind(assignments(names), True, now=1.0)
    results, _ = binder.bind(assignments(names), True, now=2.0)
    assert statuses(results) == {"w0": BOUND, "w1": BOUND}
    assert {k: p.state for k, p in nodes.load_pods().items()} == {"default/w0": "bound", "default/w1": "bound"}
    assert used(nodes)[("n1", "cpu")] == 1000
    assert len(sim_binds(nodes)) == 2


def test_without_all_or_nothing_only_the_bad_pod_fails(nodes: StateStore, keys: Keys) -> None:
    names = ["w0", "w1", "w2"]
    reserve_gang(nodes, names)
    _spoil_release(nodes)
    results, _ = make_binder(nodes).bind(assignments(names), False, now=3.0)
    assert statuses(results) == {"w0": BOUND, "w1": FAILED, "w2": BOUND}  # to be placed again, not dropped
    assert [b["pod"] for b in sim_binds(nodes)] == ["default/w0", "default/w2"]
    assert nodes.redis.smembers(keys.gang_bound(GANG)) == {"default/w0", "default/w2"}


def test_per_pod_cluster_failures_after_satisfaction(nodes: StateStore, keys: Keys) -> None:
    names = ["w0", "w1", "w2"]
    reserve_gang(nodes, names)
    backend = FlakyBackend(
        nodes.redis,
        keys,
        {"default/w1": BindFailure("admission webhook said no"), "default/w2": BindFailure("pod not found", gone=True)},
    )
    results, _ = make_binder(nodes, backend).bind(assignments(names), False, now=4.0)
    assert statuses(results) == {"w0": BOUND, "w1": FAILED, "w2": GONE}
    assert [r.message for r in results] == ["", "admission webhook said no", "pod not found"]
    assert set(nodes.load_pods()) == {"default/w0"}  # failed pods' reservations are released
    assert used(nodes)[("n1", "cpu")] == 500
    assert nodes.redis.smembers(keys.gang_assumed(GANG)) == set()
    assert nodes.redis.smembers(keys.gang_bound(GANG)) == {"default/w0"}


def test_a_binder_whose_lease_expired_records_nothing_and_the_next_holder_rolls_forward(
    nodes: StateStore, keys: Keys
) -> None:
    """Fenced out after its intent: the stale binder records no binding and releases nothing (the pods
    stay `binding`, answered PENDING); the next holder of the mutex finishes the batch."""
    names = ["w0", "w1"]
    reserve_gang(nodes, names)
    binder = make_binder(nodes, StallingBackend(nodes.redis, keys, lease=0.1), lease=0.1)
    results, fence = binder.bind(assignments(names), True, now=5.0)
    assert statuses(results) == {"w0": PENDING, "w1": PENDING}
    assert all(r.message.startswith(f"fenced: lock token {fence} is stale") for r in results)
    assert sim_binds(nodes) == []
    assert {p.state for p in nodes.load_pods().values()} == {"binding"}
    assert nodes.redis.smembers(keys.gang_assumed(GANG)) == {"default/w0", "default/w1"}

    finished = make_binder(nodes, CarefulBackend(nodes.redis, keys)).finish_interrupted(now=6.0)
    assert statuses(finished) == {"w0": BOUND, "w1": BOUND}
    assert {p.state for p in nodes.load_pods().values()} == {"bound"}
    assert nodes.redis.smembers(keys.gang_bound(GANG)) == {"default/w0", "default/w1"}
    assert len(sim_binds(nodes)) == 2


@pytest.mark.parametrize("backend_cls", [SimulatedBackend, CarefulBackend], ids=["one-script", "locked-commit"])
def test_every_bind_path_takes_and_releases_the_mutex(nodes: StateStore, keys: Keys, backend_cls: type) -> None:
    reserve_gang(nodes, ["w0", "w1"])
    binder = make_binder(nodes, backend_cls(nodes.redis, keys))
    before = int(nodes.redis.get(keys.bind_fence) or 0)
    results, fence = binder.bind(assignments(["w0", "w1"]), True, now=1.0)
    assert statuses(results) == {"w0": BOUND, "w1": BOUND}
    assert fence == before + 1 == int(nodes.redis.get(keys.bind_fence))
    assert nodes.redis.get(keys.bind_lock) is None


@pytest.mark.parametrize("backend_cls", [SimulatedBackend, CarefulBackend], ids=["one-script", "locked-commit"])
def test_a_bind_waits_for_the_mutex_held_by_another_binder(nodes: StateStore, keys: Keys, backend_cls: type) -> None:
    import threading

    reserve_gang(nodes, ["w0"])
    binder = make_binder(nodes, backend_cls(nodes.redis, keys))
    out: list[Any] = []
    # Each path asks for the mutex its own way (in the bind script, or FencedLock first); either retries only
    # when refused, so a second ask is the positive signal that the worker found the mutex held.
    with (
        recording_calls(nodes, "apply_fenced") as scripts,
        recording_calls(binder.lock, "_try_acquire") as acquires,
        FencedLock(nodes.redis, keys).hold() as held,
    ):
        worker = threading.Thread(target=lambda: out.append(binder.bind(assignments(["w0"]), True, now=1.0)))
        worker.start()
        wait_for(lambda: out or len(scripts) + len(acquires) >= 2, 10, "the binder asking for the mutex again")
        assert out == [] and sim_binds(nodes) == []  # nothing written while another holds the mutex
    worker.join(timeout=10)
    results, fence = out[0]
    assert statuses(results) == {"w0": BOUND} and fence > held


def test_a_refused_command_in_a_locked_script_releases_the_lock(nodes: StateStore, keys: Keys) -> None:
    txn = Txn(lock=["token", 30_000], cmds=[["FLUSHALL", "x"]])
    with pytest.raises(redis.ResponseError, match="not allowed"):
        nodes.apply(txn)
    assert nodes.redis.get(keys.bind_lock) is None


@pytest.mark.parametrize(
    "reason_txn",
    [
        Txn(expect=[["default/zz", "assumed", ""]]),
        Txn(reserve=[StateStore.reserve_entry(pod("huge", 10**9), "n1")]),
        Txn(fence=999),
    ],
    ids=["expect", "capacity", "fence"],
)
def test_a_failed_check_in_a_locked_script_releases_the_lock(nodes: StateStore, keys: Keys, reason_txn: Txn) -> None:
    reason_txn.lock = ["token", 30_000]
    ok, _, fence = nodes.apply_fenced(reason_txn)
    assert not ok and fence == 0
    assert nodes.redis.get(keys.bind_lock) is None
    busy = FencedLock(nodes.redis, keys)
    with busy.hold(timeout=0.5):
        ok, why, _ = nodes.apply_fenced(Txn(lock=["other", 30_000]))
        assert (ok, why) == (False, "locked")


def test_ordinary_pods_bind_without_gang_bookkeeping(nodes: StateStore, keys: Keys) -> None:
    reserve_gang(nodes, ["solo"], gang="")
    results, _ = make_binder(nodes).bind(assignments(["solo"], gang=""), False, now=1.0)
    assert statuses(results) == {"solo": BOUND}
    assert nodes.get_pods(["default/solo"])["default/solo"].state == "bound"


@pytest.mark.parametrize("transactional", [True, False], ids=["one-script", "locked-commit"])
def test_a_gang_batch_never_interleaves_with_concurrent_ordinary_binds(
    redis_server: Any, nodes: StateStore, keys: Keys, transactional: bool
) -> None:
    gang_pods = [f"g{i:02d}" for i in range(30)]
    solo_pods = [f"s{i:02d}" for i in range(60)]
    nodes.put_nodes([model_node("big", cpu=1000, pods=1000)])
    reserve_gang(nodes, gang_pods, node="big", gang=GANG)
    reserve_gang(nodes, solo_pods, node="big", gang="")
    jobs = [(solo_pods[:30], "", True), (gang_pods, GANG, False), (solo_pods[30:], "", True)]
    process_workers.run_together(
        nodes.redis,
        keys,
        [
            process_workers.command("bind", redis_server.url, keys.prefix, names, gang, one_by_one, transactional)
            for names, gang, one_by_one in jobs
        ],
    )
    assert nodes.redis.lrange(f"{keys.base}:test:errors", 0, -1) == []
    log = [b["pod"].split("/")[1] for b in sim_binds(nodes)]
    assert sorted(log) == sorted(gang_pods + solo_pods)
    positions = [i for i, n in enumerate(log) if n.startswith("g")]
    assert positions == list(range(positions[0], positions[0] + len(gang_pods))), log
    assert {p.state for p in nodes.load_pods().values()} == {"bound"}


def test_node_field_layout_matches_the_lua_script(nodes: StateStore, redis_client: redis.Redis, keys: Keys) -> None:
    nodes.must_apply(Txn(reserve=[reserve(pod("a", 1234), "n2")]))
    assert redis_client.hget(keys.used, node_field("n2", "cpu")) == "1234"
    assert redis_client.hget(keys.cap, node_field("n2", "cpu")) == "2000"


class SilentApiBackend(FlakyBackend):
    """Writes outside Redis (like the Kubernetes backend), and the API server does not answer for some
    pods: their bindings are retryable failures."""

    transactional = False


def test_a_binding_the_api_server_did_not_answer_stays_started_and_is_rolled_forward(
    nodes: StateStore, keys: Keys
) -> None:
    names = ["w0", "w1", "w2"]
    reserve_gang(nodes, names)
    silent = BindFailure("API server timed out", retryable=True)
    first = make_binder(nodes, SilentApiBackend(nodes.redis, keys, {"default/w1": silent}))
    results, _ = first.bind(assignments(names), True, now=1.0)
    assert statuses(results) == {"w0": BOUND, "w1": PENDING, "w2": BOUND}
    # Two of the gang are bound: w1's reservation must survive, never be released or rolled back.
    assert {k: p.state for k, p in nodes.load_pods().items()} == {
        "default/w0": "bound",
        "default/w1": "binding",
        "default/w2": "bound",
    }
    assert used(nodes)[("n1", "cpu")] == 1500
    later = make_binder(nodes, SilentApiBackend(nodes.redis, keys, {}))
    assert statuses(later.finish_interrupted(now=2.0)) == {"w1": BOUND}
    assert {p.state for p in nodes.load_pods().values()} == {"bound"}
    assert nodes.redis.smembers(keys.gang_bound(GANG)) == {f"default/{n}" for n in names}
    assert later.finish_interrupted(now=3.0) == []  # nothing left: idempotent


def test_the_binding_index_follows_podstate_and_the_roll_forward_reads_it_between_full_reads(
    nodes: StateStore, keys: Keys
) -> None:
    """lua/txn.lua keeps P:binding beside podstate's "binding" entries; the roll-forward reads that index,
    and all of podstate only on its first round and every FULL_SCAN_EVERY-th, which still finds an intent an
    older binder recorded without the index."""
    names = ["w0", "w1", "w2"]
    reserve_gang(nodes, names)
    silent = BindFailure("API server timed out", retryable=True)
    first = make_binder(nodes, SilentApiBackend(nodes.redis, keys, {"default/w1": silent}))
    first.bind(assignments(names), True, now=1.0)
    assert nodes.redis.smembers(keys.binding) == {"default/w1"}  # w0 and w2 left it when they were recorded bound
    assert set(nodes.pods_binding()) == {"default/w1"}

    later = make_binder(nodes, SilentApiBackend(nodes.redis, keys, {}))
    assert statuses(later.finish_interrupted(now=2.0)) == {"w1": BOUND}  # round 0: a full read
    assert nodes.redis.smembers(keys.binding) == set()

    # An intent as a binder from before the index wrote it: in podstate, not in P:binding.
    reserve_gang(nodes, ["old"], gang="default/old")
    nodes.redis.hset(keys.podstate, "default/old", "binding")
    assert nodes.pods_binding() == {}
    with recording_calls(nodes.redis, "hgetall") as hgetall:
        for round_ in range(1, FULL_SCAN_EVERY):
            assert later.finish_interrupted(now=2.0 + round_) == []  # the index's rounds do not see it...
    assert [c for c in hgetall if c[0] == keys.podstate] == []  # ...and do not read all of podstate
    assert statuses(later.finish_interrupted(now=40.0)) == {"old": BOUND}  # the next full read rolls it forward
    assert {p.state for p in nodes.load_pods().values()} == {"bound"}

    # A release takes a pod out of the index too.
    reserve_gang(nodes, ["r0"], gang="default/r")
    nodes.must_apply(Txn(set_state=[["default/r0", "binding"]]))
    assert nodes.redis.smembers(keys.binding) == {"default/r0"}
    nodes.must_apply(Txn(release=["default/r0"]))
    assert nodes.redis.smembers(keys.binding) == set()


def test_an_intent_whose_reservation_changed_writes_nothing(nodes: StateStore, keys: Keys) -> None:
    """The intent is checked against the reservations it starts from: one released meanwhile (a
    timeout) refuses the batch before any API call."""
    names = ["w0", "w1"]
    reserve_gang(nodes, names)
    backend = SilentApiBackend(nodes.redis, keys, {})
    binder = make_binder(nodes, backend)
    original = nodes.get_pods

    def stale_read(keys_: list[str]) -> dict[str, Any]:
        records = original(keys_)
        nodes.must_apply(Txn(release=["default/w1"]))  # released between the check and the intent
        return records

    nodes.get_pods = stale_read  # type: ignore[method-assign]
    results, _ = binder.bind(assignments(names), True, now=1.0)
    nodes.get_pods = original  # type: ignore[method-assign]
    assert statuses(results) == {"w0": FAILED, "w1": ROLLED_BACK}
    assert sim_binds(nodes) == []
    assert nodes.load_pods() == {}  # released as the scheduler will mirror it: no reservation left stuck


def test_a_restarted_binder_takes_over_the_mutex_its_crashed_predecessor_held(nodes: StateStore, keys: Keys) -> None:
    """Same owner (the pod's name), new incarnation: the holder is dead, so no waiting out its 30 s lease;
    another owner (a second replica) still waits."""
    crashed = FencedLock(nodes.redis, keys, lease_seconds=30, owner="binder-0")
    held = crashed.hold()
    first = held.__enter__()  # never released: the process died holding it
    with FencedLock(nodes.redis, keys, lease_seconds=30, owner="binder-0").hold(timeout=1) as fence:
        assert fence > first
    held2 = FencedLock(nodes.redis, keys, lease_seconds=30, owner="binder-0").hold()
    held2.__enter__()
    with pytest.raises(LockTimeout):
        with FencedLock(nodes.redis, keys, lease_seconds=30, owner="binder-1").hold(timeout=0.3):
            pass
    for h in (held, held2):  # release (the taken-over one holds nothing any more: a no-op)
        h.__exit__(None, None, None)


def test_a_hold_whose_release_never_reached_redis_does_not_block_its_own_binder(nodes: StateStore, keys: Keys) -> None:
    """Redis went away while this binder held the mutex, so the release was lost and the key came back
    with the append-only file: the same binder must not wait 30 s for its own leftover."""
    nodes.redis.set(keys.bind_lock, "binder-0|leftover", px=30_000)
    start = time.monotonic()
    with FencedLock(nodes.redis, keys, lease_seconds=30, owner="binder-0").hold(timeout=1):
        pass
    assert time.monotonic() - start < 0.5


class GatedApiBackend(SilentApiBackend):
    """Holds each batch's API calls until `gate` opens, counting the pods it was asked to bind."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        super().__init__(client, keys, {})
        self.entered, self.gate = threading.Event(), threading.Event()
        self.calls: list[str] = []

    def bind(self, assignments: list[binder_pb2.Assignment], now: float, commit: Txn) -> dict[str, BindFailure]:
        self.calls += [a.pod_key for a in assignments]
        self.entered.set()
        assert self.gate.wait(10)
        return super().bind(assignments, now, commit)


def test_roll_forward_leaves_a_live_batch_alone(nodes: StateStore, keys: Keys) -> None:
    """The roll-forward loop reads pods `binding` while a live batch is between its intent and its record:
    once it holds the mutex they are bound, not interrupted, and are not bound a second time."""
    names = ["w0", "w1", "w2"]
    reserve_gang(nodes, names)
    backend = GatedApiBackend(nodes.redis, keys)
    binder = make_binder(nodes, backend)
    live = threading.Thread(target=binder.bind, args=(assignments(names), True, 1.0))
    live.start()
    assert backend.entered.wait(10)  # intent recorded, API calls in flight, mutex held
    rolled: list[Any] = []
    finisher = threading.Thread(target=lambda: rolled.append(binder.finish_interrupted(now=1.5)))
    finisher.start()
    time.sleep(0.3)  # the finisher has read the `binding` pods and waits for the mutex
    backend.gate.set()
    live.join(10)
    finisher.join(10)
    assert rolled == [[]]
    assert sorted(backend.calls) == [f"default/{n}" for n in names]  # each pod bound once
    assert {p.state for p in nodes.load_pods().values()} == {"bound"}


class CountingApiBackend(SilentApiBackend):
    """Writes outside Redis; records the pods of each call to bind."""

    def __init__(self, client: redis.Redis, keys: Keys, failures: dict[str, BindFailure] | None = None) -> None:
        super().__init__(client, keys, failures or {})
        self.calls: list[list[str]] = []

    def bind(self, assignments: list[binder_pb2.Assignment], now: float, commit: Txn) -> dict[str, BindFailure]:
        self.calls.append([a.pod_key for a in assignments])
        return super().bind(assignments, now, commit)


def _three_gangs(nodes: StateStore) -> list[tuple[list[binder_pb2.Assignment], bool, str]]:
    batches = []
    for g, node in (("a", "n1"), ("b", "n1"), ("c", "n2")):
        names = [f"{g}{i}" for i in range(3)]
        reserve_gang(nodes, names, node=node, gang=f"default/{g}")
        batches.append((assignments(names, node=node, gang=f"default/{g}"), True, ""))
    return batches


def test_gangs_ready_together_are_bound_in_one_pass(nodes: StateStore, keys: Keys) -> None:
    backend = CountingApiBackend(nodes.redis, keys)
    done = make_binder(nodes, backend).bind_many(_three_gangs(nodes), now=1.0)
    assert [statuses(r) for r, _ in done] == [{f"{g}{i}": BOUND for i in range(3)} for g in "abc"]
    assert len(backend.calls) == 1 and len(backend.calls[0]) == 9  # all API calls in one parallel pass
    assert {p.state for p in nodes.load_pods().values()} == {"bound"}
    assert nodes.redis.smembers(keys.gang_bound("default/b")) == {f"default/b{i}" for i in range(3)}


def test_one_gang_refused_in_a_joint_pass_leaves_the_others_bound(nodes: StateStore, keys: Keys) -> None:
    """Each batch keeps its all-or-nothing rule: a gang with a refused pod binds nothing, the rest bind."""
    refused = BindFailure("node ghost does not exist")
    backend = CountingApiBackend(nodes.redis, keys)
    backend.precheck = lambda a: {"default/b1": refused}  # type: ignore[method-assign]
    done = make_binder(nodes, backend).bind_many(_three_gangs(nodes), now=1.0)
    by_gang = [statuses(r) for r, _ in done]
    assert by_gang[0] == {f"a{i}": BOUND for i in range(3)} and by_gang[2] == {f"c{i}": BOUND for i in range(3)}
    assert by_gang[1] == {"b0": ROLLED_BACK, "b1": FAILED, "b2": ROLLED_BACK}
    assert not any(k.startswith("default/b") for k in nodes.load_pods())  # its reservations given back
    assert sorted(k for call in backend.calls for k in call) == sorted(
        f"default/{g}{i}" for g in "ac" for i in range(3)
    )


def test_a_joint_intent_refused_falls_back_to_batch_by_batch(nodes: StateStore, keys: Keys) -> None:
    """A reservation released between the check and the joint intent (a timeout): nothing of the joint
    intent is written; each batch is then tried alone and only the changed one fails."""
    backend = CountingApiBackend(nodes.redis, keys)
    binder = make_binder(nodes, backend)
    batches = _three_gangs(nodes)
    original = nodes.get_pods
    released: list[bool] = []

    def stale_read(keys_: list[str]) -> dict[str, Any]:
        records = original(keys_)
        if not released:
            released.append(True)
            nodes.must_apply(Txn(release=["default/c2"]))
        return records

    nodes.get_pods = stale_read  # type: ignore[method-assign]
    done = binder.bind_many(batches, now=1.0)
    nodes.get_pods = original  # type: ignore[method-assign]
    by_gang = [statuses(r) for r, _ in done]
    assert by_gang[0] == {f"a{i}": BOUND for i in range(3)} and by_gang[1] == {f"b{i}": BOUND for i in range(3)}
    assert by_gang[2]["c2"] == FAILED and {by_gang[2]["c0"], by_gang[2]["c1"]} == {ROLLED_BACK}
    assert not any(k.startswith("default/c") for k in nodes.load_pods())
