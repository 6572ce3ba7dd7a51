"""Preemption's evictions: through the Eviction API, or kube-scheduler's condition-then-delete."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from phalanx.backends.api_calls import api_message, json_or_none, release, transient
from phalanx.backends.kube_writer import STRATEGIC_MERGE_PATCH, KubeWriter
from phalanx.kube import podgroups
from phalanx.kube.errors import api_errors
from phalanx.model.binding import EvictResult, EvictStatus, Victim
from phalanx.model.status import EventReason


class Eviction(KubeWriter):
    """Preemption's victims evicted, in order."""

    # Set by KubernetesBackend.__init__: the grace period an eviction gives (None: each pod's own), and
    # "api" (the Eviction API) or "delete" (condition, then delete).
    eviction_grace_seconds: int | None
    eviction_mode: str

    def evict(self, victims: list[Victim], now: float) -> list[EvictResult]:
        """Through the Eviction API (the default: PodDisruptionBudgets are checked by the API server, a 429 is
        a refusal, and the API server sets the DisruptionTarget condition, reason EvictionByEvictionAPI), or,
        with eviction_mode "delete", kube-scheduler's way: the DisruptionTarget condition (reason
        PreemptionByScheduler) first, so whoever watches the pod knows why it goes, then a delete. Then a
        Preempted Event naming the preemptor. In order; after a refusal the rest are not tried."""
        out: list[EvictResult] = []
        refused = ""
        for v in victims:
            if refused:
                out.append(EvictResult(v.pod_key, EvictStatus.REFUSED, f"not tried: {refused}"))
                continue
            result = self._evict_one(v)
            if result.status == EvictStatus.REFUSED:
                refused = f"the eviction of {v.pod_key} was refused"
            out.append(result)
        return out

    def _evict_one(self, v: Victim) -> EvictResult:
        namespace, name = v.pod_key.split("/", 1)
        try:
            pod = self._read_pod(namespace, name)
        except Exception as exc:
            return EvictResult(v.pod_key, EvictStatus.RETRY, f"reading the pod failed: {exc}")
        if pod is None or (v.uid and (pod.get("metadata") or {}).get("uid") != v.uid):
            return EvictResult(v.pod_key, EvictStatus.GONE, "no longer exists")
        uid = (pod.get("metadata") or {}).get("uid", "")
        message = f"{self.component}: {v.message}"
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": message,
            "lastTransitionTime": podgroups.rfc3339(time.time()),
        }
        delete_options: dict[str, Any] = {"preconditions": {"uid": uid}}
        if self.eviction_grace_seconds is not None:
            delete_options["gracePeriodSeconds"] = self.eviction_grace_seconds
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": delete_options,
        }
        try:
            if self.eviction_mode == "delete":
                json_or_none(
                    lambda: self.core.patch_namespaced_pod_status(
                        name,
                        namespace,
                        {"status": {"conditions": [condition]}},
                        _content_type=STRATEGIC_MERGE_PATCH,
                        _preload_content=False,
                        _request_timeout=self.retry.request_timeout,
                    )
                )
                release(
                    self.core.delete_namespaced_pod(
                        name,
                        namespace,
                        body=delete_options,
                        _preload_content=False,
                        _request_timeout=self.retry.request_timeout,
                    )
                )
            else:
                release(
                    self.core.create_namespaced_pod_eviction(
                        name,
                        namespace,
                        body,
                        _preload_content=False,
                        _request_timeout=self.retry.request_timeout,
                    )
                )
        except api_errors() as exc:
            if exc.status == 404:
                return EvictResult(v.pod_key, EvictStatus.GONE, "no longer exists")
            if exc.status == 429:  # a PodDisruptionBudget allows no disruption now
                return EvictResult(v.pod_key, EvictStatus.REFUSED, api_message(exc))
            if exc.status == 409 or (exc.status or 0) >= 500:
                return EvictResult(v.pod_key, EvictStatus.RETRY, f"{exc.status} {api_message(exc)}")
            return EvictResult(v.pod_key, EvictStatus.REFUSED, f"{exc.status} {api_message(exc)}")
        except Exception as exc:
            if transient(exc):
                return EvictResult(v.pod_key, EvictStatus.RETRY, str(exc))
            raise
        target = {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name, "uid": uid}
        self._writes.put(v.pod_key, partial(self._event_safe, target, EventReason.PREEMPTED, v.message))
        return EvictResult(v.pod_key, EvictStatus.EVICTED)
