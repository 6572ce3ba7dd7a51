"""Fencing of the scheduler's writes by its leadership term (lua/txn.lua, lua/repair_usage.lua, StateStore),
against a real redis-server, and the Lease election logic (libs/phalanx/cluster/leader.py) against an
in-memory Lease API with the API server's optimistic concurrency (resourceVersion, 404, 409)."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from builders import gang_spec, model_node, model_pod
from waiting import wait_for

from phalanx.clock import Clock
from phalanx.cluster.leader import (
    JITTER_FACTOR,
    ElectionConfig,
    LeaderElector,
    claim_fencing_term,
    new_identity,
    pod_namespace,
)
from phalanx.kube.errors import ApiError
from phalanx.model.objects import GangSpec, NodeInfo, PodInfo
from phalanx.state.keys import Keys
from phalanx.state.store import FencedOut, StateStore, Txn

pytestmark = pytest.mark.integration


def node(name: str, gpus: int = 4) -> NodeInfo:
    return model_node(name, gpus=gpus, cpu=16)


def pod(name: str, gang: str = "") -> PodInfo:
    """A pod in namespace ns, of gang ns/`gang` when one is named."""
    return model_pod(name, gang, gpus=1, cpu=0.1, ns="ns")


def gang(name: str) -> GangSpec:
    return gang_spec(name, 2, ns="ns")


def dump(client: redis.Redis, keys: Keys) -> dict[str, Any]:
    """Everything under the prefix, by key: the state compared before and after a refused write."""
    out: dict[str, Any] = {}
    for k in sorted(client.scan_iter(match=keys.pattern)):
        kind = client.type(k)
        out[k] = {
            "string": client.get,
            "hash": client.hgetall,
            "set": client.smembers,
            "zset": lambda key: client.zrange(key, 0, -1, withscores=True),
            "list": lambda key: client.lrange(key, 0, -1),
        }[kind](k)
    return out


@pytest.fixture
def stores(redis_client: redis.Redis, keys: Keys) -> tuple[StateStore, StateStore]:
    """(old leader, new leader): the old one claimed term 3, then the new one term 4."""
    old, new = StateStore(redis_client, keys), StateStore(redis_client, keys)
    assert old.claim_term(3) == (True, 3)
    old.term = 3
    old.put_nodes([node("n1"), node("n2")])
    old.put_gangs([gang("g")])
    old.must_apply(Txn(reserve=[old.reserve_entry(pod("a", "g"), "n1")]))
    assert new.claim_term(4) == (True, 4)
    new.term = 4
    return old, new


# --- compare-and-raise -----------------------------------------------------------------------------------------


def test_claim_term_only_raises(store: StateStore) -> None:
    assert store.leader_term() is None
    assert store.claim_term(0) == (True, 0)  # the first Lease acquisition has leaseTransitions 0
    assert store.claim_term(5) == (True, 5)
    assert store.claim_term(5) == (False, 5), "the same term twice is not a claim: two leaders never share one"
    assert store.claim_term(2) == (False, 5)
    assert store.leader_term() == 5


# --- the transaction script --------------------------------------------------------------------------------------


def test_a_deposed_leaders_commit_is_refused_and_changes_nothing(
    stores: tuple[StateStore, StateStore], redis_client: redis.Redis, keys: Keys
) -> None:
    old, new = stores
    before = dump(redis_client, keys)
    seen: list[FencedOut] = []
    old.on_fenced = seen.append
    txn = Txn(reserve=[old.reserve_entry(pod("b", "g"), "n2")], release=["ns/a"])
    txn.cmd("HSET", "gang:ns/g", "cycle", 7).cmd("ZADD", "timers", 99, "ns/g")
    with pytest.raises(FencedOut, match="term 3 is older than the current leader's 4"):
        old.apply(txn)
    assert len(seen) == 1, "on_fenced hears of it before the error is raised"
    assert dump(redis_client, keys) == before
    # The same transaction under the new leader's term commits.
    assert new.apply(txn) == (True, "")
    assert set(new.load_pods()) == {"ns/b"}


def test_equal_term_commits_and_a_higher_one_is_recorded(
    store: StateStore, redis_client: redis.Redis, keys: Keys
) -> None:
    store.term = 7
    store.put_nodes([node("n1")])  # no claim yet (Redis lost it, say): the first write records the term
    assert store.leader_term() == 7
    store.must_apply(Txn(reserve=[store.reserve_entry(pod("a"), "n1")]))
    assert store.leader_term() == 7
    redis_client.delete(keys.leader_term)  # Redis emptied of the term alone
    store.must_apply(Txn(release=["ns/a"]))
    assert store.leader_term() == 7


def test_a_check_failure_is_still_a_conflict_not_a_fence(stores: tuple[StateStore, StateStore]) -> None:
    _, new = stores
    ok, reason = new.apply(Txn(expect=[["ns/a", "bound", ""]]))
    assert not ok and "expected bound" in reason


def test_unfenced_stores_are_not_checked(
    stores: tuple[StateStore, StateStore], redis_client: redis.Redis, keys: Keys
) -> None:
    """The binder (and any scheduler without election) writes without a term, whatever Redis holds."""
    binder = StateStore(redis_client, keys)
    assert binder.apply(Txn(set_state=[["ns/a", "binding"]])) == (True, "")
    binder.put_nodes([node("n3")])
    assert binder.leader_term() == 4


def test_one_script_call_per_commit(
    stores: tuple[StateStore, StateStore], redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fencing costs one GET inside the script, not a round trip."""
    _, new = stores
    sent: list[str] = []
    execute = redis_client.execute_command

    def counting(*args: Any, **kw: Any) -> Any:
        sent.append(str(args[0]))
        return execute(*args, **kw)

    for fenced in (False, True):
        txn = Txn(reserve=[new.reserve_entry(pod(f"c{fenced}", "g"), "n2")])
        store = new if fenced else StateStore(redis_client, new.keys)
        redis_client.config_resetstat()
        sent.clear()
        monkeypatch.setattr(redis_client, "execute_command", counting)
        store.must_apply(txn)
        monkeypatch.undo()
        stats = redis_client.info("commandstats")
        assert sent == ["EVALSHA"], "one round trip"
        assert stats.get("cmdstat_get", {}).get("calls", 0) == (1 if fenced else 0), stats


