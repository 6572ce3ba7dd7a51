"""A restarted scheduler's read of every gang's record (StateReads.load_gang_records, a script per chunk of
gangs) gives what the four reads of each gang give, for gangs in every shape and across chunk boundaries."""

from __future__ import annotations

import redis

from phalanx.gang.record import GangRecord
from phalanx.state import reads
from phalanx.state.codec import gang_record
from phalanx.state.store import StateStore


def _reference(store: StateStore, keys: list[str]) -> dict[str, GangRecord]:
    """The reads one gang at a time, as the records were read before the script."""
    out = {}
    for key in keys:
        k = store.keys
        r = store.redis
        out[key] = gang_record(
            key,
            r.hgetall(k.gang(key)),
            r.smembers(k.gang_assumed(key)),
            r.smembers(k.gang_bound(key)),
            r.hgetall(k.gang_rounds(key)),
        )
    return out


def _write(r: redis.Redis, store: StateStore, i: int, key: str) -> None:
    k = store.keys
    fields: dict[str, str | int] = {"cycle": 1 + i % 4, "valid": str(i % 2)}
    if i % 3 == 0:
        fields.update(first_wait="12.5", satisfied_at="14.25", trace=f"00-{i:032x}-{i:016x}-01")
    if i % 5 == 0:
        fields.update(timed_out="1", timeouts=2, retry_at="99.5", succeeded=i % 7)
    r.hset(k.gang(key), mapping=fields)
    if i % 2:
        r.sadd(k.gang_assumed(key), *[f"{key}-a{j}" for j in range(1 + i % 3)])
    if i % 4 != 1:
        r.sadd(k.gang_bound(key), *[f"{key}-b{j}" for j in range(1 + i % 5)])
        r.hset(k.gang_rounds(key), mapping={f"{key}-b{j}": j + 1 for j in range(1 + i % 5)})


def test_every_gang_reads_as_its_own_reads_give_it(store: StateStore, redis_client: redis.Redis) -> None:
    count = 2 * reads.GANG_RECORDS_CHUNK + 7  # three chunks, the last one short
    keys = [f"ns{i % 3}/job-{i}" for i in range(count)]
    for i, key in enumerate(keys):
        _write(redis_client, store, i, key)
    keys.append("ns0/never-written")  # nothing in Redis: the defaults, as before
    got = store.load_gang_records(keys)
    assert list(got) == keys
    assert got == _reference(store, keys)
    assert got["ns0/job-3"].bound == {f"ns0/job-3-b{j}" for j in range(4)}  # the data did vary
    assert got["ns0/job-0"].timed_out and got["ns0/job-0"].satisfied_at == 14.25
    assert got["ns0/never-written"] == GangRecord(key="ns0/never-written")


def test_no_gangs_no_call(store: StateStore) -> None:
    assert store.load_gang_records([]) == {}
