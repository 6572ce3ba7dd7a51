"""The Helm chart (every value set, with mutual TLS and NetworkPolicies on) and the plain manifests, applied
with server-side dry run to a real kube-apiserver: every object must pass the API server's own validation
(schemas, RBAC rules, probes, NetworkPolicies, Secrets).

The cert-manager path is checked against minimal structural CRDs for certificates/issuers.cert-manager.io
(cert-manager itself is not available offline): they accept any spec, so these tests show that the objects
are well-formed Kubernetes objects of the right kinds; the fields themselves are checked in
tests/deploy/test_deploy_artifacts.py.

Beyond dry runs: the RBAC roles are applied for real and asked, with SubjectAccessReviews, exactly what each
ServiceAccount may do (tests/deploy/test_rbac_allowlist.py's ALLOWLIST, and nothing else); and the chart is
installed and upgraded with helm against the server, to show that the generated certificates and the Redis
password survive upgrades (lookup) and are reissued only when their Secret is deleted.
"""

from __future__ import annotations

import base64
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException
from waiting import wait_for

from phalanx.testing.apiserver import LocalApiServer, apiserver_available

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deploy"))
from test_deploy_artifacts import (  # noqa: E402
    CERT_MANAGER_API,
    CHART,
    COMBINED_VALUES,
    HELM_MISSING,
    MANIFESTS,
    SERVICES,
    VALUE_SETS,
    find_helm,
    helm_template,
)
from test_rbac_allowlist import ALLOWLIST, PODGROUP_GROUPS  # noqa: E402

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not apiserver_available(), reason="kube-apiserver/etcd not built: run hack/build-k8s-binaries.sh"
    ),
]
needs_helm = pytest.mark.skipif(find_helm() is None, reason=HELM_MISSING)

# Minimal stand-ins for cert-manager's CRDs: the right group, version, kinds and scope; any content.
CERT_MANAGER_KINDS = {"Certificate": "certificates", "Issuer": "issuers"}


