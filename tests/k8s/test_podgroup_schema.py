"""PodGroup status against the CRD scheduler-plugins users already have: upstream's schema has no
`status.scheduled` (Phalanx's copy in deploy/crds does), so the API server prunes it; the binder notices
and stops sending it. `occupiedBy` names the workloads of the gang's pods, as scheduler-plugins' own
controller writes it. Its own module: it narrows the CRD of the module's API server."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from conftest import Cluster, Phalanx
from waiting import wait_for

from phalanx.model.keys import GROUP_X_K8S, LABEL_X_K8S_PODGROUP
from phalanx.testing.apiserver import LocalApiServer

pytestmark = pytest.mark.integration


def _as_upstream(apiserver: LocalApiServer) -> None:
    from kubernetes import client

    ext = client.ApiextensionsV1Api(apiserver.api_client())
    name = f"podgroups.{GROUP_X_K8S}"
    crd = ext.read_custom_resource_definition(name, _preload_content=False)
    import json

    body = json.loads(crd.data)
    version = body["spec"]["versions"][0]
    version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"].pop("scheduled")
    version["additionalPrinterColumns"] = [
        c for c in version.get("additionalPrinterColumns", []) if c["jsonPath"] != ".status.scheduled"
    ]
    ext.replace_custom_resource_definition(name, body)
    time.sleep(1)  # the API server picks the new schema up


def test_status_follows_the_installed_schema_and_names_the_workload(
    apiserver: LocalApiServer, cluster: Cluster, phalanx: Phalanx, caplog: Any
) -> None:
    caplog.set_level(logging.INFO, logger="phalanx.backends.podgroup_status")
    _as_upstream(apiserver)
    ns = cluster.namespace()
    cluster.node("n1", gpus=4)
    cluster.podgroup(GROUP_X_K8S, ns, "train", 2)
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "train-job",
        "uid": "0b5e7c3a-0000-4000-8000-000000000001",
    }
    names = ["train-0", "train-1"]
    for name in names:
        cluster.core.create_namespaced_pod(
            ns,
            {
                "metadata": {"name": name, "labels": {LABEL_X_K8S_PODGROUP: "train"}, "ownerReferences": [owner]},
                "spec": {
                    "schedulerName": cluster.scheduler_name,
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "100m"}},
                        }
                    ],
                },
            },
        )
    wait_for(lambda: cluster.all_bound(ns, names), 20, "the gang to be bound")
    status = wait_for(
        lambda: (s := cluster.podgroup_status(GROUP_X_K8S, ns, "train")).get("phase") == "Scheduled" and s,
        10,
        "PodGroup status Scheduled",
    )
    assert status["occupiedBy"] == f"{ns}/train-job"
    assert "scheduled" not in status  # pruned by the schema, as with upstream's CRD
    assert any("the installed CRD has no status.scheduled" in r.getMessage() for r in caplog.records)
