"""Worker processes for the tests that need several real processes on one Redis (the bind mutex).

Run as `python process_workers.py WORKER JSON-ARGS`. They are started with exec, not fork: by the time
these tests run, the test process may hold gRPC threads (other tests ran servers in it), and a forked
copy of such a process can deadlock before it does anything.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import redis

from phalanx.backends.simulated import SimulatedBackend
from phalanx.binding.batch_binder import BOUND, BatchBinder
from phalanx.binding.lock import FencedLock
from phalanx.model.binding import Assignment
from phalanx.state.keys import Keys
from phalanx.state.store import StateStore

SCRIPT = str(Path(__file__).resolve())


def command(worker: str, *args: object) -> list[str]:
    return [sys.executable, SCRIPT, worker, json.dumps(args)]


def run_together(client: redis.Redis, keys: Keys, commands: list[list[str]], timeout: float = 60) -> None:
    """Starts the workers, lets them all go at once (each waits on the go list) and fails unless every one
    exits 0; none is left running."""
    procs = [subprocess.Popen(c) for c in commands]
    try:
        client.rpush(f"{keys.base}:test:go", *["go"] * len(procs))
        for p in procs:
            assert p.wait(timeout=timeout) == 0, f"worker {p.args} exited {p.returncode}"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


class CarefulBackend(SimulatedBackend):
    """The simulated cluster treated as one writing outside Redis: the binder takes the mutex itself."""

    transactional = False


def hammer_lock(url: str, prefix: str, worker: int, seconds: float) -> None:
    """Takes and gives back the bind mutex for `seconds`, recording each hold and any overlap seen."""
    client = redis.Redis.from_url(url, decode_responses=True)
    keys = Keys(prefix)
    lock = FencedLock(client, keys)
    inside, log, violations = f"{keys.base}:test:inside", f"{keys.base}:test:log", f"{keys.base}:test:violations"
    client.blpop([f"{keys.base}:test:go"], timeout=30)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with lock.hold(timeout=10) as fence:
            holders = client.incr(inside)
            if holders != 1:
                client.rpush(violations, f"worker {worker} saw {holders} holders")
            client.rpush(log, f"{worker}:{fence}")
            time.sleep(0.0005)
            client.decr(inside)
        time.sleep(0.001)  # give the others a chance: the lock is not fair
    client.close()


def bind(url: str, prefix: str, names: list[str], gang: str, one_by_one: bool, transactional: bool) -> None:
    """Binds reserved pods on node "big", one by one or as one all-or-nothing batch."""
    client = redis.Redis.from_url(url, decode_responses=True)
    store = StateStore(client, Keys(prefix))
    backend = (SimulatedBackend if transactional else CarefulBackend)(client, store.keys)
    binder = BatchBinder(store, backend, FencedLock(client, store.keys))
    client.blpop([f"{store.keys.base}:test:go"], timeout=30)
    batches = [[n] for n in names] if one_by_one else [names]
    for batch in batches:
        assignments = [Assignment(pod_key=f"default/{n}", uid=n, node="big", gang=gang) for n in batch]
        results, _ = binder.bind(assignments, not one_by_one, now=1.0)
        if any(r.status != BOUND for r in results):
            client.rpush(f"{store.keys.base}:test:errors", repr(list(results)))
    client.close()


if __name__ == "__main__":
    {"hammer_lock": hammer_lock, "bind": bind}[sys.argv[1]](*json.loads(sys.argv[2]))