def _cert_manager_crd(kind: str, plural: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.cert-manager.io"},
        "spec": {
            "group": "cert-manager.io",
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }


def _install_cert_manager_crds(api: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(api)
    custom = client.CustomObjectsApi(api)
    for kind, plural in CERT_MANAGER_KINDS.items():
        ext.create_custom_resource_definition(_cert_manager_crd(kind, plural))

    def served(plural: str) -> bool:
        try:
            custom.list_cluster_custom_object("cert-manager.io", "v1", plural, _preload_content=False)
            return True
        except ApiException:
            return False

    for plural in CERT_MANAGER_KINDS.values():
        wait_for(lambda: served(plural), 30, f"CRD {plural}.cert-manager.io served")


@pytest.fixture(scope="module")
def server() -> Iterator[LocalApiServer]:
    with LocalApiServer() as s:
        _install_cert_manager_crds(s.api_client())
        yield s


@pytest.fixture(scope="module")
def api(server: LocalApiServer) -> client.ApiClient:
    return server.api_client()


def _apply(dyn: dynamic.DynamicClient, obj: dict[str, Any], dry_run: bool) -> None:
    resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    namespace = obj["metadata"].get("namespace") if resource.namespaced else None
    if resource.namespaced and namespace is None:
        namespace = "phalanx-system"
    resource.server_side_apply(
        body=obj,
        name=obj["metadata"]["name"],
        namespace=namespace,
        field_manager="phalanx-tests",
        force_conflicts=True,
        dry_run="All" if dry_run else None,
    )


def _ensure_namespace(api: client.ApiClient, name: str) -> None:
    try:
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    except ApiException as exc:
        if exc.status != 409:
            raise


def _apply_all(api: client.ApiClient, docs: list[dict[str, Any]]) -> list[str]:
    dyn = dynamic.DynamicClient(api)
    # Namespaces and CRDs exist for real first: a dry-run object cannot live in a dry-run namespace.
    for obj in docs:
        if obj["kind"] in ("Namespace", "CustomResourceDefinition"):
            _apply(dyn, obj, dry_run=False)
    _ensure_namespace(api, "phalanx-system")
    failures = []
    for obj in docs:
        try:
            _apply(dyn, obj, dry_run=True)
        except ApiException as exc:
            failures.append(f"{obj['kind']} {obj['metadata'].get('name')}: {exc.status} {exc.body}")
    return failures


def _kinds(docs: list[dict[str, Any]]) -> set[str]:
    return {d["kind"] for d in docs}


@pytest.mark.skipif(find_helm() is None, reason=HELM_MISSING)
@pytest.mark.parametrize("values", list(VALUE_SETS))
def test_rendered_chart_passes_server_side_dry_run(api: client.ApiClient, values: str, tmp_path: Path) -> None:
    docs = helm_template(tmp_path, VALUE_SETS[values])
    kinds = _kinds(docs)
    assert {"Deployment", "Service", "ClusterRole", "ClusterRoleBinding", "ServiceAccount"} <= kinds
    if values == "cert-manager-redis-tls":
        assert {"Certificate", "Issuer"} <= kinds
    else:
        assert "Secret" in kinds and "NetworkPolicy" in kinds
    assert _apply_all(api, docs) == []


@needs_helm
def test_chart_selects_cert_manager_from_api_versions(api: client.ApiClient, tmp_path: Path) -> None:
    """With cert-manager.io/v1 among the cluster's APIs (here: --api-versions), the default values render
    cert-manager's objects instead of generated Secrets, and they pass the dry run."""
    docs = helm_template(tmp_path, None, "--api-versions", CERT_MANAGER_API)
    assert {"Certificate", "Issuer", "NetworkPolicy"} <= _kinds(docs)
    assert not [d for d in docs if d["kind"] == "Secret" and d.get("type") == "kubernetes.io/tls"]
    assert _apply_all(api, docs) == []


def test_plain_manifests_pass_server_side_dry_run(api: client.ApiClient) -> None:
    docs: list[dict[str, Any]] = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert len([d for d in docs if d["kind"] == "Deployment"]) >= 3
    assert "NetworkPolicy" in _kinds(docs)
    assert _apply_all(api, docs) == []
    optional = [d for d in yaml.safe_load_all((MANIFESTS / "cert-manager" / "certificates.yaml").read_text()) if d]
    assert _kinds(optional) == {"Certificate", "Issuer"}
    assert _apply_all(api, optional) == []


def test_dry_run_catches_an_invalid_object(api: client.ApiClient) -> None:
    """The check can fail: a Deployment with a malformed probe is refused by the API server."""
    bad = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "broken", "namespace": "phalanx-system"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {"containers": [{"name": "c", "image": "x", "readinessProbe": {"grpc": {"port": 70000}}}]},
            },
        },
    }
    failures = _apply_all(api, [bad])
    assert len(failures) == 1 and "Deployment broken: 422" in failures[0]


# --- what each ServiceAccount may do, asked of the API server's RBAC authorizer ---------------------------

# Every (apiGroup, resource) and verb asked about: what Phalanx uses and its neighbours it must not have.
CORE_RESOURCES = (
    "pods",
    "pods/binding",
    "pods/status",
    "pods/eviction",
    "pods/exec",
    "nodes",
    "nodes/status",
    "configmaps",
    "secrets",
    "events",
    "services",
    "serviceaccounts/token",
)
OTHER_RESOURCES = [(g, r) for g in PODGROUP_GROUPS for r in ("podgroups", "podgroups/status")] + [
    ("events.k8s.io", "events"),
    ("coordination.k8s.io", "leases"),
    ("rbac.authorization.k8s.io", "clusterroles"),
]
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")


def _may(authz: client.AuthorizationV1Api, namespace: str, account: str, group: str, resource: str, verb: str) -> bool:
    name, _, sub = resource.partition("/")
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=f"system:serviceaccount:{namespace}:{account}",
            groups=["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
            resource_attributes=client.V1ResourceAttributes(
                namespace="default", group=group, resource=name, subresource=sub or None, verb=verb
            ),
        )
    )
    return bool(authz.create_subject_access_review(review).status.allowed)


