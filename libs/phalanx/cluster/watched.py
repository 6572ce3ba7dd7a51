"""What the cluster feed watches, and a watch event as its batch takes it: light enough to import before the
rest of the scheduler, so that its lists can start at launch (early_lists.py) while the scheduler imports."""

from __future__ import annotations

from typing import Any

from phalanx.cluster.intake_flow import Early, parse_early, parsed_skeleton
from phalanx.intake.gang_kinds import CONFIGMAP_KIND, PODGROUP_KINDS
from phalanx.kube import podgroups
from phalanx.kube.watch import Collection

NODES, PODS, CONFIGMAPS = "nodes", "pods", "configmaps"
BUDGETS = "poddisruptionbudgets"  # for preemption's choice of victims (phalanx.scheduling.preemption)

# A watch event: collection, kind (ADDED, MODIFIED, DELETED), the object, and a pod's early parse.
Event = tuple[str, str, dict[str, Any], Early]


def collections(api_client: Any) -> list[Collection]:
    from phalanx.kube.api import KubeApi

    api = KubeApi(api_client)  # not the client's generated API classes: see kube/api.py
    out = [
        Collection(NODES, api.list_node, "Node", "v1"),
        Collection(PODS, api.list_pod_for_all_namespaces, "Pod", "v1"),
        Collection(CONFIGMAPS, api.list_config_map_for_all_namespaces, CONFIGMAP_KIND, "v1"),
        Collection(BUDGETS, api.list_pod_disruption_budget_for_all_namespaces, "PodDisruptionBudget", "policy/v1"),
    ]
    for k in PODGROUP_KINDS:  # the gang-declaring kinds' one list (intake/gang_kinds.py)
        out.append(
            Collection(
                f"{podgroups.PLURAL}.{k.group}",
                api.list_cluster_custom_object,
                k.kind,
                k.api_version,
                args=(k.group, k.version, podgroups.PLURAL),
            )
        )
    return out


def feed_event(collection: str, kind: str, obj: dict[str, Any], scheduler_name: str, node_before: str | None) -> Event:
    """A watch event as the feed's batch takes it. Pods are parsed here, on their watch thread, not in the
    batch under the scheduler's lock (intake_flow.parse_early); `node_before`: the node the mirror last
    recorded for the pod (None: a pod it does not know)."""
    if collection != PODS:
        return collection, kind, obj, None
    early = parse_early(kind, obj, scheduler_name, node_before)
    return collection, kind, parsed_skeleton(obj, early), early
