"""The Helm chart (two value sets) and the plain manifests, applied with server-side dry run to a real
kube-apiserver: every object must pass the API server's own validation (schemas, RBAC rules, probes)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException

from phalanx.testing.apiserver import LocalApiServer, apiserver_available

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deploy"))
from test_deploy_artifacts import HELM_MISSING, MANIFESTS, VALUE_SETS, find_helm, helm_template  # noqa: E402

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not apiserver_available(), reason="kube-apiserver/etcd not built: "
                                 "run hack/build-k8s-binaries.sh")]


@pytest.fixture(scope="module")
def api() -> Iterator[client.ApiClient]:
    with LocalApiServer() as server:
        yield server.api_client()


def _apply(dyn: dynamic.DynamicClient, obj: dict[str, Any], dry_run: bool) -> None:
    resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    namespace = obj["metadata"].get("namespace") if resource.namespaced else None
    if resource.namespaced and namespace is None:
        namespace = "phalanx-system"
    resource.server_side_apply(body=obj, name=obj["metadata"]["name"], namespace=namespace,
                               field_manager="phalanx-tests", force_conflicts=True,
                               dry_run="All" if dry_run else None)


def _apply_all(api: client.ApiClient, docs: list[dict[str, Any]]) -> list[str]:
    dyn = dynamic.DynamicClient(api)
    # Namespaces and CRDs exist for real first: a dry-run object cannot live in a dry-run namespace.
    for obj in docs:
        if obj["kind"] in ("Namespace", "CustomResourceDefinition"):
            _apply(dyn, obj, dry_run=False)
    try:
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="phalanx-system")))
    except ApiException as exc:
        if exc.status != 409:
            raise
    failures = []
    for obj in docs:
        try:
            _apply(dyn, obj, dry_run=True)
        except ApiException as exc:
            failures.append(f"{obj['kind']} {obj['metadata'].get('name')}: {exc.status} {exc.body}")
    return failures


@pytest.mark.skipif(find_helm() is None, reason=HELM_MISSING)
@pytest.mark.parametrize("values", list(VALUE_SETS))
def test_rendered_chart_passes_server_side_dry_run(api: client.ApiClient, values: str, tmp_path: Path) -> None:
    docs = helm_template(tmp_path, VALUE_SETS[values])
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "Service", "ClusterRole", "ClusterRoleBinding", "ServiceAccount"} <= kinds
    assert _apply_all(api, docs) == []


def test_plain_manifests_pass_server_side_dry_run(api: client.ApiClient) -> None:
    docs: list[dict[str, Any]] = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert len([d for d in docs if d["kind"] == "Deployment"]) >= 3
    assert _apply_all(api, docs) == []


def test_dry_run_catches_an_invalid_object(api: client.ApiClient) -> None:
    """The check can fail: a Deployment with a malformed probe is refused by the API server."""
    bad = {"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "broken", "namespace": "phalanx-system"},
           "spec": {"selector": {"matchLabels": {"a": "b"}},
                    "template": {"metadata": {"labels": {"a": "b"}},
                                 "spec": {"containers": [{"name": "c", "image": "x",
                                                          "readinessProbe": {"grpc": {"port": 70000}}}]}}}}
    failures = _apply_all(api, [bad])
    assert len(failures) == 1 and "Deployment broken: 422" in failures[0]
