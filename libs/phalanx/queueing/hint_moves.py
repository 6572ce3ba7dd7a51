"""Hint moves: which unschedulable entries a cluster event may help, and which pods in flight missed one.

An unschedulable entry keeps the hint its verdict carried (see hints.py), and an event that only changed
capacity moves just the entries it may help; a gang moves whole when any of its pods may be helped. Gangs
helped by their slot counts (Strict gangs) move MOVE_BUDGET pods at a time in queue order: the others wait
until those are answered, then are judged again on the counts the scheduler's reports (with the capacity
the moved ones took) have left, so capacity for one gang is not tried by every waiting gang. A pod answered
unschedulable after an event that happened while it was in flight goes to backoff only if that event may
help it (recent events are remembered for this).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from phalanx.queueing.entry import Entry, SubQueue
from phalanx.queueing.gangs import Gangs
from phalanx.queueing.hints import Freed, helps, still_fits
from phalanx.queueing.unschedulable import Unschedulable

# Events remembered for pods in flight (see missed); a pod popped before the oldest one remembered counts as
# having missed an event that helps it.
MAX_EVENT_LOG = 4096

# Pods of gangs moved at once by their slot counts (see _budgeted); the others wait until those are answered.
MOVE_BUDGET = 64


class HintMoves:
    """Chooses what moves; the caller moves it (to active, or to backoff while its delay runs)."""

    def __init__(
        self,
        entries: dict[str, Entry],
        unschedulable: Unschedulable,
        gangs: Gangs,
        sort_key: Callable[[Entry], tuple[Any, ...]],
    ) -> None:
        self._entries = entries
        self._unschedulable = unschedulable
        self._gangs = gangs
        self._sort_key = sort_key
        self.seq = 0  # events so far; an entry popped records it (Entry.move_seq_at_pop)
        # (seq, event) of recent events: None (every pod), a tuple of Freed, or a gang name (that gang's pods).
        self._events: deque[tuple[int, Any]] = deque(maxlen=MAX_EVENT_LOG)
        self.skipped = 0  # unschedulable entries an event left where they were (its hints said it cannot help)
        self._deferred: dict[str, None] = {}  # gangs an event may help, held back until _budget_moved is answered
        self._budget_moved: set[str] = set()  # entries moved by a budget and not answered yet

    def event(self, events: tuple[Freed, ...] | None) -> list[Entry] | None:
        """A cluster event: None (a node added or changed, or an event that says nothing) moves every
        unschedulable entry; capacity changes move those their hints say may be helped; capacity only taken
        moves nothing (None) but the slot counts take it in."""
        if events is None:
            self._log(None)
            self._deferred.clear()
            return self._moving(list(self._unschedulable.values()))
        if all(ev.taken_only for ev in events):
            for hint in self._unschedulable.hints():
                helps(hint, events)
            return None
        self._log(events)
        return self._moving(self._helped(events))

    def gang_activated(self, gang: str) -> None:
        """The gang made progress: its entries in flight count it as an event, and it is held back no more."""
        self._log(gang)
        self._deferred.pop(gang, None)

    def settled(self, key: str) -> None:
        """An entry moved by a budget was answered (or left the queue)."""
        if self._budget_moved:
            self._budget_moved.discard(key)

    def missed(self, e: Entry) -> bool:
        """Did an event that may help `e` happen since it was popped?"""
        since = e.move_seq_at_pop
        if since == self.seq:
            return False
        if not self._events or self._events[0][0] > since + 1:
            return True  # older than what is remembered
        missed = []
        for seq, event in reversed(self._events):
            if seq <= since:
                break
            if event is None or event == e.gang:
                return True
            if not isinstance(event, str):
                missed.append(event)
        # Oldest first: a gang hint keeps each node's latest slots (see hints.py).
        return any(helps(e.hint, event) for event in reversed(missed))

    def release_deferred(self) -> list[Entry] | None:
        """The gangs last moved by their slot counts were answered: those held back whose counts still add
        up move next (a budget at a time); the others wait for an event as before. None: not yet."""
        if not self._deferred:
            return None
        if self._budget_moved:  # answered ones leave the set in settled(); this only drops what was lost track of
            self._budget_moved = {
                k
                for k in self._budget_moved
                if (e := self._entries.get(k)) is not None and e.where != SubQueue.UNSCHEDULABLE
            }
            if self._budget_moved:
                return None
        still = set()
        for gang in self._deferred:
            if any(still_fits(e.hint) for e in self._waiting(gang)):
                still.add(gang)
        moving = self._budgeted(still)
        return self._moving([e for e in self._unschedulable.values() if e.gang in moving])

    def _log(self, event: Any) -> None:
        self.seq += 1
        self._events.append((self.seq, event))

    def _moving(self, targets: list[Entry]) -> list[Entry]:
        self.skipped += len(self._unschedulable) - len(targets)
        return targets

    def _waiting(self, gang: str) -> list[Entry]:
        """The gang's unschedulable entries."""
        members = (self._entries[k] for k in self._gangs.members(gang))
        return [e for e in members if e.where == SubQueue.UNSCHEDULABLE]

    def _helped(self, events: tuple[Freed, ...]) -> list[Entry]:
        """The unschedulable entries `events` may help: a gang's all when one of its pods may be helped.
        Pods of a unit usually share one hint, so each distinct hint is judged once (every hint with slot
        counts is, so its counts take in every event). Gangs judged by slot counts move a budget at a time."""
        judged: dict[int, bool] = {}
        gangs: dict[str, bool] = {}
        counted: set[str] = set()  # gangs helped by their slot counts
        singles: set[str] = set()
        for e in self._unschedulable.values():
            h = id(e.hint)
            ok = judged.get(h)
            if ok is None:
                ok = judged[h] = helps(e.hint, events)
            if e.gang:
                if ok and not gangs.get(e.gang):
                    gangs[e.gang] = True
                    if e.hint is not None and e.hint.tally is not None:
                        counted.add(e.gang)
                else:
                    gangs.setdefault(e.gang, False)
            elif ok:
                singles.add(e.key)
        moving = {g for g, ok in gangs.items() if ok} - counted
        moving |= self._budgeted(counted | self._deferred.keys())
        return [e for e in self._unschedulable.values() if (e.gang in moving if e.gang else e.key in singles)]

    def _budgeted(self, gangs: set[str]) -> set[str]:
        """Of `gangs` (helped by their slot counts), those to move now, in queue order and up to
        MOVE_BUDGET pods (at least one gang); the others wait in `_deferred` until the moved ones are
        answered, then are judged again on the counts as the scheduler's reports have left them. So the
        capacity one gang finishing frees is tried by a few waiting gangs, not by every one of them."""
        units = []
        for gang in gangs:
            members = self._waiting(gang)
            if members:
                units.append((min(self._sort_key(e) for e in members), gang, len(members)))
        units.sort()
        self._deferred.clear()
        moving: set[str] = set()
        budget = MOVE_BUDGET - len(self._budget_moved)
        for _, gang, size in units:
            if size > budget and (moving or self._budget_moved):
                self._deferred[gang] = None
                continue
            moving.add(gang)
            budget -= size
            self._budget_moved.update(e.key for e in self._waiting(gang))
        return moving
