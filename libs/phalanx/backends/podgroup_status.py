"""PodGroup status: the gang reports written on the PodGroup a pod of ours names, and the gang's Event.

Only on PodGroups such a pod names (the binder's view, cluster_view.py); fields the installed CRD's schema
lacks are learnt from the API server's answer and no longer sent. Without a PodGroup, the gang's Event goes on
one of its pods.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from phalanx.backends.api_calls import json_or_none
from phalanx.backends.cluster_view import REPORT_SYNC_WAIT_S
from phalanx.backends.kube_guard import event_reason_allowed
from phalanx.backends.kube_writer import MERGE_PATCH, KubeWriter
from phalanx.kube import podgroups
from phalanx.model.binding import GangReport

log = logging.getLogger(__name__)


class PodGroupStatus(KubeWriter):
    """One gang report, as a write lane runs it."""

    _pruned: dict[str, frozenset[str]]  # API group -> PodGroup status fields its CRD lacks

    def _report_gang(self, g: GangReport) -> None:
        namespace, _, name = g.gang_key.partition("/")
        group = podgroups.group_of(g.source)
        target: dict[str, Any] | None = None
        # Its pods (ours) all deleted, no pod names it any more: only the counters saying so are written.
        gone = g.has_counts and not (g.running or g.scheduled)
        # Who owns it and occupies it are read from the view: a report that started it waits for its lists.
        self.view.wait_first_lists(REPORT_SYNC_WAIT_S)
        if (
            group is not None
            and not (gone and self.view.vacated(group, namespace, name))
            and not self.view.owns_podgroup(group, namespace, name)
        ):
            log.warning(
                'report on PodGroup %s (%s) dropped: no pod naming scheduler "%s" names it',
                g.gang_key,
                group,
                self.component,
            )
            group = None
        if group is not None:
            body = podgroups.status_patch(group, g, time.time(), self.view.occupied_by(group, namespace, name))
            pruned = self._pruned.get(group, frozenset())
            body["status"] = {k: v for k, v in body["status"].items() if k not in pruned}
            obj = json_or_none(
                lambda: self.custom.patch_namespaced_custom_object_status(
                    group,
                    podgroups.VERSIONS[group],
                    namespace,
                    podgroups.PLURAL,
                    name,
                    body,
                    _content_type=MERGE_PATCH,
                    _preload_content=False,
                )
            )
            if obj is not None:
                self._learn_schema(group, body["status"], obj.get("status") or {})
                target = {
                    "apiVersion": podgroups.api_version(group),
                    "kind": "PodGroup",
                    "namespace": namespace,
                    "name": name,
                    "uid": (obj.get("metadata") or {}).get("uid", ""),
                }
        if not g.event_reason or not g.message or not event_reason_allowed(g.event_reason, f"gang {g.gang_key}"):
            return
        if target is None and g.pod_key:  # no PodGroup: the Event goes on a pod of the gang, if it is ours
            pod_namespace, pod_name = g.pod_key.split("/", 1)
            facts = self.view.pod(g.pod_key)
            if facts is not None and self.view.ours(facts):
                target = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "namespace": pod_namespace,
                    "name": pod_name,
                    "uid": facts.uid,
                }
            elif facts is not None:
                log.warning(
                    'gang report %s: no Event on pod %s: it names scheduler "%s", not "%s"',
                    g.gang_key,
                    g.pod_key,
                    facts.scheduler,
                    self.component,
                )
        if target is not None:
            self._event(target, g.event_reason, g.message)

    def _learn_schema(self, group: str, sent: dict[str, Any], kept: dict[str, Any]) -> None:
        """Fields the installed CRD's schema does not have are pruned from what the API server stores: seen
        once in its answer, they are no longer sent (upstream scheduler-plugins' CRD has no
        status.scheduled, Phalanx's copy in deploy/crds does)."""
        dropped = {k for k in sent if k not in kept}
        if dropped - self._pruned.get(group, frozenset()):
            log.info(
                "PodGroup status in %s: the installed CRD has no %s; not written from now on",
                group,
                ", ".join(f"status.{k}" for k in sorted(dropped)),
            )
            self._pruned[group] = self._pruned.get(group, frozenset()) | dropped