def _rbac_docs(source: str, tmp_path: Path) -> tuple[list[dict[str, Any]], str, str]:
    """The RBAC objects of `source`, their namespace and the account-name prefix."""
    if source == "manifests":
        docs = [d for d in yaml.safe_load_all((MANIFESTS / "20-rbac.yaml").read_text()) if d]
        return docs, "phalanx-system", "phalanx-"
    if find_helm() is None:
        pytest.skip(HELM_MISSING)
    # Another namespace than the manifests', and renamed roles: the objects are created for real.
    docs = [d for d in helm_template(tmp_path, None, namespace="phalanx-sar") if d["kind"].startswith("ClusterRole")]
    for d in docs:
        d["metadata"]["name"] = "sar-" + d["metadata"]["name"]
        if d["kind"] == "ClusterRoleBinding":
            d["roleRef"]["name"] = "sar-" + d["roleRef"]["name"]
    return docs, "phalanx-sar", "phalanx-"


@pytest.mark.parametrize("source", ["manifests", "helm"])
def test_service_accounts_may_do_exactly_the_allowlist(api: client.ApiClient, source: str, tmp_path: Path) -> None:
    docs, namespace, prefix = _rbac_docs(source, tmp_path)
    dyn = dynamic.DynamicClient(api)
    for ns in {namespace, *(o["metadata"].get("namespace") for o in docs)} - {None}:
        _ensure_namespace(api, ns)  # the scheduler's lease Role lives in the release namespace
    for obj in docs:
        _apply(dyn, obj, dry_run=False)
    authz = client.AuthorizationV1Api(api)
    asked = [("", r) for r in CORE_RESOURCES] + OTHER_RESOURCES
    for role in SERVICES:
        granted = {(g, r, v) for g, r, v in ((t[1], t[2], t[3]) for t in ALLOWLIST if t[0] == role)}
        for group, resource in asked:
            for verb in VERBS:
                may = _may(authz, namespace, prefix + role, group, resource, verb)
                assert may == ((group, resource, verb) in granted), (
                    f"{source}: {prefix}{role} {'may' if may else 'may not'} {verb} {group or 'core'}/{resource}"
                )
    # Only the binder binds.
    assert [r for r in SERVICES if _may(authz, namespace, prefix + r, "", "pods/binding", "create")] == ["binder"]


@needs_helm
def test_the_combined_layout_passes_dry_run_and_its_account_may_do_the_scheduler_and_binder_rules(
    api: client.ApiClient, tmp_path: Path
) -> None:
    """layout: combined: the chart's objects pass the dry run, and the combined pods' account (the
    scheduler's) may do exactly what the scheduler's and the binder's may do together, nothing more."""
    assert _apply_all(api, helm_template(tmp_path, COMBINED_VALUES)) == []
    namespace = "phalanx-sar-combined"
    docs = [
        d for d in helm_template(tmp_path, COMBINED_VALUES, namespace=namespace) if d["kind"].startswith("ClusterRole")
    ]
    for d in docs:
        d["metadata"]["name"] = "sarc-" + d["metadata"]["name"]
        if d["kind"] == "ClusterRoleBinding":
            d["roleRef"]["name"] = "sarc-" + d["roleRef"]["name"]
    _ensure_namespace(api, namespace)
    dyn = dynamic.DynamicClient(api)
    for obj in docs:
        _apply(dyn, obj, dry_run=False)
    authz = client.AuthorizationV1Api(api)
    granted = {(t[1], t[2], t[3]) for t in ALLOWLIST if t[0] in ("scheduler", "binder")}
    for group, resource in [("", r) for r in CORE_RESOURCES] + OTHER_RESOURCES:
        for verb in VERBS:
            may = _may(authz, namespace, "phalanx-scheduler", group, resource, verb)
            assert may == ((group, resource, verb) in granted), (
                f"combined: phalanx-scheduler {'may' if may else 'may not'} {verb} {group or 'core'}/{resource}"
            )
    assert not _may(authz, namespace, "phalanx-binder", "", "pods/binding", "create")  # no such account's rights


