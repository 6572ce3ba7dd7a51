"""The bind intent on a replica before a binding is sent: Redis WAIT, for a primary that may fail over.

Replication is asynchronous: a write the primary acknowledged can be missing on the replica Sentinel
promotes. Most of Phalanx's writes are recovered from the API server when that happens (README, "When a
process dies"); the one that is not is the binder's intent (`binding`), written just before bindings
reach the API server. Were it lost, the promoted replica would show the gang's pods merely `assumed`
(or not at all) while the API server binds them, and their capacity could be handed out again before the
scheduler's feed reports the bindings. So before its first API call the binder asks that every write up
to the intent is on `replicas` replicas; if fewer acknowledge within the timeout it sends nothing (the
pods stay `binding` on this primary and are retried, through the same check).

That also fences a deposed primary: one frozen (or partitioned) while Sentinel promoted a replica, and
then back for a moment before Sentinel demotes it, has no replicas left, so a binder still connected to
it gets 0 acknowledgements and binds nothing whatever it managed to write there.

WAIT counts the writes of the connection it runs on, so it follows a small write of its own on the same
connection (one pipelined round trip): the primary's replication stream is ordered, so the replicas
holding that write hold the intent written before it, whichever connection carried the intent.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import redis

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Durable:
    acknowledged: int  # replicas that hold every write up to this check
    wanted: int
    seconds: float  # what the check cost

    @property
    def ok(self) -> bool:
        return self.acknowledged >= self.wanted

    def reason(self) -> str:
        return (
            f"the bind intent is on {self.acknowledged} of the {self.wanted} Redis replica(s) required "
            f"(--bind-wait-replicas) after {self.seconds * 1000:.0f} ms; not binding until it is"
        )


class ReplicaWait:
    """`confirm()`: are the writes so far on `replicas` replicas (WAIT, at most `timeout` seconds)?"""

    def __init__(self, client: redis.Redis, marker_key: str, replicas: int, timeout: float) -> None:
        if replicas < 1:
            raise ValueError(f"replicas must be at least 1, not {replicas}")
        self.client = client
        self.marker_key = marker_key
        self.replicas = replicas
        self.timeout_ms = max(1, int(timeout * 1000))

    def confirm(self) -> Durable:
        started = time.perf_counter()
        pipe = self.client.pipeline(transaction=False)
        pipe.incr(self.marker_key)
        pipe.execute_command("WAIT", self.replicas, self.timeout_ms)
        try:
            _, acknowledged = pipe.execute()
        except redis.RedisError as exc:
            # NOREPLICAS (min-replicas-to-write; through Sentinel it arrives as a dropped connection), READONLY,
            # or no answer: nothing says the intent is on a replica, so not durable (the pods stay `binding`).
            log.warning("bind intent durability check failed: %s", exc)
            acknowledged = 0
        result = Durable(int(acknowledged), self.replicas, time.perf_counter() - started)
        if not result.ok:
            log.warning(result.reason())
        return result