# --- every other write path of the scheduler and the feed -------------------------------------------------------


@pytest.mark.parametrize(
    "write",
    [
        "put_nodes",
        "remove_nodes",
        "put_gangs",
        "remove_gangs",
        "forget_gangs",
        "repair_usage",
        "identity",
        "release",
        "facts",
    ],
)
def test_every_write_path_is_fenced(
    write: str, stores: tuple[StateStore, StateStore], redis_client: redis.Redis, keys: Keys
) -> None:
    old, new = stores
    redis_client.hdel(keys.meta, "epoch")  # so identity() would write one
    redis_client.hincrby(keys.used, "n2\x1fcpu", 5)  # drift that repair_usage would fix
    before = dump(redis_client, keys)
    calls = {
        "put_nodes": lambda s: s.put_nodes([node("n1", gpus=8), node("n9")]),
        "remove_nodes": lambda s: s.remove_nodes(["n1"]),
        "put_gangs": lambda s: s.put_gangs([gang("h")]),
        "remove_gangs": lambda s: s.remove_gangs(["ns/g"]),
        "forget_gangs": lambda s: s.forget_gangs(["ns/g"]),
        "repair_usage": lambda s: s.repair_usage(),
        "identity": lambda s: s.identity(),
        "release": lambda s: s.must_apply(Txn(release=["ns/a"])),
        "facts": lambda s: s.must_apply(Txn(facts=[s.reserve_entry(pod("x"), "n2")])),
    }
    with pytest.raises(FencedOut):
        calls[write](old)
    assert dump(redis_client, keys) == before, f"{write} under a stale term changed Redis"
    calls[write](new)  # the leader's goes through
    assert dump(redis_client, keys) != before, f"{write} under the leader's term changed nothing"