# --- helm install / upgrade: generated secrets survive upgrades ------------------------------------------


def _helm(server: LocalApiServer, *args: str) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [find_helm() or "helm", *args, "--kubeconfig", str(server.kubeconfig_path)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, f"helm {' '.join(args)} failed:\n{out.stderr}"
    return out


def _secrets(api: client.ApiClient, namespace: str) -> dict[str, dict[str, bytes]]:
    items = client.CoreV1Api(api).list_namespaced_secret(namespace).items
    return {
        s.metadata.name: {k: base64.b64decode(v) for k, v in (s.data or {}).items()}
        for s in items
        if s.type in ("kubernetes.io/tls", "Opaque")
    }


@needs_helm
def test_helm_upgrade_keeps_generated_certificates_and_password(server: LocalApiServer, api: client.ApiClient) -> None:
    from cryptography import x509

    namespace, release = "phalanx-lookup", "lookup"
    fullname = f"{release}-phalanx"
    # crds.install=false: the dry-run tests above created the PodGroup CRDs outside of Helm. cert-manager is
    # "installed" here (its CRDs), so the chart's own certificates are chosen explicitly.
    args = [
        "upgrade",
        "--install",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--create-namespace",
        "--set",
        "crds.install=false",
        "--set",
        "tls.certManager.enabled=false",
    ]
    tls_names = [f"{fullname}-{s}-tls" for s in SERVICES]
    _helm(server, *args)
    first = _secrets(api, namespace)
    assert {f"{fullname}-ca", f"{fullname}-redis-auth", *tls_names} <= set(first)

    _helm(server, *args)
    assert _secrets(api, namespace) == first, "an upgrade changes no certificate and no password"

    client.CoreV1Api(api).delete_namespaced_secret(f"{fullname}-queue-tls", namespace)
    _helm(server, *args)
    second = _secrets(api, namespace)
    queue = second[f"{fullname}-queue-tls"]
    assert queue["tls.crt"] != first[f"{fullname}-queue-tls"]["tls.crt"], "a deleted certificate is reissued"
    assert queue["ca.crt"] == first[f"{fullname}-ca"]["tls.crt"], "by the same CA"
    x509.load_pem_x509_certificate(queue["tls.crt"]).verify_directly_issued_by(
        x509.load_pem_x509_certificate(first[f"{fullname}-ca"]["tls.crt"])
    )
    for name in set(first) - {f"{fullname}-queue-tls"}:
        assert second[name] == first[name], f"{name} changed"

    client.CoreV1Api(api).delete_namespaced_secret(f"{fullname}-ca", namespace)
    _helm(server, *args)
    third = _secrets(api, namespace)
    new_ca = third[f"{fullname}-ca"]["tls.crt"]
    assert new_ca != first[f"{fullname}-ca"]["tls.crt"]
    for name in tls_names:
        assert third[name]["ca.crt"] == new_ca and third[name]["tls.crt"] != second[name]["tls.crt"], (
            f"{name}: a new CA reissues every certificate"
        )
    assert third[f"{fullname}-redis-auth"] == first[f"{fullname}-redis-auth"], "the Redis password stays"


@needs_helm
def test_helm_detects_cert_manager_in_the_cluster(server: LocalApiServer) -> None:
    """The API server serves cert-manager.io/v1 (the CRDs above): a server-side dry-run install with the
    default values picks cert-manager on its own."""
    out = _helm(
        server,
        "install",
        "auto",
        str(CHART),
        "--namespace",
        "phalanx-auto",
        "--dry-run=server",
        "--set",
        "crds.install=false",
    )
    docs = [d for d in yaml.safe_load_all(out.stdout.split("NOTES:")[0].split("MANIFEST:", 1)[1]) if d]
    assert {"Certificate", "Issuer"} <= _kinds(docs)
    assert not [d for d in docs if d["kind"] == "Secret" and d.get("type") == "kubernetes.io/tls"]
    assert "issued by cert-manager" in out.stdout
