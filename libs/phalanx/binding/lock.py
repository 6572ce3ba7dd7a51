"""The bind mutex: a Redis lock with a lease, and a fencing token that the state commit checks.

Every binder replica takes it for a gang batch and for ordinary binds alike, so they never interleave.
A holder that stalls past its lease loses the lock; its commit then fails the fence check in
lua/txn.lua because the next holder's acquisition advanced the token.
"""

from __future__ import annotations

import time
import uuid
from contextlib import contextmanager
from typing import Iterator

import redis

from phalanx.state.keys import Keys

_ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class LockTimeout(Exception):
    pass


class FencedLock:
    def __init__(self, client: redis.Redis, keys: Keys, lease_seconds: float = 30.0) -> None:
        self.redis = client
        self.keys = keys
        self.lease_ms = int(lease_seconds * 1000)
        self._acquire = client.register_script(_ACQUIRE)
        self._release = client.register_script(_RELEASE)

    @contextmanager
    def hold(self, timeout: float = 30.0) -> Iterator[int]:
        """Yields the fencing token while the lock is held."""
        token = uuid.uuid4().hex
        deadline = time.monotonic() + timeout
        delay = 0.0005
        while True:
            fence = int(self._acquire(keys=[self.keys.bind_lock, self.keys.bind_fence], args=[token, self.lease_ms]))
            if fence:
                break
            if time.monotonic() > deadline:
                raise LockTimeout(f"bind lock {self.keys.bind_lock} not acquired within {timeout:g}s")
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        try:
            yield fence
        finally:
            self._release(keys=[self.keys.bind_lock], args=[token])