def test_fenced_writes_equal_unfenced_ones(redis_client: redis.Redis) -> None:
    """The plain write paths give the same Redis state through the fenced script as through the pipeline."""
    results = []
    for i, term in enumerate((None, 1)):
        keys = Keys(f"fence-eq-{i}")
        s = StateStore(redis_client, keys, term=term)
        s.put_nodes([node("n1"), node("n2", gpus=2)])
        s.put_nodes([model_node("n1", cpu=8, memory_gib=0, pods=0)])  # drops n1's other capacity fields
        s.put_gangs([gang("g"), gang("h")])
        s.must_apply(Txn(reserve=[s.reserve_entry(pod("a", "g"), "n2")]).cmd("ZADD", "timers", 5, "ns/g"))
        s.remove_gangs(["ns/h"])
        s.forget_gangs(["ns/h"])
        victims = s.remove_nodes(["n2"])
        assert [v.key for v in victims] == ["ns/a"]
        state = {k.split(":", 1)[1]: v for k, v in dump(redis_client, keys).items() if not k.endswith("leader:term")}
        results.append(state)
    assert results[0] == results[1]
    assert results[0]["cap"] == {"n1\x1fcpu": "8000"}


def test_many_arguments_are_split(redis_client: redis.Redis, keys: Keys) -> None:
    """Lua's unpack takes a few thousand arguments: big writes are split into several commands."""
    s = StateStore(redis_client, keys, term=1)
    gangs = [gang(f"g{i}") for i in range(3000)]
    s.put_gangs(gangs)
    assert len(s.load_gangs()) == 3000
    s.forget_gangs([g.key for g in gangs])
    assert not s.load_gangs()


def test_a_deposed_store_refuses_without_asking_redis(store: StateStore, redis_client: redis.Redis) -> None:
    store.term = 1
    store.put_nodes([node("n1")])
    seen: list[FencedOut] = []
    store.on_fenced = seen.append
    store.depose("the Lease was lost")
    redis_client.config_resetstat()
    with pytest.raises(FencedOut, match="the Lease was lost"):
        store.must_apply(Txn(reserve=[store.reserve_entry(pod("a"), "n1")]))
    with pytest.raises(FencedOut):
        store.repair_usage()
    assert "cmdstat_evalsha" not in redis_client.info("commandstats")
    assert len(seen) == 2


