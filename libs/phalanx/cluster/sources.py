"""What the cluster feed (feed.py) watches: nodes, pods, the ConfigMaps and PodGroups that declare gangs, and
PodDisruptionBudgets; and the other reader of its pods and nodes a process may have (`Follower`: the binder's
view in the combined process)."""

from __future__ import annotations

import threading
from typing import Any, Protocol

from phalanx.intake.gang_kinds import CONFIGMAP_KIND, PODGROUP_KINDS
from phalanx.kube import podgroups
from phalanx.kube.watch import Collection

NODES, PODS, CONFIGMAPS = "nodes", "pods", "configmaps"
BUDGETS = "poddisruptionbudgets"  # for preemption's choice of victims (phalanx.scheduling.preemption)


def collections(api_client: Any) -> list[Collection]:
    """The feed's watches, over `api_client`'s connection."""
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


class Follower(Protocol):
    """Another reader of the feed's pods and nodes in this process (the binder's cluster view in the combined
    process), handed each event on its watch thread before the feed's batch takes it."""

    def follow(self, synced: list[threading.Event]) -> None: ...

    def pod_event(self, kind: str, obj: dict[str, Any]) -> None: ...

    def node_event(self, kind: str, obj: dict[str, Any]) -> None: ...
