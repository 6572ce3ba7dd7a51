"""Gang preemption as a scheduler duty: when a gang cannot be placed, evict the cheapest lower-priority units
that make it fit, nominate where its pods go, and keep that place for it while the victims terminate.

Order of the cross-process steps, and what a crash at each leaves:
1. The plan (phalanx.preemption.planner) is made in memory: a crash loses nothing.
2. The nomination, victims included, is written to Redis (one HSET through the fenced write path): from
   here the place is held (the reservation filter keeps pods of no higher priority off it, after a
   restart too, as resync reloads it).
3. The binder is asked to evict the victims (Evict RPC: the Eviction API on a real cluster). Victims it
   accepted are recorded in the nomination. If the scheduler dies between 2 and 3, or the binder does
   not answer, the victims not accepted yet are asked for again at the next step (evicting a pod that
   is already terminating or gone is harmless: the API answers 404 or accepts it again).
4. The victims' pods go away (the cluster feed, or the simulator, reports them): their capacity frees and
   the gang is placed there by the ordinary path, all-or-nothing.
5. The nomination is dropped once the gang holds its minimum (or is gone, timed out), or when its victims
   are all gone and it still does not fit (then it may plan again), or when an eviction was refused for
   good (a PodDisruptionBudget changed under the plan).
A gang never plans while it holds a nomination, and a gang whose own pods are victims of one does not
preempt: no cascades.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from phalanx import faults
from phalanx.framework.framework import Framework
from phalanx.gang.manager import GangStatus
from phalanx.metrics.catalog import PREEMPTION_ATTEMPTS, PREEMPTION_VICTIMS
from phalanx.model.binding import EvictStatus, Victim
from phalanx.model.budgets import DisruptionBudget
from phalanx.model.objects import PodInfo
from phalanx.preemption.budgets import BudgetLedger
from phalanx.preemption.nomination import Nomination
from phalanx.preemption.planner import NoPlan, PreemptionSearch
from phalanx.preemption.reclaim import ReclaimRule
from phalanx.preemption.victims import RunningPod, candidate_units
from phalanx.scheduling.cache import SchedulerCache
from phalanx.scheduling.ports import BinderPort
from phalanx.state.store import StateStore
from phalanx.telemetry.failures import rpc_failure

log = logging.getLogger(__name__)

NEVER = "Never"


@dataclass
class PreemptionSettings:
    enabled: bool = True
    # A gang for which no set of victims worked is not searched again for this long (the search places the
    # gang several times over; capacity freed meanwhile gets it retried by the queue anyway).
    retry_seconds: float = 5.0
    evict_backoff_seconds: float = 1.0


@dataclass
class Decision:
    """What preemption did for a gang that does not fit: `message` for its reports (why it preempted or
    could not), `nominated` the pods' nodes when it started a preemption now."""

    message: str = ""
    nominated: dict[str, str] = field(default_factory=dict)


