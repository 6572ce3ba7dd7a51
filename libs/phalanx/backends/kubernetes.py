"""The binder's side of a real cluster: bindings, pod conditions, annotations, Events and PodGroup status,
written through the Kubernetes API.

One class per job, each in its own module, make up `KubernetesBackend`: bindings (kube_binding.py), pod
reports (kube_pod_reports.py), evictions (kube_eviction.py), PodGroup status (podgroup_status.py), on a shared
base (kube_writer.py). This module sets them up and is what the binder calls.

Reports (conditions, annotations, Events, PodGroup status) are written off the bind path by several
threads, in order per object (write_lanes): scheduling does not wait for the API server, and a slow API
server only delays messages.

Nothing is taken on trust from the caller (kube_guard): `precheck` refuses pods of other schedulers, pods
gone or being deleted, and nodes that do not exist, from a watch-fed cache; reports write only on pods
naming our scheduler (`component`) and on PodGroups such a pod names, only the annotations and Event
reasons Phalanx itself writes.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from phalanx.backends.api_calls import transient
from phalanx.backends.base import BindFailure
from phalanx.backends.cluster_view import ClusterView
from phalanx.backends.kube_binding import PodBinding
from phalanx.backends.kube_eviction import Eviction
from phalanx.backends.kube_guard import unreserved
from phalanx.backends.kube_pod_reports import PodReports
from phalanx.backends.kube_writer import RetryPolicy
from phalanx.backends.podgroup_status import PodGroupStatus
from phalanx.backends.write_lanes import WriteLanes
from phalanx.model.binding import Assignment, GangReport, PodReport
from phalanx.model.keys import DEFAULT_SCHEDULER_NAME
from phalanx.state.txn import Txn

log = logging.getLogger(__name__)

__all__ = ["KubernetesBackend", "RetryPolicy"]


class KubernetesBackend(PodBinding, PodReports, Eviction, PodGroupStatus):
    name = "kubernetes"
    transactional = False  # bindings are API calls made before the commit, not writes inside it

    def __init__(
        self,
        api_client: Any,
        *,
        component: str = DEFAULT_SCHEDULER_NAME,
        retry: RetryPolicy | None = None,
        bind_workers: int = 8,
        report_workers: int = 8,
        eviction_grace_seconds: int | None = None,
        eviction_mode: str = "api",
        own_view: bool = True,
    ) -> None:
        """`own_view` False: the cluster view starts no watch of its own; the scheduler's feed in this process
        feeds it (ClusterView.follow, the combined process)."""
        from phalanx.kube.api import KubeApi
        from phalanx.kube.connection import KubeConnection
        from phalanx.kube.io_loop import IoLoop
        from phalanx.kube.pipeline import Pipeline, supported

        self.retry = retry or RetryPolicy()
        # Writes are pipelined (kube/pipeline.py: the requests waiting for a connection go in one TLS write, a
        # quarter of the CPU each): bindings, status writes and Events each on connections of their own, so
        # a binding never queues behind a burst of Events, nor a PodGroup status behind them.
        cfg = KubeConnection.of(api_client)
        why = supported(cfg)
        if why:
            log.info("API writes not pipelined: %s", why)
        timeout = self.retry.request_timeout
        # Events on twice the connections, four to a batch: the API server answers a connection's requests
        # one after the other, so an Event at the back of a batch of 8 waited for the 7 before it, and 8
        # connections gave Events the same share of the server as the bindings they follow. Under the
        # 1,000-gang burst that put a pod's `Scheduled` Event 180-370 ms behind its binding (p50); 16 x 4: ~20.
        # Bindings spread over their connections (kube/pipeline.py): a gang's three bindings in one write were
        # answered one after the other, 9 ms at the median under steady arrival, while the bind mutex waited.
        # One thread drives the three pipelines' connections (kube/io_loop.py): a binding's answer hands its
        # Event to the Events' pipeline on that thread, and one wake-up reads the answers of every connection.
        shapes = {"k8s-bind": (bind_workers, 8, True), "k8s-write": (4, 8, False), "k8s-event": (16, 4, False)}
        self._io = None if why else IoLoop("k8s-io")
        self._pipelines = [
            Pipeline(cfg, connections=c, max_batch=b, timeout=timeout, name=n, spread=s, loop=self._io)
            for n, (c, b, s) in shapes.items()
            if self._io is not None
        ]
        # Not the client's generated API classes (their import costs the binder's start-up most of a second,
        # and pydantic checks every call): the same requests, made raw (kube/api.py).
        pipes: list[Pipeline | None] = list(self._pipelines) or [None, None, None]
        self.bind_api = KubeApi(cfg, pipes[0])
        self.core = self.custom = KubeApi(cfg, pipes[1])
        self.events_api = KubeApi(cfg, pipes[2])
        # The pods' spec.schedulerName this binder binds and reports on, and the Events' source, like
        # kube-scheduler's "default-scheduler".
        self.component = component
        self.instance = socket.gethostname()[:128]
        self._binders = ThreadPoolExecutor(bind_workers, thread_name_prefix="k8s-bind")
        # Started by from_args (the binder), else on first use: a backend built only to bind needs no watch.
        # A large list of our pods pauses after its first pages until the first bind or report (see
        # ClusterView.want); until the view is synced a bind's check GETs its pods, and a PodGroup report
        # waits for it.
        self.view = ClusterView(self.core, component, request_timeout=self.retry.request_timeout, own_watches=own_view)
        self._writes = WriteLanes(report_workers)  # status writes, in order per object
        self._pruned: dict[str, frozenset[str]] = {}  # API group -> PodGroup status fields its CRD lacks
        # Preemption: the grace period an eviction gives its victims; None: each pod's own
        # terminationGracePeriodSeconds, as kube-scheduler leaves it.
        self.eviction_grace_seconds = eviction_grace_seconds
        self.eviction_mode = eviction_mode  # "api": the Eviction API; "delete": condition, then delete

    @classmethod
    def from_args(
        cls, args: Any, after_first_list: Callable[[], object] | None = None, *, own_view: bool = True
    ) -> KubernetesBackend:
        """The binder's backend, its cluster view started (or left to follow the scheduler's feed: `own_view`
        False); `after_first_list`: see ClusterView.start."""
        from phalanx.kube.connection import connection_of

        component = getattr(args, "scheduler_name", "") or os.environ.get("PHALANX_SCHEDULER_NAME", "")
        grace = getattr(args, "eviction_grace_seconds", None)
        backend = cls(
            connection_of(args),
            component=component or DEFAULT_SCHEDULER_NAME,
            eviction_grace_seconds=grace if isinstance(grace, int) and grace >= 0 else None,
            eviction_mode=getattr(args, "eviction_mode", "api") or "api",
            own_view=own_view,
        )
        backend.view.start(after_first_list)  # warm by the first bind; until then misses are GETs
        return backend

    def close(self) -> None:
        self._writes.close()
        self._binders.shutdown(wait=True)
        for p in self._pipelines:
            p.close()
        if self._io is not None:
            self._io.stop()
        self.view.stop()

    # -- checks ----------------------------------------------------------------------------------------
    def precheck(self, assignments: list[Assignment]) -> dict[str, BindFailure]:
        self.view.want()
        return self.view.check(assignments, self._binders.map)

    def unreserved(self, a: Assignment, held: Mapping[str, int]) -> BindFailure | None:
        try:
            spec = self.view.spec_requests(a.pod_key)
        except Exception as exc:  # not checked is not bound; asked again later
            return BindFailure(f"could not read pod {a.pod_key}'s requests: {exc}", retryable=transient(exc))
        if spec is None:
            return None  # gone: the precheck has said so already
        why = unreserved(a.pod_key, spec, held)
        return BindFailure(why) if why else None

    # -- binding ---------------------------------------------------------------------------------------
    def bind(self, assignments: list[Assignment], now: float, commit: Txn) -> dict[str, BindFailure]:
        if self.bind_api.pipeline is not None:
            outcomes = self._bind_batch(assignments)
        else:
            outcomes = list(self._binders.map(self._bind_one, assignments))
        return {a.pod_key: failure for a, failure in zip(assignments, outcomes) if failure is not None}

    # -- reports ---------------------------------------------------------------------------------------
    def report(self, pods: list[PodReport], gangs: list[GangReport], now: float) -> None:
        if not (pods or gangs):
            return
        self.view.want()  # reports are checked against it too
        for p in pods:
            self._writes.put(p.pod_key, partial(self._report_pod_safe, p))
        for g in gangs:
            self._writes.put(g.gang_key, partial(self._report_gang_safe, g))

    def flush(self, timeout: float = 10.0) -> bool:
        """Waits until every report handed in so far is written."""
        return self._writes.flush(timeout) and all(p.flush(timeout) for p in self._pipelines)

    def _report_pod_safe(self, p: PodReport) -> None:
        try:
            self._report_pod(p)
        except Exception as exc:  # best effort: the next report of the pod says it again
            log.warning("reporting on pod %s failed: %s", p.pod_key, exc)

    def _report_gang_safe(self, g: GangReport) -> None:
        try:
            self._report_gang(g)
        except Exception as exc:
            log.warning("reporting on gang %s failed: %s", g.gang_key, exc)
