"""Places the pods of a round that belong to no gang (or to a gang once satisfied), pod by pod, and sends
them to the binder: one attempt for all of them, committed in one transaction."""

from __future__ import annotations

import logging

from phalanx import faults
from phalanx.framework.framework import Framework
from phalanx.model.binding import Assignment
from phalanx.queueing.scheduling_queue import Outcome
from phalanx.scheduling.attempt import Attempt, skip_reserved
from phalanx.scheduling.binds import BindDispatch
from phalanx.scheduling.cache import SchedulerCache
from phalanx.scheduling.hints import rejection_hint
from phalanx.scheduling.ports import Verdict
from phalanx.scheduling.reports import StatusReports
from phalanx.scheduling.reservation import ReservationPlanner
from phalanx.scheduling.round import RoundState
from phalanx.state.store import StateStore

log = logging.getLogger(__name__)


def schedule_ordinary(
    state: RoundState,
    store: StateStore,
    cache: SchedulerCache,
    framework: Framework,
    reports: StatusReports,
    reservation: ReservationPlanner,
    binds: BindDispatch,
) -> None:
    if not state.ordinary:
        return
    items = skip_reserved(cache, state.ordinary, state)
    attempt = Attempt(cache, store)
    for item in items:
        res = framework.place(item.pod, cache.snapshot)
        if res.ok:
            assert res.node_index is not None
            attempt.place(item, res.node_index, res.requests)
        else:
            hint = rejection_hint(framework, item.pod, cache.snapshot)
            state.verdicts.append(Verdict(item, Outcome.UNSCHEDULABLE, res.message, hint))
            reports.pod(item.pod.key, res.message)
    if not attempt.placed:
        return
    placed = list(attempt.placed)
    ok, reason = attempt.commit()
    if not ok:
        log.info("ordinary pods: commit conflict (%s); retrying after backoff", reason)
        for p in placed:
            state.verdicts.append(Verdict(p.item, Outcome.BACKOFF, f"commit conflict: {reason}"))
        cache.reload_usage(store.load_used())
        state.reloaded = True
        return
    assignments = []
    for p in placed:
        node = attempt.node_name(p)
        state.freed.taken(node)
        if reservation.enabled:
            reservation.note_started(p.item.pod.key, state.now)
        pod = p.item.pod
        assignments.append(Assignment(pod_key=pod.key, uid=pod.uid, node=node, gang=pod.gang))
    faults.reached("scheduler.after_commit")
    binds.dispatch(assignments, False, state, placed[0].item.trace, {p.item.pod.key: p.item for p in placed})