class Preemptions:
    def __init__(
        self, store: StateStore, cache: SchedulerCache, framework: Framework, settings: PreemptionSettings
    ) -> None:
        self.store = store
        self.cache = cache
        self.framework = framework
        self.settings = settings
        self.nominations: dict[str, Nomination] = {}
        self.budgets: dict[str, DisruptionBudget] = {}  # cluster facts: re-read from the cluster, not Redis
        self._no_plan: dict[str, tuple[float, str]] = {}  # gang -> (when it may search again, why not)
        self._evict_at = 0.0
        # The pods of each gang that failed to fit, as they were popped: a gang's pods reach the scheduler
        # apart (each its own pop, the rest waiting in the queue), and a plan is made for all it needs.
        self._waiting: dict[str, dict[str, PodInfo]] = {}

    # -- state -----------------------------------------------------------------------------------
    def reload(self) -> None:
        self.nominations = {g: Nomination.from_json(raw) for g, raw in self.store.load_nominations().items()}
        self._evict_at = 0.0
        self.refresh_holds()

    def set_budgets(self, budgets: list[DisruptionBudget], removed: list[str]) -> None:
        for key in removed:
            self.budgets.pop(key, None)
        for b in budgets:
            self.budgets[b.key] = b

    def refresh_holds(self) -> None:
        snap = self.cache.snapshot
        snap.nominated = tuple(h for n in self.nominations.values() if (h := n.hold(snap)) is not None)

    def settle(self) -> None:
        """Drops the nominations whose gang holds its minimum now, or can no longer use one."""
        gangs = self.cache.gangs
        done = [
            g
            for g in self.nominations
            if g not in gangs.specs
            or gangs.status(g) in (GangStatus.TIMED_OUT, GangStatus.INVALID)
            or gangs.reached_minimum(g)  # a satisfied gang has reached it too
        ]
        self._drop(done)
        for g in [g for g in self._waiting if g not in gangs.specs or gangs.reached_minimum(g)]:
            del self._waiting[g]

    def forget_pods(self, keys: list[str]) -> None:
        """Deleted pods: no plan counts on them any more."""
        gone = set(keys)
        for pods in self._waiting.values():
            for k in gone & pods.keys():
                del pods[k]

    def _drop(self, gangs: list[str]) -> None:
        if not gangs:
            return
        self.store.drop_nominations(gangs)
        for g in gangs:
            self.nominations.pop(g, None)
        self.refresh_holds()

    def evicting(self) -> bool:
        """Whether some victim was evicted (or is to be) and has not gone yet."""
        bound = self.cache.bound
        return any(v.pod_key in bound for n in self.nominations.values() for v in n.victims)

    def being_preempted(self) -> set[str]:
        """Gangs some of whose pods are victims of a nomination (and still on their node)."""
        on_node = self.cache.snapshot.pods_by_node
        return {
            pod.gang
            for n in self.nominations.values()
            for v in n.victims
            if (pod := on_node.get(v.node, {}).get(v.pod_key)) is not None and pod.gang
        }

    # -- deciding --------------------------------------------------------------------------------
    def consider(self, gang: str, pods: list[PodInfo], now: float) -> Decision:
        """`gang` does not fit, or its minResources exceed what the cluster has free; `pods`: those it still
        needs placed, in the order they are tried. A plan makes room for both."""
        if not self.settings.enabled or not pods:
            return Decision()
        spec = self.cache.gangs.specs.get(gang)
        # How many more it must place to reach its minimum (pods that count by its match policy).
        need = spec.min_available - self.cache.gangs.placed_count(gang) if spec is not None else 0
        seen = self._waiting.setdefault(gang, {})
        for p in pods:
            seen[p.key] = p
        placed = self.cache.assumed.keys() | self.cache.bound
        waiting = [p for k, p in sorted(seen.items()) if k not in placed]
        # Room is made for its minimum only (each role's first): pods above it wait like any surplus pod.
        pods = self.cache.gangs.required_first(gang, waiting, lambda p: p)[: max(0, need)]
        nom = self.nominations.get(gang)
        if nom is not None:
            left = [v.pod_key for v in nom.victims if v.pod_key in self.cache.bound]
            if left:
                shown = ", ".join(left[:3]) + (f" and {len(left) - 3} more" if len(left) > 3 else "")
                return Decision(
                    f"preempting: waiting for {len(left)} evicted pod(s) to terminate ({shown})", nom.nodes_by_pod()
                )
            self._drop([gang])  # its victims are gone and it still does not fit: it may search again
        if len(pods) < need or not pods:
            # Evicting for a gang that could not start anyway would waste the victims' work.
            return Decision(f"not preempting: {len(pods)} of the {need} pods it needs have arrived")
        if any(p.preemption_policy == NEVER for p in pods):
            return Decision("not preempting: preemptionPolicy is Never")
        if gang in self.being_preempted():
            return Decision("not preempting: pods of this gang are being preempted themselves")
        until, why = self._no_plan.get(gang, (0.0, ""))
        if now < until:
            return Decision(why)
        priority = max(p.priority for p in pods)
        running, all_running = self._candidates(priority)
        reclaim = ReclaimRule.of(pods[0], self.cache.snapshot.tenant_shares())
        units, quota = candidate_units(running, priority, self._minimum_of, reclaim.may_take)
        ledger = BudgetLedger(self.budgets.values(), [r.pod for r in all_running])
        # minResources is checked (by the scheduler's gate) only while nothing of the gang is placed: so here.
        floor = spec.min_resources if spec is not None and self.cache.gangs.placed_count(gang) == 0 else None
        PREEMPTION_ATTEMPTS.inc()
        result = PreemptionSearch(self.framework, self.cache.snapshot, pods, units, quota, ledger, floor).run()
        if isinstance(result, NoPlan):
            why = f"not preempting: {result.reason}"
            if any(not reclaim.may_take(r.pod) for r in running):
                why += f" ({reclaim.describe()})"
            self._no_plan[gang] = (now + self.settings.retry_seconds, why)
            return Decision(why)
        self._no_plan.pop(gang, None)
        snap = self.cache.snapshot
        placements = {pod.key: (snap.nodes[i].name, held) for pod, i, held in result.placements}
        message = f"preempted by gang {gang} (priority {priority})"
        victims = [Victim(v.key, v.pod.uid, v.node, gang, message) for v in result.victims]
        nom = Nomination(gang, priority, now, placements, victims)
        self.store.put_nomination(gang, nom.to_json())  # before any eviction: see the module's steps
        faults.reached("scheduler.after_nominate")
        self.nominations[gang] = nom
        self.refresh_holds()
        nodes = nom.nodes()
        log.info("gang %s preempts %s", gang, result.summary())
        return Decision(
            f"preempting {result.summary()}; nominated node(s) {', '.join(nodes[:5])}"
            + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else ""),
            nom.nodes_by_pod(),
        )

    def _candidates(self, priority: int) -> tuple[list[RunningPod], list[RunningPod]]:
        """Bound pods below `priority` not already promised to another nomination, with what they hold
        (from their records in Redis: the devices they occupy), and every bound pod (for budgets)."""
        promised = {v.pod_key for n in self.nominations.values() for v in n.victims}
        bound = self.cache.bound
        found = [
            (node, pod)
            for node, pods in self.cache.snapshot.pods_by_node.items()
            for key, pod in pods.items()
            if key in bound
        ]
        lower = [k for _, p in found if p.priority < priority and (k := p.key) not in promised]
        records = self.store.get_pods(lower) if lower else {}
        everyone = [RunningPod(p, node, p.requests) for node, p in found]
        running = [RunningPod(p, node, r.requests) for node, p in found if (r := records.get(p.key)) is not None]
        return running, everyone

    def _minimum_of(self, gang: str) -> int | None:
        """How many running pods a gang must keep: its minimum while a gang rule applies to it."""
        spec = self.cache.gangs.specs.get(gang)
        if spec is None or spec.invalid:
            return None
        return spec.min_available

    # -- evicting --------------------------------------------------------------------------------
    def evict_pending(self, binder: BinderPort, now: float, force: bool = False) -> list[str]:
        """Asks the binder to evict every victim not accepted yet; returns the gangs whose preemption was
        refused (their nominations are dropped: they plan again)."""
        if not any(n.unsent for n in self.nominations.values()) or (now < self._evict_at and not force):
            return []
        refused: list[str] = []
        for gang, nom in sorted(self.nominations.items()):
            unsent = nom.unsent
            if not unsent:
                continue
            try:
                results = binder.evict(unsent, now)
            except Exception as exc:
                log.warning("evictions for gang %s not delivered (%s); retried", gang, rpc_failure(exc)[:200])
                self._evict_at = now + self.settings.evict_backoff_seconds
                break
            changed = False
            for r in results:
                if r.status in (EvictStatus.EVICTED, EvictStatus.GONE):
                    nom.accepted.add(r.pod_key)
                    if r.status == EvictStatus.EVICTED:
                        PREEMPTION_VICTIMS.inc()
                    changed = True
                elif r.status == EvictStatus.RETRY:
                    self._evict_at = now + self.settings.evict_backoff_seconds  # asked again, not at once
                elif r.status == EvictStatus.REFUSED:
                    log.warning("gang %s: eviction of %s refused: %s", gang, r.pod_key, r.message)
                    self._no_plan[gang] = (0.0, "")
                    refused.append(gang)
                    break
            if gang in refused:
                continue
            if changed:
                self.store.put_nomination(gang, nom.to_json())
        self._drop(refused)
        return refused
