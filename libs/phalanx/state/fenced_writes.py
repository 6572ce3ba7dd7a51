"""How every write reaches Redis: atomically, through one Lua script, and fenced by the leader's term.

Every change that must be atomic goes through lua/txn.lua, which checks, then applies, a `Txn`
(state/txn.py); a failed check writes nothing.

Fencing (scheduler replicas under leader election, libs/phalanx/cluster/leader.py): a store given a
`term` sends it with every write, and Redis refuses any write whose term is older than the newest leader's
(FencedOut), so a deposed leader cannot commit anything, whatever it still believes. Without a term
(the simulator, the binder, a scheduler without election) nothing is checked.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib import resources
from typing import Any

import redis

from phalanx.metrics.catalog import CONFLICT_REASONS, TXN_CONFLICTS
from phalanx.state.codec import gang_in_record
from phalanx.state.keys import Keys
from phalanx.state.txn import Txn

log = logging.getLogger(__name__)

_TXN_LUA = resources.files("phalanx.state").joinpath("lua/txn.lua").read_text()
_REPAIR_USAGE_LUA = resources.files("phalanx.state").joinpath("lua/repair_usage.lua").read_text()
# A new leader's claim of its fencing term: KEYS[1] P:leader:term, ARGV[1] the term. Compare-and-raise:
# written only if higher than the term there. Returns {1, term} when raised, else {0, the term there}.
_CLAIM_TERM_LUA = """
local current = tonumber(redis.call('GET', KEYS[1]) or '-1')
local term = tonumber(ARGV[1])
if term > current then
  redis.call('SET', KEYS[1], ARGV[1])
  return {1, term}
end
return {0, current}
"""

# phalanx_redis_txn_conflicts_total, by the kind of check that refused (the third field of lua/txn.lua's reply).
_CONFLICTS = {reason: TXN_CONFLICTS.labels(reason) for reason in CONFLICT_REASONS}


class TxnConflict(Exception):
    pass


class FencedOut(Exception):
    """A write of a scheduler replica that is no longer the leader: its fencing term is older than the one
    in Redis (a newer leader claimed its own), or it stepped down. Nothing of the write was applied; the
    replica must stop scheduling (it steps down and exits)."""


class FencedWriter:
    """The write path of StateStore (state/store.py): transactions, plain writes, the term's claim."""

    def __init__(self, client: redis.Redis, keys: Keys | None = None, term: int | None = None) -> None:
        """`term`: the fencing term every write carries (a scheduler elected leader); None: no fencing."""
        self.redis = client
        self.keys = keys or Keys()
        self.term = term
        # Called with the FencedOut error before it is raised, from whichever thread wrote (the scheduling
        # loop, the cluster feed): the replica steps down at once, whatever catches the error afterwards.
        self.on_fenced: Callable[[FencedOut], None] | None = None
        self._deposed = ""  # why this store refuses every write locally (see depose)
        self._txn = client.register_script(_TXN_LUA)
        self._repair_usage = client.register_script(_REPAIR_USAGE_LUA)
        self._claim_term = client.register_script(_CLAIM_TERM_LUA)

    # -- leadership fencing ----------------------------------------------------------------------
    def claim_term(self, term: int) -> tuple[bool, int]:
        """A new leader's claim: raises the term in Redis to `term` if that is higher than the one there.
        Returns (raised, the term in Redis now). Not raised: Redis has seen this term or a newer one."""
        raised, current = self._claim_term(keys=[self.keys.leader_term], args=[term])
        return bool(int(raised)), int(current)

    def leader_term(self) -> int | None:
        """The term in Redis (None: no leader has claimed one, or Redis lost it)."""
        raw = self.redis.get(self.keys.leader_term)
        return None if raw is None else int(raw)

    def depose(self, why: str) -> None:
        """This replica stepped down: every later write raises FencedOut without reaching Redis (Redis
        refuses them anyway once the next leader has claimed its term; this closes the gap until then)."""
        self._deposed = why or "stepped down"

    def _fenced(self, reason: str) -> FencedOut:
        exc = FencedOut(reason)
        if self.on_fenced is not None:
            try:
                self.on_fenced(exc)
            except Exception:  # the caller still gets the error
                log.exception("on_fenced failed")
        return exc

    @property
    def fenced(self) -> bool:
        """Whether writes are checked against the leader's term (or refused locally)."""
        return self.term is not None or bool(self._deposed)

    # -- transactions ----------------------------------------------------------------------------
    def apply(self, txn: Txn) -> tuple[bool, str]:
        ok, reason, _ = self.apply_fenced(txn)
        return ok, reason

    def apply_fenced(self, txn: Txn) -> tuple[bool, str, int]:
        """Like apply; also returns the fencing token a `txn.lock` took (0 without one). Raises FencedOut
        when this store's term is older than the leader's in Redis (nothing is written then)."""
        if txn.empty() and txn.fence is None and txn.lock is None:
            return True, "", 0
        if self._deposed:
            raise self._fenced(f"fenced out: this replica is not the leader ({self._deposed})")
        self._learn_release_gangs(txn)
        keys, args = txn.script_call(self.keys, self.term)
        result = self._txn(keys=keys, args=args)
        code = int(result[0])
        if code == 1:
            return True, "", int(result[1])
        if code == 2:
            raise self._fenced(str(result[1]))
        reason = str(result[1])
        _CONFLICTS[str(result[2])].inc()  # the script says which check refused (lua/txn.lua)
        return False, reason, 0

    def _learn_release_gangs(self, txn: Txn) -> None:
        """Fills in the gang of released pods the caller did not name (one read): the script must be
        handed the gang's keys. A record that changes meanwhile makes the script refuse, not misfile."""
        unknown = [k for k in txn.release if k not in txn.release_gangs]
        if not unknown:
            return
        for key, raw in zip(unknown, self.redis.hmget(self.keys.pods, unknown)):
            txn.release_gangs[key] = gang_in_record(raw) if raw else ""

    def must_apply(self, txn: Txn) -> None:
        ok, reason = self.apply(txn)
        if not ok:
            raise TxnConflict(reason)

    def _write(self, cmds: list[list[Any]]) -> None:
        """Plain writes (`cmds` as in Txn.cmds: [op, key suffix under the base, args...]), atomically. With
        a term they go through lua/txn.lua and its fencing check; without, as one MULTI/EXEC pipeline."""
        if not cmds:
            return
        if self.fenced:
            self.must_apply(Txn(cmds=cmds))
            return
        pipe = self.redis.pipeline(transaction=True)
        for op, suffix, *args in cmds:
            pipe.execute_command(op, f"{self.keys.base}:{suffix}", *args)
        pipe.execute()

    def _rel(self, key: str) -> str:
        """A key of self.keys relative to the base (what Txn.cmds address)."""
        return key[len(self.keys.base) + 1 :]

    # -- repair ----------------------------------------------------------------------------------
    def repair_usage(self) -> int:
        """Recomputes every node's usage from the pod records, atomically, and fixes the fields that
        drifted; returns how many were wrong."""
        if self._deposed:
            raise self._fenced(f"fenced out: this replica is not the leader ({self._deposed})")
        term = "" if self.term is None else str(self.term)
        fixed = int(self._repair_usage(keys=[self.keys.pods, self.keys.used, self.keys.leader_term], args=[term]))
        if fixed < 0:
            raise self._fenced(
                f"fenced out: leadership term {term} is older than the current leader's {self.leader_term()}"
            )
        return fixed