def test_the_scheduling_loop_stops_on_fenced_out() -> None:
    """The scheduling loop retries failed steps, but not a FencedOut: another replica leads."""
    from phalanx.cluster.loop import SchedulingLoop

    calls = []

    class Deposed:
        def step(self, now: float, prefetched: object = None) -> None:
            calls.append(now)
            raise FencedOut("fenced out: leadership term 1 is older than the current leader's 2")

    scheduling = SchedulingLoop(Deposed(), None, Clock(False))  # type: ignore[arg-type]
    stop = threading.Event()
    t = threading.Thread(target=scheduling.run, args=(stop,), daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive() and stop.is_set() and len(calls) == 1
    assert scheduling.last_error.startswith("FencedOut")


# --- the election: one Lease, two replicas, an in-memory API server ----------------------------------------------


class FakeLeases:
    """CoordinationV1Api's three Lease calls with the API server's concurrency rules."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.version = 0
        self.fail = False  # every call raises (the API server unreachable)
        self.lock = threading.Lock()

    def _check(self) -> None:
        if self.fail:
            raise ConnectionError("API server unreachable")

    def read_namespaced_lease(self, name: str, namespace: str, **_: Any) -> SimpleNamespace:
        with self.lock:
            self._check()
            if (namespace, name) not in self.objects:
                raise ApiError(status=404, reason="Not Found")
            return SimpleNamespace(data=json.dumps(self.objects[(namespace, name)]).encode())

    def create_namespaced_lease(self, namespace: str, body: dict[str, Any], **_: Any) -> SimpleNamespace:
        with self.lock:
            self._check()
            name = body["metadata"]["name"]
            if (namespace, name) in self.objects:
                raise ApiError(status=409, reason="AlreadyExists")
            return self._store(namespace, name, body)

    def replace_namespaced_lease(self, name: str, namespace: str, body: dict[str, Any], **_: Any) -> SimpleNamespace:
        with self.lock:
            self._check()
            current = self.objects.get((namespace, name))
            if current is None:
                raise ApiError(status=404, reason="Not Found")
            if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                raise ApiError(status=409, reason="Conflict")
            return self._store(namespace, name, body)

    def _store(self, namespace: str, name: str, body: dict[str, Any]) -> SimpleNamespace:
        self.version += 1
        obj = json.loads(json.dumps(body))
        obj["metadata"] = {
            **obj.get("metadata", {}),
            "name": name,
            "namespace": namespace,
            "resourceVersion": str(self.version),
        }
        self.objects[(namespace, name)] = obj
        return SimpleNamespace(data=json.dumps(obj).encode())

    def spec(self) -> dict[str, Any]:
        return self.objects[("ns", "lease")]["spec"]  # type: ignore[no-any-return]


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def elector(api: FakeLeases, identity: str, clock: FakeClock | None = None, **timing: float) -> LeaderElector:
    config = ElectionConfig("ns", "lease", identity, **timing)
    kwargs = {"monotonic": clock} if clock is not None else {}
    return LeaderElector(
        api, config, on_started_leading=lambda term: None, on_stopped_leading=lambda why: None, **kwargs
    )  # type: ignore[arg-type]


def test_acquire_standby_and_takeover_after_the_lease_duration() -> None:
    api, clock = FakeLeases(), FakeClock()
    a, b = elector(api, "pod-a_1", clock), elector(api, "pod-b_1", clock)
    assert a._attempt(clock() + 10) is True and a.term == 0  # created with leaseTransitions 0
    assert api.spec()["holderIdentity"] == "pod-a_1" and api.spec()["leaseDurationSeconds"] == 15
    assert b._attempt(clock() + 10) == "pod-a_1", "held and fresh: b stands by"
    for _ in range(5):  # a renews every 2 s; b keeps seeing a changed record, so the Lease never expires
        clock.t += 2
        assert a._attempt(clock() + 10) is True
        assert b._attempt(clock() + 10) == "pod-a_1"
    assert a.term == 0 and api.spec()["leaseTransitions"] == 0, "renewals are no transitions"
    clock.t += 14.9  # a crashed: b waits leaseDuration after it last saw the record change
    assert b._attempt(clock() + 10) == "pod-a_1"
    clock.t += 0.2
    assert b._attempt(clock() + 10) is True and b.term == 1
    assert api.spec()["holderIdentity"] == "pod-b_1" and api.spec()["leaseTransitions"] == 1
    # The deposed leader, back from a pause, sees another holder: lost at once, not after its deadline.
    assert a._attempt(clock() + 10) == "pod-b_1"


def test_a_standby_tries_when_the_record_it_saw_expires_not_a_retry_period_later() -> None:
    api, clock = FakeLeases(), FakeClock()
    a, b = elector(api, "pod-a_1", clock), elector(api, "pod-b_1", clock)
    assert a._attempt(clock() + 10) is True
    assert b._attempt(clock() + 10) == "pod-a_1"  # b saw the record at 1000.0: it expires at 1015.0
    assert all(2.0 <= b._until_next_attempt() <= 2.0 * (1 + JITTER_FACTOR) for _ in range(20)), "far: the retry period"
    clock.t += 14.0
    assert all(abs(b._until_next_attempt() - 1.01) < 1e-9 for _ in range(20)), "1 s left: then, not 2-4.4 s later"
    clock.t += 1.01
    assert b._attempt(clock() + 10) is True and b.term == 1
    clock.t += 0.5  # past an expiry whose attempt failed: the retry period again, never a busy loop
    b.leading.clear()
    b._observed = {**(b._observed or {}), "holderIdentity": "pod-c_1"}
    b._observed_at = clock() - 30
    assert b._until_next_attempt() >= 2.0
    assert a._until_next_attempt() >= 2.0, "a holder it does not know to be someone else's: the retry period"


def test_optimistic_concurrency_one_winner() -> None:
    api, clock = FakeLeases(), FakeClock()
    a, b = elector(api, "pod-a_1", clock), elector(api, "pod-b_1", clock)
    assert a._attempt(clock() + 10) is True
    clock.t += 20
    assert b._attempt(clock() + 10) == "pod-a_1"  # first look: b starts its own count
    clock.t += 20
    # Both see it expired; whoever writes first wins, the other's resourceVersion is stale.
    stale = json.loads(api.read_namespaced_lease("lease", "ns").data)
    assert b._attempt(clock() + 10) is True
    stale["spec"]["holderIdentity"] = "pod-c_1"
    with pytest.raises(ApiError) as exc:
        api.replace_namespaced_lease("lease", "ns", stale)
    assert exc.value.status == 409


def test_a_released_lease_is_taken_at_once() -> None:
    api, clock = FakeLeases(), FakeClock()
    a, b = elector(api, "pod-a_1", clock), elector(api, "pod-b_1", clock)
    assert a._attempt(clock() + 10) is True
    assert b._attempt(clock() + 10) == "pod-a_1"
    assert a.release() and not a.leading.is_set()
    assert api.spec()["holderIdentity"] == "" and api.spec()["leaseDurationSeconds"] == 1
    assert b._attempt(clock() + 10) is True and b.term == 1
    assert not a.release(), "released once"


def test_an_earlier_incarnation_of_the_same_pod_is_taken_over_at_once() -> None:
    """A container restart (same pod name, new process suffix) need not wait out its own Lease."""
    api, clock = FakeLeases(), FakeClock()
    assert elector(api, "pod-a_old", clock)._attempt(clock() + 10) is True
    assert elector(api, "pod-b_1", clock)._attempt(clock() + 10) == "pod-a_old"
    restarted = elector(api, "pod-a_new", clock)
    assert restarted._attempt(clock() + 10) is True and restarted.term == 1


def test_renewal_failure_loses_leadership_after_the_renew_deadline() -> None:
    api = FakeLeases()
    started: list[int] = []
    lost: list[str] = []
    config = ElectionConfig("ns", "lease", "pod-a_1", lease_duration=1.5, renew_deadline=0.8, retry_period=0.1)
    e = LeaderElector(api, config, on_started_leading=started.append, on_stopped_leading=lost.append)
    stop = threading.Event()
    thread = e.start(stop)
    deadline = time.monotonic() + 5
    while not started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert started == [0] and e.is_leader()
    # Positive signal, not a sleep: renewals (each a Lease write) spanning more than the renew deadline. Had
    # a renewal not pushed the deadline on, leadership would be lost by now; had none been written, this waits.
    renewed_from = api.version
    wait_for(lambda: lost or api.version - renewed_from >= 10, 10, "ten renewals of the Lease (> the renew deadline)")
    assert not lost and e.is_leader(), f"lost while renewing: {lost}"
    api.fail = True
    failed_at = time.monotonic()
    thread.join(5)
    took = time.monotonic() - failed_at
    assert lost and "renew deadline" in lost[0] and not e.leading.is_set()
    assert 0.5 < took < 1.5, took  # within the renew deadline of the last renewal, before the lease duration


def test_claim_fencing_term_raises_a_recreated_lease_above_redis(store: StateStore) -> None:
    """A Lease deleted and recreated counts its transitions from 0 again: the leader first lifts its count
    above the term Redis holds, so it never shares a term with an earlier leader."""
    api, clock = FakeLeases(), FakeClock()
    store.claim_term(6)
    a = elector(api, "pod-a_1", clock)
    assert a._attempt(clock() + 10) is True and a.term == 0
    assert claim_fencing_term(a, store) == 7
    assert a.term == 7 and api.spec()["leaseTransitions"] == 7 and store.leader_term() == 7
    clock.t += 30
    b = elector(api, "pod-b_1", clock)
    b._attempt(clock() + 10)
    clock.t += 30
    assert b._attempt(clock() + 10) is True and b.term == 8
    assert claim_fencing_term(b, store) == 8 and store.leader_term() == 8


def test_election_config_is_checked_like_client_go() -> None:
    ElectionConfig("ns", "lease", "me").validate()
    for bad in (
        {"lease_duration": 10, "renew_deadline": 10},
        {"renew_deadline": 2.4, "retry_period": 2},
        {"retry_period": 0},
    ):
        with pytest.raises(ValueError):
            ElectionConfig("ns", "lease", "me", **bad).validate()  # type: ignore[arg-type]


def test_identity_and_namespace_defaults(tmp_path: Any) -> None:
    a, b = new_identity("sched-0"), new_identity("sched-0")
    assert a != b and a.startswith("sched-0_") and b.startswith("sched-0_")
    f = tmp_path / "namespace"
    f.write_text("phalanx-system\n")
    assert pod_namespace({"POD_NAMESPACE": "from-env"}, str(f)) == "from-env"
    assert pod_namespace({}, str(f)) == "phalanx-system"
    assert pod_namespace({}, str(tmp_path / "missing")) == "default"


# --- the queue's loans across a change of leader -----------------------------------------------------------------


def test_a_new_leader_gets_the_old_leaders_loans_back_at_its_first_pop() -> None:
    """Replicas under election share one consumer name (SHARED_CONSUMER), so the new leader's QueueClient is
    a new incarnation of the dead leader's consumer: its first pop returns every pod the dead one had popped,
    without waiting for the queue's consumer lease."""
    import argparse

    from phalanx.queueing.scheduling_queue import SchedulingQueue
    from phalanx_scheduler.__main__ import SHARED_CONSUMER
    from phalanx_scheduler.flags import election_enabled

    q = SchedulingQueue()
    for i in range(4):
        q.add(f"ns/g-{i}", priority=0, created_at=0.0, gang="ns/g", gang_created_at=0.0, payload=None, now=0.0)
    q.add("ns/solo", priority=0, created_at=1.0, gang="", gang_created_at=0.0, payload=None, now=0.0)
    taken = q.pop(4, 1.0, consumer=SHARED_CONSUMER, incarnation="old-leader")
    assert sorted(e.key for e in taken) == [f"ns/g-{i}" for i in range(4)]
    assert [e.key for e in q.pop(10, 1.0, consumer=SHARED_CONSUMER, incarnation="new-leader")] == [
        "ns/g-0",
        "ns/g-1",
        "ns/g-2",
        "ns/g-3",
        "ns/solo",
    ], "the dead leader's gang comes back whole, at once"
    assert q.returned_loans == 4
    # Against Kubernetes on the wall clock election is on by default, and with it the shared name.
    args = argparse.Namespace(leader_elect=None, backend="kubernetes", clock="real")
    assert election_enabled(args)
    assert not election_enabled(argparse.Namespace(leader_elect=None, backend="simulated", clock="real"))
    assert not election_enabled(argparse.Namespace(leader_elect=False, backend="kubernetes", clock="real"))
