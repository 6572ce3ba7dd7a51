"""lua/repair_usage.lua on many records: each node's usage recomputed from every record, read a page at a time
(the script's heap holds one page, not every record at once)."""

from __future__ import annotations

from collections import Counter

import redis
from builders import model_pod

from phalanx.state.codec import reservation_record
from phalanx.state.keys import Keys
from phalanx.state.store import StateStore

RECORDS = 12_000  # well past the hash's compact encoding (128 fields), so HSCAN pages it
NODES = 40


def _eval_heap_bytes(client: redis.Redis) -> int:
    info = client.info("memory")
    return int(info.get("used_memory_vm_eval", info.get("used_memory_lua", 0)))


def test_usage_is_recomputed_from_every_record_without_holding_them_all(
    store: StateStore, redis_client: redis.Redis, keys: Keys
) -> None:
    want: Counter[str] = Counter()
    pipe = redis_client.pipeline(transaction=False)
    total_bytes = 0
    for i in range(RECORDS):
        node = f"n{i % NODES}"
        held = {"cpu": 100 + i % 7, "nvidia.com/gpu": i % 3}
        pod = model_pod(f"p{i}", requests=held)
        pod.annotations = {"note": "x" * 1_000}  # records as large as a real pod's, which the repair never reads
        raw = reservation_record(pod, node, held)
        total_bytes += len(raw)
        pipe.hset(keys.pods, pod.key, raw)
        for res, amount in held.items():
            want[f"{node}\x1f{res}"] += amount
    pipe.execute()
    right, wrong = sorted(want)[:10], sorted(want)[10:20]
    redis_client.hset(keys.used, mapping={f: want[f] for f in right})
    redis_client.hset(keys.used, mapping={f: want[f] + 5 for f in wrong})
    redis_client.hset(keys.used, "gone\x1fcpu", 300)  # usage on a node no record names
    redis_client.script_flush()  # a fresh script heap, whatever other tests ran in this Redis

    fixed = store.repair_usage()

    expected = {f: str(v) for f, v in want.items() if v}
    assert redis_client.hgetall(keys.used) == expected
    missing = len(expected) - len(right) - len(wrong)
    assert fixed == len(wrong) + 1 + missing
    # HGETALL held all the records (their text and decoded tables) in the script's heap: 12 MB here.
    assert _eval_heap_bytes(redis_client) < total_bytes / 4, (_eval_heap_bytes(redis_client), total_bytes)
    redis_client.delete(keys.pods, keys.used)


def test_drift_is_found_from_the_records_as_the_script_would_fix_it(
    store: StateStore, redis_client: redis.Redis, keys: Keys
) -> None:
    """marks_and_usage_drift says whether usage differs from the records, which a reconciliation pass reads
    anyway, so the script (which stops Redis while it decodes every record) runs only when it would fix
    something: no drift after the script has run, drift after each kind of damage it repairs."""
    pipe = redis_client.pipeline(transaction=False)
    for i in range(300):
        held = {"cpu": 100 + i % 7, "nvidia.com/gpu": i % 3}  # a 0 GPU is held, and counted as nothing
        pod = model_pod(f"p{i}", requests=held)
        pipe.hset(keys.pods, pod.key, reservation_record(pod, f"n{i % 9}", held))
    pipe.execute()
    store.repair_usage()
    marks, drifted = store.marks_and_usage_drift()
    assert not drifted and len(marks) == 300 and marks["default/p4"].node == "n4"

    redis_client.hset(keys.used, "n0\x1fspare", 0)  # a 0 the script leaves alone
    assert not store.marks_and_usage_drift()[1]
    for damage in (
        lambda: redis_client.hincrby(keys.used, "n1\x1fcpu", 5),  # counted wrong
        lambda: redis_client.hdel(keys.used, "n2\x1fcpu"),  # not counted
        lambda: redis_client.hset(keys.used, "gone\x1fcpu", 300),  # counted on a node no record names
        lambda: redis_client.hdel(keys.pods, "default/p3"),  # a record gone, its usage still counted
    ):
        damage()
        assert store.marks_and_usage_drift()[1]
        assert store.repair_usage() >= 1
        assert not store.marks_and_usage_drift()[1]
    redis_client.delete(keys.pods, keys.used)
