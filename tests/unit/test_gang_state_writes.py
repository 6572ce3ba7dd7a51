"""Gang state has one writer and memory follows Redis: a statement changes memory only after its commit;
lua/txn.lua touches only the keys it is handed (what a Redis Cluster client routes by); a release names
the pod's gang and is refused when the record says otherwise."""

from __future__ import annotations

import time
from collections.abc import Callable

import redis
from builders import gang_spec, model_node, model_pod

from phalanx.gang.manager import GangManager
from phalanx.gang.ops import BoundPodsFound, TimedOut
from phalanx.state.store import StateStore
from phalanx.state.txn import Txn, record_bound

KEY = "default/g"


def test_a_statement_changes_memory_only_when_committed() -> None:
    gm = GangManager(60)
    gm.upsert(gang_spec("g", 2))
    stmt = gm.begin()
    assert gm.try_enter_cycle(KEY, "default/p0", stmt)
    gm.assumed(KEY, ["default/p0"], 5.0, stmt, "trace-1")
    # The attempt sees its own changes; memory does not, until Redis has accepted them.
    assert stmt.record(KEY).assumed == {"default/p0"} and stmt.record(KEY).first_wait == 5.0
    assert gm.record(KEY).assumed == set() and gm.record(KEY).first_wait is None and not gm.timers_changed
    gm.commit(stmt)
    assert gm.record(KEY).assumed == {"default/p0"} and gm.record(KEY).trace == "trace-1"
    assert gm.timers_changed  # the wait started: the scheduler re-reads its next deadline
    dropped = gm.begin()  # a conflict: the statement is dropped, nothing to restore
    gm.timed_out(KEY, dropped)
    assert dropped.record(KEY).timed_out and not gm.record(KEY).timed_out


def _touched_keys(client: redis.Redis, run: Callable[[], None]) -> set[str]:
    """The keys Redis reports written while `run` runs (keyspace notifications)."""
    client.config_set("notify-keyspace-events", "KA")
    pubsub = client.pubsub()
    pubsub.psubscribe("__keyspace@*__:*")
    pubsub.get_message(timeout=1.0)  # the subscription's confirmation
    try:
        run()
        touched: set[str] = set()
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            msg = pubsub.get_message(timeout=0.1)
            if msg is None:
                continue
            if msg["type"] == "pmessage":
                touched.add(str(msg["channel"]).split(":", 1)[1])
        return touched
    finally:
        pubsub.close()
        client.config_set("notify-keyspace-events", "")


def test_the_script_writes_only_the_keys_it_is_handed(store: StateStore, redis_client: redis.Redis) -> None:
    store.put_nodes([model_node("n1", gpus=8)])
    a, b = model_pod("a", "g", gpus=1), model_pod("b", "g", gpus=1)
    gm = GangManager(60)
    gm.upsert(gang_spec("g", 2))
    stmt = gm.begin()
    gm.assumed(KEY, [a.key, b.key], 1.0, stmt, "t")
    gm.try_enter_cycle(KEY, a.key, stmt)
    reserve = Txn(reserve=[store.reserve_entry(p, "n1") for p in (a, b)], gang_ops=stmt.ops)
    release = Txn(gang_ops=[TimedOut(KEY)])
    release.release_pod(a.key, KEY)
    bound = Txn()
    record_bound(bound, {KEY: [b.key]}, 2.0)
    found = Txn(facts=[store.reserve_entry(model_pod("c", "g"), "n1")], gang_ops=[BoundPodsFound(KEY, ("default/c",))])
    for txn in (reserve, release, bound, found):
        declared = set(txn.script_call(store.keys, None)[0])
        touched = _touched_keys(redis_client, lambda txn=txn: store.must_apply(txn))
        assert touched, "the transaction wrote nothing"
        assert touched <= declared, f"written but not declared: {sorted(touched - declared)}"
    assert redis_client.smembers(store.keys.gang_bound(KEY)) == {b.key, "default/c"}


def test_a_release_naming_another_gang_is_refused(store: StateStore, redis_client: redis.Redis) -> None:
    store.put_nodes([model_node("n1", gpus=8)])
    pod = model_pod("a", "g", gpus=1)
    store.must_apply(Txn(reserve=[store.reserve_entry(pod, "n1")]).cmd("SADD", f"gang:{KEY}:assumed", pod.key))
    wrong = Txn()
    wrong.release_pod(pod.key, "default/other")
    ok, why = store.apply(wrong)
    assert not ok and "reserved for gang 'default/g'" in why
    assert redis_client.hexists(store.keys.pods, pod.key)  # nothing written
    # Without the gang named, the store reads it from the record: the pod leaves its gang's set.
    store.must_apply(Txn(release=[pod.key]))
    assert not redis_client.hexists(store.keys.pods, pod.key)
    assert redis_client.smembers(store.keys.gang_assumed(KEY)) == set()
