"""Reports on pods: the PodScheduled=False condition, Phalanx's annotations, the nominated node, and Events.

Written on a write lane (off the bind path), only on pods naming our scheduler, and only the annotations
and Event reasons Phalanx itself writes (kube_guard).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from phalanx.backends.api_calls import json_or_none
from phalanx.backends.kube_guard import event_reason_allowed, report_annotations
from phalanx.backends.kube_writer import MERGE_PATCH, STRATEGIC_MERGE_PATCH, KubeWriter
from phalanx.kube import podgroups
from phalanx.kube.errors import api_errors
from phalanx.model.binding import PodReport

log = logging.getLogger(__name__)


class PodReports(KubeWriter):
    """One pod report, as a write lane runs it."""

    def _report_pod(self, p: PodReport) -> None:
        if p.waiting and not p.annotations and not p.nominated_node:
            # Placed, waiting for the rest of its gang: kube-scheduler writes nothing on a pod it holds in
            # Permit, and neither does Phalanx. Any False PodScheduled condition, whatever its reason, is
            # repeated by Kubeflow's training-operator as a Warning Event on the job (pkg/core/job.go, v1.8.1),
            # and the gang's own GangWaiting Event and PodGroup status already say it. One API write less, too.
            return
        namespace, name = p.pod_key.split("/", 1)
        facts = self.view.pod(p.pod_key)
        if facts is None:
            return  # gone: nothing to report on
        if not self.view.ours(facts):
            log.warning(
                'report on pod %s dropped: it names scheduler "%s", not "%s"',
                p.pod_key,
                facts.scheduler,
                self.component,
            )
            return
        annotations = report_annotations(p.pod_key, p.annotations)
        pod: dict[str, Any] | None = None
        if annotations:
            # The uid makes the patch fail on another incarnation of the pod (possibly not ours) than the one checked.
            pod = self._patch_pod(namespace, name, {"metadata": {"uid": facts.uid, "annotations": annotations}})
            if pod is None:
                return
        if p.nominated_node:
            pod = pod or self._read_pod(namespace, name)
            if pod is not None and not (pod.get("spec") or {}).get("nodeName") and self.view.ours(pod):
                self._nominate(pod, p.nominated_node)
        if p.unschedulable_message:
            pod = pod or self._read_pod(namespace, name)
            reason = p.condition_reason
            for _ in range(3):
                if pod is None or (pod.get("spec") or {}).get("nodeName"):
                    return  # gone, or bound since: the report is stale
                if not self.view.ours(pod):
                    return  # recreated since the check, by someone else's scheduler
                if _scheduled_condition(pod) == ("False", reason, p.unschedulable_message):
                    if not annotations:
                        return  # nothing new to say: no second condition write, no second Event
                    break
                if self._set_not_scheduled(pod, reason, p.unschedulable_message):
                    break
                pod = self._read_pod(namespace, name)  # it changed meanwhile (bound, perhaps): look again
        if p.event_reason and event_reason_allowed(p.event_reason, f"pod {p.pod_key}"):
            uid = (pod.get("metadata") or {}).get("uid", "") if pod is not None else facts.uid
            if pod is None or self.view.ours(pod):
                self._event(
                    {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name, "uid": uid},
                    p.event_reason,
                    p.event_message or p.unschedulable_message,
                )

    def _nominate(self, pod: dict[str, Any], node: str) -> None:
        """status.nominatedNodeName, as kube-scheduler sets it on a preemptor while its victims go."""
        meta = pod.get("metadata") or {}
        json_or_none(
            lambda: self.core.patch_namespaced_pod_status(
                meta["name"],
                meta["namespace"],
                {"metadata": {"uid": meta.get("uid")}, "status": {"nominatedNodeName": node}},
                _content_type=MERGE_PATCH,
                _preload_content=False,
                _request_timeout=self.retry.request_timeout,
            )
        )

    def _set_not_scheduled(self, pod: dict[str, Any], reason: str, message: str) -> bool:
        """PodScheduled=False (with `reason`) on the pod as it was read; False when it changed since (409).

        The resourceVersion is a precondition: the binder binds pods concurrently with reporting, and an
        unschedulable condition written just after a binding would overwrite the PodScheduled=True the
        binding set."""
        meta = pod.get("metadata") or {}
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": reason,
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": podgroups.rfc3339(time.time()),
        }
        # Strategic merge: conditions merge by type, so the pod's other conditions are kept.
        body = {"metadata": {"resourceVersion": meta.get("resourceVersion")}, "status": {"conditions": [condition]}}
        try:
            json_or_none(
                lambda: self.core.patch_namespaced_pod_status(
                    meta["name"],
                    meta["namespace"],
                    body,
                    _content_type=STRATEGIC_MERGE_PATCH,
                    _preload_content=False,
                    _request_timeout=self.retry.request_timeout,
                )
            )
        except api_errors() as exc:
            if exc.status == 409:
                return False
            raise
        return True


def _scheduled_condition(pod: dict[str, Any]) -> tuple[str, str, str] | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled":
            return c.get("status", ""), c.get("reason", ""), c.get("message", "")
    return None
