"""Deterministic kill points for fault-injection tests.

`PHALANX_FAULT=<point>:<n>` makes the process exit at once (os._exit, as a SIGKILL would end it: no
cleanup, no flush) the n-th time it reaches `<point>`. Several are separated by commas. Unset, as in a
deployment, `reached()` is a dictionary lookup and nothing else.

Points (each placed where a crash hurts most):
- `binder.between_pods`: a gang batch has written some of its bindings to the API server, not all.
- `binder.before_commit`: every binding of a batch is written, the Redis commit that records them is not.
- `binder.after_intent`: the binding intent is durable in Redis, no binding has been written yet.
- `scheduler.after_commit`: a reservation was committed to Redis, the step has not sent its verdicts.
- `scheduler.before_bind`: a gang is ready and committed, the bind call has not been sent.
- `scheduler.after_nominate`: a preempting gang's nomination (victims included) is in Redis, no eviction
  has been asked for yet.
- `scheduler.before_unsatisfy`: pods of a satisfied gang were seen gone (evicted, deleted, failed, node
  lost), leaving it below its minimum; the release that returns it to unsatisfied is not committed yet.
- `scheduler.after_timeout`: a gang's timeout is in Redis (reservations released; a retrying form's retry
  time set), its pods and PodGroup have not been told.
- `scheduler.mid_backlog`: the rebuild handed the queue its first pending pods and the loop may be placing
  them; the feed has taken the rest out of its outbox and is sending them in chunks, the next not sent yet.
- `controller.between_pods`: the job controller has created one more of a job's pods (the leader first);
  the rest are not created yet.
- `controller.mid_restart`: a lost job pod's restart is counted in the job's status and the failed pod
  deleted; its replacement is not created yet.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping

log = logging.getLogger(__name__)

FAULT_ENV = "PHALANX_FAULT"
EXIT_CODE = 86

_lock = threading.Lock()
_limits: dict[str, int] = {}
_counts: dict[str, int] = {}


def configure(environ: Mapping[str, str] = os.environ) -> None:
    """Reads PHALANX_FAULT; a malformed value is refused with the variable and the bad part named."""
    _limits.clear()
    _counts.clear()
    raw = environ.get(FAULT_ENV, "").strip()
    if not raw:
        return
    for part in raw.split(","):
        point, sep, n = part.strip().rpartition(":")
        if not sep or not point or not n.isdigit() or int(n) < 1:
            raise SystemExit(f"{FAULT_ENV}={raw!r}: {part!r} must be <point>:<n> with n >= 1")
        _limits[point] = int(n)


def armed(point: str) -> bool:
    """Whether a kill is configured at `point` (code that would otherwise skip past the point can step
    through it then)."""
    return point in _limits


def reached(point: str) -> None:
    """Exits the process if this is the configured occurrence of `point`."""
    if not _limits or point not in _limits:
        return
    with _lock:
        _counts[point] = _counts.get(point, 0) + 1
        if _counts[point] < _limits[point]:
            return
    log.error("fault injection: exiting at %s (occurrence %d)", point, _limits[point])
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(EXIT_CODE)


configure()
