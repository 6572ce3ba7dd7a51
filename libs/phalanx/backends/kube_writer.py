"""The Kubernetes backend's shared part: its API handle and settings, and the calls every job of it makes
(read or patch a pod, write an Event).

KubernetesBackend (backends/kubernetes.py) is built from one class per job, each in its own module: binding
(kube_binding.py), pod reports (kube_pod_reports.py), eviction (kube_eviction.py) and PodGroup status
(podgroup_status.py). Each extends `KubeWriter`, which declares what the backend sets up for them all.
"""

from __future__ import annotations

import logging
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from phalanx.backends.api_calls import json_or_none, release
from phalanx.backends.cluster_view import ClusterView
from phalanx.backends.kube_guard import NORMAL_EVENT_REASONS
from phalanx.backends.write_lanes import WriteLanes
from phalanx.kube import podgroups

if TYPE_CHECKING:  # imported only when a backend is built (KubernetesBackend.__init__)
    from phalanx.kube.api import KubeApi

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
_MAX_EVENT_MESSAGE = 1024  # what the API server keeps of an Event's message


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 6
    initial_delay: float = 0.1
    max_delay: float = 2.0
    request_timeout: float = 15.0


class KubeWriter:
    """Set by KubernetesBackend.__init__."""

    core: KubeApi  # pods, Events, PodGroups (its writes pipelined when it has a pipeline)
    bind_api: KubeApi  # bindings, on connections of their own
    events_api: KubeApi  # Events, likewise
    custom: KubeApi
    component: str  # the pods' spec.schedulerName this binder binds and reports on; the Events' source
    instance: str
    retry: RetryPolicy
    view: ClusterView
    _writes: WriteLanes  # status writes, in order per object

    def _read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return json_or_none(
            lambda: self.core.read_namespaced_pod(
                name, namespace, _preload_content=False, _request_timeout=self.retry.request_timeout
            )
        )

    def _patch_pod(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any] | None:
        return json_or_none(
            lambda: self.core.patch_namespaced_pod(
                name,
                namespace,
                body,
                _content_type=MERGE_PATCH,
                _preload_content=False,
                _request_timeout=self.retry.request_timeout,
            )
        )

    def _event(self, target: dict[str, Any], reason: str, message: str) -> None:
        stamp = podgroups.rfc3339(time.time())
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{target['name']}.{uuid.uuid4().hex[:16]}", "namespace": target["namespace"]},
            "involvedObject": {k: v for k, v in target.items() if v},
            "reason": reason,
            "message": message[:_MAX_EVENT_MESSAGE],
            "type": "Normal" if reason in NORMAL_EVENT_REASONS else "Warning",
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        if self.events_api.pipeline is not None:  # sent with the next batch, not waited for
            self.events_api.send_event(target["namespace"], body).add_done_callback(
                partial(_event_written, target, reason)
            )
            return
        release(
            self.core.create_namespaced_event(
                target["namespace"],
                body,
                _preload_content=False,
                _request_timeout=self.retry.request_timeout,
            )
        )

    def _event_safe(self, target: dict[str, Any], reason: str, message: str) -> None:
        try:
            self._event(target, reason, message)
        except Exception as exc:  # an Event is worth a log line, never a failed bind
            log.warning("event %s on %s/%s failed: %s", reason, target["namespace"], target["name"], exc)


def _event_written(target: dict[str, Any], reason: str, done: Future[Any]) -> None:
    """A pipelined Event's answer: worth a log line when it failed, never a failed bind."""
    try:
        status = done.result().status
    except Exception as exc:
        log.warning("event %s on %s/%s failed: %s", reason, target["namespace"], target["name"], exc)
        return
    if not 200 <= status <= 299:
        log.warning("event %s on %s/%s refused: %s", reason, target["namespace"], target["name"], status)
