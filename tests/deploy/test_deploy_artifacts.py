"""Checks of the deployment artifacts: CRDs, plain manifests, the Helm chart, the compose files, the image.

Security (issue "Only the scheduler may bind"): mutual TLS certificates mounted as directory volumes, probes
on the plaintext health ports, listening on the pod IP, a password-protected Redis in protected mode,
NetworkPolicies evaluated for who may reach which port, and the chart-generated certificates checked with
a real mutual-TLS gRPC handshake. The exact RBAC allow-list is in test_rbac_allowlist.py.

What needs an external tool is skipped, with the reason, when the tool is missing:
  * helm: ${PHALANX_TOOLS_CACHE:-~/.cache/phalanx/tools}/helm-<HELM_VERSION>/helm (built by
    hack/build-helm.sh), else `helm` on PATH, else $PHALANX_HELM.
  * docker compose: the docker CLI's compose plugin, else a standalone Compose v2 `docker-compose`
    on PATH, else one built by hack/build-compose.sh, else $PHALANX_DOCKER_COMPOSE. Only `config` is
    run: no Docker engine is needed.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
CRD_DIR = DEPLOY / "crds"
MANIFESTS = DEPLOY / "manifests"
CHART = DEPLOY / "helm" / "phalanx"
HELM_VERSION = "v3.22.0"  # keep in step with hack/build-helm.sh

SERVICES = ("queue", "scheduler", "binder")
PORTS = {"queue": 50051, "scheduler": 50052, "binder": 50053}
HEALTH_PORTS = {"queue": 50061, "scheduler": 50062, "binder": 50063}
METRICS_PORTS = {"queue": 9091, "scheduler": 9092, "binder": 9093}  # plain HTTP /metrics, read-only
# The job controller (PhalanxJobs) serves no gRPC: its only port is /metrics; it talks to the API server only.
CONTROLLER = "controller"
CONTROLLER_METRICS_PORT = 9094
JOB_CRD = "phalanx.dev_phalanxjobs.yaml"
CLUSTER_SCOPED = ("Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "PriorityClass")
READ_VERBS = {"get", "list", "watch"}
TLS_DIR = "/etc/phalanx/tls"
CERT_MANAGER_API = "cert-manager.io/v1"

# The second values set: an external Redis over TLS with a password Secret, two binders, tracing on.
SECOND_VALUES = {
    "redis": {
        "enabled": False,
        "url": "rediss://redis.data.svc.cluster.local:6380/3",
        "auth": {"existingSecret": "redis-password", "existingSecretKey": "pw"},
        "tls": {"enabled": True, "caSecret": {"name": "redis-ca", "key": "ca.crt"}},
    },
    "binder": {"replicas": 2},
    "otel": {"enabled": True, "endpoint": "http://otel-collector.observability.svc:4317"},
}
# The third: certificates from cert-manager (forced on, as if the cluster served cert-manager.io/v1), an
# operator certificate, the bundled Redis over TLS, no NetworkPolicies.
CERT_MANAGER_VALUES = {
    "tls": {"certManager": {"enabled": True}, "operator": {"enabled": True}},
    "redis": {"tls": {"enabled": True}},
    "networkPolicy": {"enabled": False},
}
VALUE_SETS = {
    "default": None,
    "external-redis-2-binders-otel": SECOND_VALUES,
    "cert-manager-redis-tls": CERT_MANAGER_VALUES,
}


# --- tools --------------------------------------------------------------------------------------------


def _run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)


@lru_cache(maxsize=None)
def find_helm() -> str | None:
    cache = Path(os.environ.get("PHALANX_TOOLS_CACHE") or Path.home() / ".cache" / "phalanx" / "tools")
    candidates = [os.environ.get("PHALANX_HELM", ""), str(cache / f"helm-{HELM_VERSION}" / "helm")]
    candidates += [str(p) for p in sorted(cache.glob("helm-v3.*/helm"), reverse=True)]
    candidates.append(shutil.which("helm") or "")
    for c in candidates:
        if c and os.access(c, os.X_OK):
            try:
                out = _run([c, "version", "--short"])
            except (OSError, subprocess.TimeoutExpired):
                continue
            if out.returncode == 0 and out.stdout.startswith("v3."):
                return c
    return None


HELM_MISSING = (
    f"no helm v3 binary: run hack/build-helm.sh (builds {HELM_VERSION} into "
    "${PHALANX_TOOLS_CACHE:-~/.cache/phalanx/tools}), or put helm on PATH"
)


@lru_cache(maxsize=None)
def find_compose() -> tuple[list[str] | None, str]:
    """The compose command and, when there is none, why."""
    tried = []
    explicit = os.environ.get("PHALANX_DOCKER_COMPOSE")
    if explicit:
        tried.append([explicit])
    docker = shutil.which("docker")
    if docker:
        tried.append([docker, "compose"])
    standalone = shutil.which("docker-compose")
    if standalone:
        tried.append([standalone])
    # Built from its Go module by hack/build-compose.sh (make tools).
    cache = Path(os.environ.get("PHALANX_TOOLS_CACHE") or Path.home() / ".cache" / "phalanx" / "tools")
    for built in sorted(cache.glob("compose-v2.*/docker-compose"), reverse=True):
        tried.append([str(built)])
        standalone = standalone or str(built)
    for cmd in tried:
        try:
            out = _run([*cmd, "version", "--short"])
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and re.match(r"v?[2-9]\.", out.stdout.strip()):
            return cmd, ""
    if not docker and not standalone and not explicit:
        return None, "the docker CLI is not installed"
    return None, (
        "no Docker Compose v2: the docker CLI has no compose plugin (`docker compose`) and no "
        "standalone docker-compose v2 is on PATH (or in $PHALANX_DOCKER_COMPOSE)"
    )


# --- YAML helpers -------------------------------------------------------------------------------------


def load_docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def load_dir(d: Path) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for p in sorted(d.glob("*.yaml")):
        docs += load_docs(p.read_text())
    return docs


def of_kind(docs: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d.get("kind") == kind]


def component(obj: dict[str, Any]) -> str:
    return obj["metadata"].get("labels", {}).get("app.kubernetes.io/component", "")


# --- helm ---------------------------------------------------------------------------------------------


def helm_values_args(values: dict[str, Any] | None, tmp: Path) -> list[str]:
    if values is None:
        return []
    f = tmp / "values.yaml"
    f.write_text(yaml.safe_dump(values))
    return ["-f", str(f)]


def helm_template(
    tmp: Path, values: dict[str, Any] | None = None, *extra: str, namespace: str = "phalanx-system"
) -> list[dict[str, Any]]:
    helm = find_helm()
    assert helm
    out = _run(
        [helm, "template", "phalanx", str(CHART), "--namespace", namespace, *helm_values_args(values, tmp), *extra]
    )
    assert out.returncode == 0, f"helm template failed:\n{out.stderr}"
    return load_docs(out.stdout)


needs_helm = pytest.mark.skipif(find_helm() is None, reason=HELM_MISSING)


@pytest.fixture(scope="module", params=list(VALUE_SETS), ids=list(VALUE_SETS))
def rendered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    if find_helm() is None:
        pytest.skip(HELM_MISSING)
    return helm_template(tmp_path_factory.mktemp("helm"), VALUE_SETS[request.param])


# --- every YAML file parses ---------------------------------------------------------------------------


def yaml_files() -> list[Path]:
    files = [p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml")]
    # Helm templates are Go templates, not YAML: they are checked by rendering them (helm template/lint).
    files = [p for p in files if (CHART / "templates") not in p.parents]
    return sorted(files + [REPO / "docker-compose.yml", REPO / "docker-compose.observability.yml"])


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_yaml_parses(path: Path) -> None:
    docs = list(yaml.safe_load_all(path.read_text()))
    assert any(d is not None for d in docs), f"{path} has no YAML document"
    for d in docs:
        assert d is None or isinstance(d, dict), f"{path}: a document is not a mapping"


def test_values_schema_is_json() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["type"] == "object"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    # Every top-level value is described (the schema forbids unknown ones).
    assert set(values) <= set(schema["properties"])
    for svc in SERVICES:
        block = values[svc]
        for key in ("image", "replicas", "resources", "env", "nodeSelector", "tolerations", "affinity"):
            assert key in block, f"values.yaml: {svc}.{key} is missing"


# --- CRDs ---------------------------------------------------------------------------------------------

CRDS = {
    "scheduling.x-k8s.io": "v1alpha1",
    "scheduling.sigs.k8s.io": "v1alpha1",
    "scheduling.volcano.sh": "v1beta1",
}
COSCHED_SPEC = {"minMember", "minResources", "scheduleTimeoutSeconds"}
COSCHED_STATUS = {"phase", "occupiedBy", "scheduled", "running", "succeeded", "failed", "scheduleStartTime"}
FIELDS = {
    "scheduling.x-k8s.io": (COSCHED_SPEC, COSCHED_STATUS),
    "scheduling.sigs.k8s.io": (COSCHED_SPEC, COSCHED_STATUS),
    "scheduling.volcano.sh": (
        {"minMember", "minResources", "minTaskMember", "queue", "priorityClassName"},
        {"phase", "conditions", "running", "succeeded", "failed"},
    ),
}
VOLCANO_CONDITION = {"type", "status", "reason", "message", "lastTransitionTime", "transitionID"}


def crd_file(group: str) -> Path:
    return CRD_DIR / f"{group}_podgroups.yaml"


def assert_structural(node: dict[str, Any], path: str = "") -> None:
    """The rules of a structural schema that matter here: every node has a type (or is int-or-string /
    preserve-unknown), properties and additionalProperties are never both set, metadata is not restricted."""
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    if int_or_string:
        assert "type" not in node, f"{path}: int-or-string must not set type"
        allowed = [{"type": "integer"}, {"type": "string"}]
        assert node.get("anyOf", allowed) == allowed, f"{path}: int-or-string anyOf must be integer|string"
    else:
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields") is True, f"{path}: no type"
    assert not ("properties" in node and "additionalProperties" in node), f"{path}: properties + additionalProperties"
    for key in ("oneOf", "allOf", "not"):
        assert key not in node, f"{path}: {key} is not used in these CRDs"
    for name, child in node.get("properties", {}).items():
        if path == "" and name == "metadata":
            assert child == {"type": "object"}, "metadata must be a bare object"
            continue
        assert_structural(child, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        assert_structural(node["additionalProperties"], f"{path}[*]")
    if "items" in node:
        assert_structural(node["items"], f"{path}[]")


@pytest.mark.parametrize("group", list(CRDS))
def test_crd_is_sane(group: str) -> None:
    docs = load_docs(crd_file(group).read_text())
    assert len(docs) == 1
    crd = docs[0]
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == f"podgroups.{group}"
    spec = crd["spec"]
    assert spec["group"] == group and spec["scope"] == "Namespaced"
    names = spec["names"]
    assert (names["kind"], names["plural"], names["singular"], names["listKind"]) == (
        "PodGroup",
        "podgroups",
        "podgroup",
        "PodGroupList",
    )
    assert names.get("shortNames"), "shortNames are set"
    assert [v["name"] for v in spec["versions"]] == [CRDS[group]]
    version = spec["versions"][0]
    assert version["served"] is True and version["storage"] is True
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert "Age" in columns and any(c["jsonPath"] == ".status.phase" for c in columns.values())
    assert any(c["jsonPath"] == ".spec.minMember" for c in columns.values())

    schema = version["schema"]["openAPIV3Schema"]
    assert_structural(schema)
    props = schema["properties"]
    want_spec, want_status = FIELDS[group]
    assert want_spec <= set(props["spec"]["properties"]), f"spec lacks {want_spec - set(props['spec']['properties'])}"
    assert want_status <= set(props["status"]["properties"])

    quantity = props["spec"]["properties"]["minResources"]
    assert quantity["type"] == "object"
    assert quantity["additionalProperties"]["x-kubernetes-int-or-string"] is True
    assert props["spec"]["properties"]["minMember"]["type"] == "integer"
    if group == "scheduling.volcano.sh":
        conditions = props["status"]["properties"]["conditions"]
        assert conditions["type"] == "array"
        assert VOLCANO_CONDITION <= set(conditions["items"]["properties"])
        assert props["spec"]["properties"]["minTaskMember"]["additionalProperties"]["type"] == "integer"
    else:
        assert props["spec"]["properties"]["scheduleTimeoutSeconds"]["type"] == "integer"
        assert props["status"]["properties"]["scheduleStartTime"]["format"] == "date-time"
    # Helm keeps CRDs (and every PodGroup) on uninstall.
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    # The API server rejects a CRD of a protected group (*.k8s.io, *.kubernetes.io; x-k8s.io is free)
    # without the approval annotation.
    if re.search(r"(^|\.)(k8s|kubernetes)\.io$", group) and not group.endswith("x-k8s.io"):
        assert crd["metadata"]["annotations"].get("api-approved.kubernetes.io"), f"{group} is a protected group"


def test_chart_crd_copies_match_deploy_crds() -> None:
    ours = sorted(p.name for p in CRD_DIR.glob("*.yaml"))
    copies = sorted(p.name for p in (CHART / "files" / "crds").glob("*.yaml"))
    assert ours == copies == sorted([*(f"{g}_podgroups.yaml" for g in CRDS), JOB_CRD])
    for name in ours:
        assert (CRD_DIR / name).read_bytes() == (CHART / "files" / "crds" / name).read_bytes(), (
            f"deploy/helm/phalanx/files/crds/{name} differs from deploy/crds/{name}: "
            "cp deploy/crds/*.yaml deploy/helm/phalanx/files/crds/"
        )


def test_phalanxjob_crd_carries_the_seeds_defaults_minimums_and_enums() -> None:
    [crd] = load_docs((CRD_DIR / JOB_CRD).read_text())
    assert crd["metadata"]["name"] == "phalanxjobs.phalanx.dev"
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    [version] = crd["spec"]["versions"]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    schema = version["schema"]["openAPIV3Schema"]
    assert_structural(schema)
    spec = schema["properties"]["spec"]
    assert set(spec["required"]) == {"leader", "workerSets"}
    props = spec["properties"]
    assert (props["restartLimit"]["default"], props["minWorkersNum"]["default"], props["terminating"]["default"]) == (
        3,
        1,
        False,
    )
    assert (props["priority"]["default"], props["priority"]["minimum"], props["priority"]["maximum"]) == (5, 1, 10)
    assert props["cleanPodPolicy"]["default"] == "All" and props["cleanPodPolicy"]["enum"] == ["Running", "All", "None"]
    counts = props["workerSets"]["items"]["properties"]["counts"]
    assert (counts["default"], counts["minimum"]) == (1, 1)
    policy = props["schedulerPolicy"]["properties"]
    assert policy["jobQueuePolicy"]["enum"] == ["Priority", "DRF"]
    assert set(policy["basicPolicy"]["enum"]) == {
        "Gang", "BinPack", "LeaderFirst", "MinFragment", "JobAffinity", "JobAntiAffinity"
    }  # fmt: skip
    status = schema["properties"]["status"]["properties"]
    assert status["stage"]["enum"] == ["Pending", "Starting", "Running", "Rescheduling", "Succeeded", "Failed"]
    assert set(status["scheduleState"]["enum"]) == {
        "Unscheduled", "ScheduledSucceed", "ScheduledFailed", "ScheduledPartly"
    }  # fmt: skip


# --- RBAC: structure (the exact rights: test_rbac_allowlist.py) ------------------------------------------


def check_rbac(docs: list[dict[str, Any]]) -> None:
    roles = {component(r): r for r in of_kind(docs, "ClusterRole")}
    # The queue never talks to the API server: no role, no binding, no token.
    assert set(roles) == {"scheduler", "binder", CONTROLLER}, (
        f"ClusterRoles of the scheduler, the binder and the job controller only, got {sorted(roles)}"
    )
    check_lease_role(docs)
    accounts = {}
    for b in of_kind(docs, "ClusterRoleBinding"):
        svc = component(b)
        assert b["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": roles[svc]["metadata"]["name"],
        }
        [subject] = b["subjects"]
        assert subject["kind"] == "ServiceAccount"
        accounts[svc] = (subject["namespace"], subject["name"])
    assert set(accounts) == {"scheduler", "binder", CONTROLLER}
    deployments = {component(d): d for d in of_kind(docs, "Deployment")}
    for svc, account in accounts.items():
        d = deployments[svc]
        assert (d["metadata"]["namespace"], d["spec"]["template"]["spec"]["serviceAccountName"]) == account
    queue_pod = deployments["queue"]["spec"]["template"]["spec"]
    assert queue_pod["serviceAccountName"] not in {name for _, name in accounts.values()}
    assert queue_pod["automountServiceAccountToken"] is False
    sas = {sa["metadata"]["name"]: sa for sa in of_kind(docs, "ServiceAccount")}
    if queue_pod["serviceAccountName"] in sas:
        assert sas[queue_pod["serviceAccountName"]].get("automountServiceAccountToken") is False
    assert len(set(accounts.values())) == 3, "each service has its own ServiceAccount"


def scheduler_env(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    [d] = [d for d in of_kind(docs, "Deployment") if component(d) == "scheduler"]
    return env_of(d["spec"]["template"]["spec"]["containers"][0])


def check_lease_role(docs: list[dict[str, Any]]) -> None:
    """The only namespaced RBAC: the scheduler's leader-election Role (with leader election on), in the
    scheduler's namespace, bound to its ServiceAccount, for the Lease the scheduler is configured with."""
    roles, bindings = of_kind(docs, "Role"), of_kind(docs, "RoleBinding")
    env = scheduler_env(docs)
    if env.get("PHALANX_LEADER_ELECT", {}).get("value") != "true":
        assert not roles and not bindings, "no leader election, no Role"
        return
    [role], [binding] = roles, bindings
    [d] = [d for d in of_kind(docs, "Deployment") if component(d) == "scheduler"]
    namespace = d["metadata"]["namespace"]
    assert component(role) == component(binding) == "scheduler"
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == namespace
    assert env["PHALANX_LEADER_ELECT_NAMESPACE"]["value"] == namespace
    lease = env["PHALANX_LEADER_ELECT_LEASE_NAME"]["value"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    [subject] = binding["subjects"]
    assert subject == {
        "kind": "ServiceAccount",
        "name": d["spec"]["template"]["spec"]["serviceAccountName"],
        "namespace": namespace,
    }
    by_name = {tuple(r.get("resourceNames", [])): r for r in role["rules"]}
    assert set(by_name) == {(), (lease,)}, role["rules"]
    assert by_name[()] == {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]}
    assert sorted(by_name[(lease,)]["verbs"]) == ["get", "update"]
    assert by_name[(lease,)]["resources"] == ["leases"]


# --- workloads: probes, hardening ---------------------------------------------------------------------


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def secret_volume_at(
    pod: dict[str, Any], container: dict[str, Any], path: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The volume mounted at the directory `path` and its mount; it must be a Secret's, read-only."""
    [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == path]
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert "secret" in volume, f"{path} is not a Secret volume: {volume}"
    assert mount.get("readOnly") is True, f"{path} is not read-only"
    return volume, mount


def check_workloads(docs: list[dict[str, Any]], namespace: str = "phalanx-system") -> None:
    deployments = {component(d): d for d in of_kind(docs, "Deployment")}
    assert set(SERVICES) <= set(deployments)
    services = {component(s): s for s in of_kind(docs, "Service")}
    for name, d in deployments.items():
        assert d["metadata"]["namespace"] == namespace
        pod = d["spec"]["template"]["spec"]
        selector = d["spec"]["selector"]["matchLabels"]
        assert selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        psc = pod["securityContext"]
        assert psc["runAsNonRoot"] is True and psc["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod.get("enableServiceLinks") is False, f"{name}: service links would inject *_PORT variables"
        # API tokens only where the API server is used: the scheduler, the binder and the job controller.
        assert pod.get("automountServiceAccountToken") is (name in ("scheduler", "binder", CONTROLLER)), name
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, name
            assert sc["readOnlyRootFilesystem"] is True, name
            assert sc["runAsNonRoot"] is True, name
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, name
            assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"], name
            assert c["resources"]["requests"] and c["resources"]["limits"]["memory"], name
            # subPath mounts never see a renewed Secret or ConfigMap.
            assert not any("subPath" in m or "subPathExpr" in m for m in c.get("volumeMounts", [])), name
        if name == "redis":
            check_redis_container(pod)
        if name == CONTROLLER:
            check_controller(d, services.get(name))
        if name not in SERVICES:
            continue
        assert psc["runAsUser"] == 65532
        [c] = pod["containers"]
        port, health, metrics = PORTS[name], HEALTH_PORTS[name], METRICS_PORTS[name]
        assert c["command"] == [f"phalanx-{name}"]
        assert {"name": "grpc", "containerPort": port, "protocol": "TCP"} in c["ports"]
        assert {"name": "health", "containerPort": health, "protocol": "TCP"} in c["ports"]
        assert {"name": "metrics", "containerPort": metrics, "protocol": "TCP"} in c["ports"]
        # Native gRPC probes, on the plaintext health port (the kubelet cannot do TLS), on the health
        # service names that separate "restart me" from "route no work to me".
        for probe, service in (
            ("readinessProbe", "readiness"),
            ("livenessProbe", "liveness"),
            ("startupProbe", "liveness"),
        ):
            assert c[probe]["grpc"] == {"port": health, "service": service}, f"{name}: {probe}"
        env = env_of(c)
        # Listening on the pod IP (downward API), TLS on the gRPC port, never --plaintext.
        assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        names = list(env)
        assert names.index("POD_IP") < names.index("PHALANX_LISTEN"), "$(POD_IP) expands only from earlier variables"
        assert env["PHALANX_LISTEN"]["value"] == f"$(POD_IP):{port}"
        assert env["PHALANX_HEALTH_LISTEN"]["value"] == f"$(POD_IP):{health}"
        assert env["PHALANX_METRICS_LISTEN"]["value"] == f"$(POD_IP):{metrics}"
        assert env["PHALANX_TLS_DIR"]["value"] == TLS_DIR
        assert "PHALANX_PLAINTEXT" not in env
        volume, _ = secret_volume_at(pod, c, TLS_DIR)
        assert "items" not in volume["secret"], "the whole Secret: ca.crt, tls.crt and tls.key"
        assert env["PHALANX_SCHEDULER_NAME"]["value"] == "phalanx"
        assert env["OTEL_SERVICE_NAME"]["value"] == f"phalanx-{name}"
        if name in ("scheduler", "binder"):
            assert "PHALANX_REDIS_URL" in env and "PHALANX_REDIS_PREFIX" in env
            assert "PHALANX_REDIS_PASSWORD" not in env, "the password comes from a file only"
            if "PHALANX_REDIS_PASSWORD_FILE" in env:
                directory, file = env["PHALANX_REDIS_PASSWORD_FILE"]["value"].rsplit("/", 1)
                volume, _ = secret_volume_at(pod, c, directory)
                assert [i["path"] for i in volume["secret"].get("items", [{"path": file}])] == [file]
        else:
            assert not any(k.startswith("PHALANX_REDIS") for k in env), "the queue does not use Redis"
        if name == "binder":
            assert env["PHALANX_BACKEND"]["value"] == "kubernetes"
        if name == "queue":
            assert d["spec"]["replicas"] <= 1 and d["spec"]["strategy"]["type"] == "Recreate"
        if name == "scheduler" and env.get("PHALANX_LEADER_ELECT", {}).get("value") == "true":
            # Several replicas may run: one leads; a rollout starts the new pod as a standby first.
            assert d["spec"]["strategy"]["type"] == "RollingUpdate"
            assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
            assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
            timing = [
                float(env[f"PHALANX_LEADER_ELECT_{k}"]["value"])
                for k in ("LEASE_DURATION", "RENEW_DEADLINE", "RETRY_PERIOD")
            ]
            assert timing[0] > timing[1] > 1.2 * timing[2], timing
        elif name == "scheduler":
            assert d["spec"]["replicas"] <= 1 and d["spec"]["strategy"]["type"] == "Recreate"
        if name == "scheduler":
            assert env["PHALANX_QUEUE_ADDR"]["value"].endswith(":50051")
            assert env["PHALANX_BINDER_ADDR"]["value"].endswith(":50053")
            profile = env["PHALANX_PROFILE"]["value"]
            mount = next(m for m in c["volumeMounts"] if profile.startswith(m["mountPath"] + "/"))
            assert not TLS_DIR.startswith(mount["mountPath"] + "/"), "TLS must not nest in the profile volume"
            volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
            cms = {m["metadata"]["name"]: m for m in of_kind(docs, "ConfigMap")}
            data = cms[volume["configMap"]["name"]]["data"][profile.rsplit("/", 1)[1]]
            assert set(yaml.safe_load(data)) <= {"filters", "scores", "percentageOfNodesToScore", "basicPolicy"}
        svc = services[name]
        assert svc["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
        # The health port is for the kubelet only: not in the Service. The metrics port is, for Prometheus.
        assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(port, "grpc"), (metrics, "metrics")]


def check_controller(d: dict[str, Any], svc: dict[str, Any] | None) -> None:
    """The job controller: one replica replaced with Recreate, no gRPC, no Redis, /metrics as its probe."""
    pod = d["spec"]["template"]["spec"]
    assert d["spec"]["replicas"] == 1 and d["spec"]["strategy"]["type"] == "Recreate"
    assert pod["securityContext"]["runAsUser"] == 65532
    [c] = pod["containers"]
    assert c["command"] == ["phalanx-controller"]
    env = env_of(c)
    assert not any(k.startswith("PHALANX_REDIS") or k in ("PHALANX_LISTEN", "PHALANX_TLS_DIR") for k in env)
    assert env["PHALANX_SCHEDULER_NAME"]["value"] == "phalanx"
    assert env["OTEL_SERVICE_NAME"]["value"] == "phalanx-controller"
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    if env["PHALANX_METRICS_LISTEN"]["value"] == "off":
        assert not ports and "livenessProbe" not in c
        return
    assert names_before(env, "POD_IP", "PHALANX_METRICS_LISTEN")
    assert env["PHALANX_METRICS_LISTEN"]["value"] == f"$(POD_IP):{CONTROLLER_METRICS_PORT}"
    assert ports == {"metrics": CONTROLLER_METRICS_PORT}
    assert c["livenessProbe"]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    assert svc is not None and [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [
        (CONTROLLER_METRICS_PORT, "metrics")
    ]


def names_before(env: dict[str, dict[str, Any]], first: str, then: str) -> bool:
    names = list(env)
    return names.index(first) < names.index(then)


def check_redis_container(pod: dict[str, Any]) -> None:
    """The bundled Redis: requirepass from the mounted Secret through a config file, protected mode on, the
    password on no command line, probes that authenticate."""
    [c] = pod["containers"]
    script = " ".join(c.get("command", []) + c.get("args", []))
    assert "protected-mode yes" in script and "protected-mode no" not in script
    assert "requirepass" in script and "--requirepass" not in script
    assert "exec redis-server /tmp/redis.conf" in script
    volume, _ = secret_volume_at(pod, c, "/etc/redis/auth")
    assert [i["path"] for i in volume["secret"]["items"]] == ["password"]
    for probe in ("readinessProbe", "livenessProbe"):
        command = " ".join(c[probe]["exec"]["command"])
        assert 'REDISCLI_AUTH="$(cat /etc/redis/auth/password)"' in command, probe
        assert " -a " not in command, f"{probe}: a password argument shows in ps"


def redis_script_and_probes(docs: list[dict[str, Any]]) -> tuple[str, list[str]]:
    [d] = [d for d in of_kind(docs, "Deployment") if component(d) == "redis"]
    [c] = d["spec"]["template"]["spec"]["containers"]
    assert c["command"][:2] == ["sh", "-c"]
    return c["command"][2], [c[p]["exec"]["command"][2] for p in ("readinessProbe", "livenessProbe")]


# --- NetworkPolicy: who may reach which port ----------------------------------------------------------

ANYWHERE = "*"


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, f"only matchLabels selectors are evaluated here: {selector}"
    return selector.get("matchLabels", {}).items() <= labels.items()


def reachability(docs: list[dict[str, Any]], redis_port: int = 6379) -> dict[tuple[str, int], set[str]]:
    """For every (component, port) the NetworkPolicies admit traffic to: the components (or ANYWHERE)
    admitted. Evaluated from the policies' selectors against the Deployments' pod labels."""
    pods = {component(d): d["spec"]["template"]["metadata"]["labels"] for d in of_kind(docs, "Deployment")}
    policies = of_kind(docs, "NetworkPolicy")
    ports = {(svc, p[svc]) for svc in SERVICES for p in (PORTS, HEALTH_PORTS, METRICS_PORTS)}
    if CONTROLLER in pods:
        ports.add((CONTROLLER, CONTROLLER_METRICS_PORT))
    if "redis" in pods:
        ports.add(("redis", redis_port))
    out: dict[tuple[str, int], set[str]] = {}
    for target, port in ports:
        applying = [p for p in policies if _selects(p["spec"]["podSelector"], pods[target])]
        assert applying and all(p["spec"]["policyTypes"] == ["Ingress"] for p in applying), (
            f"{target}: not isolated for ingress"
        )
        allowed: set[str] = set()
        for policy in applying:
            for rule in policy["spec"].get("ingress", []):
                rule_ports = rule.get("ports")
                if rule_ports is not None and not any(
                    rp["port"] == port and rp.get("protocol", "TCP") == "TCP" for rp in rule_ports
                ):
                    continue
                if "from" not in rule:
                    allowed.add(ANYWHERE)
                    continue
                for peer in rule["from"]:
                    if set(peer) == {"namespaceSelector"}:  # another namespace's pods (metrics.from): by name
                        allowed.add(
                            f"namespace {peer['namespaceSelector']['matchLabels']['kubernetes.io/metadata.name']}"
                        )
                        continue
                    assert set(peer) == {"podSelector"}, f"only same-namespace pod peers expected: {peer}"
                    allowed |= {src for src, labels in pods.items() if _selects(peer["podSelector"], labels)}
        out[(target, port)] = allowed
    return out


EXPECTED_REACHABILITY = {
    ("queue", 50051): {"scheduler"},
    ("queue", 50061): {ANYWHERE},
    ("scheduler", 50052): set(),
    ("scheduler", 50062): {ANYWHERE},
    ("binder", 50053): {"scheduler"},
    ("binder", 50063): {ANYWHERE},
    # /metrics (read-only numbers): Prometheus, wherever it runs.
    ("queue", 9091): {ANYWHERE},
    ("scheduler", 9092): {ANYWHERE},
    ("binder", 9093): {ANYWHERE},
}


def check_network_policies(docs: list[dict[str, Any]], metrics_from: set[str] | None = None) -> None:
    """`metrics_from`: who may scrape the metrics ports (default: anywhere)."""
    got = reachability(docs)
    want = dict(EXPECTED_REACHABILITY)
    for svc in SERVICES:
        want[(svc, METRICS_PORTS[svc])] = metrics_from if metrics_from is not None else {ANYWHERE}
    if any(component(d) == CONTROLLER for d in of_kind(docs, "Deployment")):
        want[(CONTROLLER, CONTROLLER_METRICS_PORT)] = metrics_from if metrics_from is not None else {ANYWHERE}
    if any(component(d) == "redis" for d in of_kind(docs, "Deployment")):
        want[("redis", 6379)] = {"scheduler", "binder"}
    assert got == want


# --- certificates -------------------------------------------------------------------------------------


def tls_secret_names(docs: list[dict[str, Any]]) -> dict[str, str]:
    """service -> the Secret mounted at /etc/phalanx/tls."""
    out = {}
    for d in of_kind(docs, "Deployment"):
        svc = component(d)
        if svc in SERVICES:
            pod = d["spec"]["template"]["spec"]
            volume, _ = secret_volume_at(pod, pod["containers"][0], TLS_DIR)
            out[svc] = volume["secret"]["secretName"]
    return out


def generated_key_pairs(docs: list[dict[str, Any]]) -> dict[str, dict[str, bytes]]:
    """identity -> the ca.crt/tls.crt/tls.key of its chart-generated Secret."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    out = {}
    for s in of_kind(docs, "Secret"):
        if s.get("type") != "kubernetes.io/tls":
            continue
        data = {k: base64.b64decode(v) for k, v in s["data"].items()}
        cert = x509.load_pem_x509_certificate(data["tls.crt"])
        [cn] = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        out[str(cn.value)] = data
    return out


def check_generated_certificates(docs: list[dict[str, Any]], identities: set[str]) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    pairs = generated_key_pairs(docs)
    ca_pem = {d["ca.crt"] for d in pairs.values()}
    assert len(ca_pem) == 1, "one CA per installation"
    ca = x509.load_pem_x509_certificate(ca_pem.pop())
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    [ca_cn] = ca.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    assert set(pairs) == identities | {ca_cn.value}
    secrets = {s["metadata"]["name"]: s for s in of_kind(docs, "Secret")}
    for svc, name in tls_secret_names(docs).items():
        assert secrets[name]["type"] == "kubernetes.io/tls"
        assert {"ca.crt", "tls.crt", "tls.key"} <= set(secrets[name]["data"])
        assert base64.b64decode(secrets[name]["data"]["tls.crt"]) == pairs[f"phalanx-{svc}"]["tls.crt"]
    for identity in identities:
        cert = x509.load_pem_x509_certificate(pairs[identity]["tls.crt"])
        cert.verify_directly_issued_by(ca)
        dns = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
            x509.DNSName
        )
        assert dns[0] == identity, f"{identity}: clients check the identity as the server's name"
        assert len(dns) == len(set(dns))
        eku = set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
        assert {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH} <= eku
        assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
        key = cert.public_key()
        assert isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name == "secp256r1"
        assert cert.not_valid_after_utc - cert.not_valid_before_utc > dt.timedelta(days=300)


def check_cert_manager_objects(docs: list[dict[str, Any]], identities: set[str]) -> None:
    assert not [s for s in of_kind(docs, "Secret") if s.get("type") == "kubernetes.io/tls"], (
        "cert-manager writes the certificates' Secrets"
    )
    certs = {c["metadata"]["name"]: c for c in of_kind(docs, "Certificate")}
    issuers = {i["metadata"]["name"]: i for i in of_kind(docs, "Issuer")}
    for d in of_kind(docs, "Certificate") + of_kind(docs, "Issuer"):
        assert d["apiVersion"] == CERT_MANAGER_API
    [ca_cert] = [c for c in certs.values() if c["spec"].get("isCA")]
    assert ca_cert["spec"]["privateKey"]["rotationPolicy"] == "Never", "a renewed CA keeps its key"
    assert "selfSigned" in issuers[ca_cert["spec"]["issuerRef"]["name"]]["spec"]
    [ca_issuer] = [i for i in issuers.values() if "ca" in i["spec"]]
    assert ca_issuer["spec"]["ca"]["secretName"] == ca_cert["spec"]["secretName"]
    leaves = {c["spec"]["commonName"]: c for c in certs.values() if not c["spec"].get("isCA")}
    assert set(leaves) == identities
    for identity, c in leaves.items():
        spec = c["spec"]
        assert spec["dnsNames"][0] == identity
        assert {"server auth", "client auth"} <= set(spec["usages"])
        assert spec["privateKey"]["algorithm"] == "ECDSA" and spec["privateKey"]["size"] == 256
        assert spec["duration"] and spec["renewBefore"], "cert-manager renews before expiry"
        assert spec["issuerRef"] == {
            "name": ca_issuer["metadata"]["name"],
            "kind": "Issuer",
            "group": "cert-manager.io",
        }
    mounted = tls_secret_names(docs)
    assert {svc: leaves[f"phalanx-{svc}"]["spec"]["secretName"] for svc in SERVICES} == mounted


# --- plain manifests ----------------------------------------------------------------------------------

MANIFEST_TLS_SECRETS = {svc: f"phalanx-{svc}-tls" for svc in SERVICES}


def test_manifests_rbac_least_privilege() -> None:
    check_rbac(load_dir(MANIFESTS))


def test_manifests_workloads() -> None:
    docs = load_dir(MANIFESTS)
    check_workloads(docs)
    [ns] = of_kind(docs, "Namespace")
    assert ns["metadata"]["name"] == "phalanx-system"
    assert sorted(p.name for p in MANIFESTS.glob("*.yaml"))[0].startswith("00-"), "namespace applies first"
    for d in docs:
        if d["kind"] not in CLUSTER_SCOPED:
            assert d["metadata"]["namespace"] == "phalanx-system", f"{d['kind']} {d['metadata']['name']}"
    assert scheduler_env(docs)["PHALANX_LEADER_ELECT_LEASE_NAME"]["value"] == "phalanx-scheduler"
    env = {
        e["name"]: e.get("value")
        for e in next(d for d in of_kind(docs, "Deployment") if component(d) == "binder")["spec"]["template"]["spec"][
            "containers"
        ][0]["env"]
    }
    redis_svc = next(s for s in of_kind(docs, "Service") if component(s) == "redis")
    assert env["PHALANX_REDIS_URL"] == f"redis://{redis_svc['metadata']['name']}:6379/0"
    # The Secrets are made by the operator (keys do not belong in the repository): none is here.
    assert not of_kind(docs, "Secret")
    assert tls_secret_names(docs) == MANIFEST_TLS_SECRETS


def test_manifests_network_policies() -> None:
    check_network_policies(load_dir(MANIFESTS))


def test_manifests_cert_manager_certificates() -> None:
    """The optional cert-manager file issues exactly the Secrets the Deployments mount."""
    docs = load_docs((MANIFESTS / "cert-manager" / "certificates.yaml").read_text())
    for d in docs:
        assert d["metadata"]["namespace"] == "phalanx-system"
    check_cert_manager_objects(docs + load_dir(MANIFESTS), {f"phalanx-{svc}" for svc in SERVICES})


# --- Helm chart ---------------------------------------------------------------------------------------


@needs_helm
@pytest.mark.parametrize("values", list(VALUE_SETS))
def test_helm_lint_strict(values: str, tmp_path: Path) -> None:
    out = _run([find_helm() or "helm", "lint", "--strict", str(CHART), *helm_values_args(VALUE_SETS[values], tmp_path)])
    assert out.returncode == 0, f"helm lint --strict failed:\n{out.stdout}\n{out.stderr}"
    assert "0 chart(s) failed" in out.stdout


def test_helm_rbac_least_privilege(rendered: list[dict[str, Any]]) -> None:
    check_rbac(rendered)


def test_helm_workloads(rendered: list[dict[str, Any]]) -> None:
    check_workloads(rendered)
    for d in rendered:
        if d["kind"] not in CLUSTER_SCOPED:
            assert d["metadata"]["namespace"] == "phalanx-system", f"{d['kind']} {d['metadata']['name']}"
        assert d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "phalanx"


def test_helm_crds_rendered_from_copies(rendered: list[dict[str, Any]]) -> None:
    crds = {c["metadata"]["name"]: c for c in of_kind(rendered, "CustomResourceDefinition")}
    assert set(crds) == {f"podgroups.{g}" for g in CRDS} | {"phalanxjobs.phalanx.dev"}
    for g in CRDS:
        assert crds[f"podgroups.{g}"] == load_docs(crd_file(g).read_text())[0]
    assert crds["phalanxjobs.phalanx.dev"] == load_docs((CRD_DIR / JOB_CRD).read_text())[0]


@needs_helm
def test_helm_default_values(tmp_path: Path) -> None:
    docs = helm_template(tmp_path)
    deployments = {component(d): d for d in of_kind(docs, "Deployment")}
    assert set(deployments) == {*SERVICES, CONTROLLER, "redis"}
    redis_svc = next(s for s in of_kind(docs, "Service") if component(s) == "redis")
    [auth] = [s for s in of_kind(docs, "Secret") if s.get("type") == "Opaque"]
    password = base64.b64decode(auth["data"]["password"]).decode()
    assert re.fullmatch(r"[A-Za-z0-9]{32}", password), "a generated random password"
    for svc in ("scheduler", "binder"):
        pod = deployments[svc]["spec"]["template"]["spec"]
        env = env_of(pod["containers"][0])
        assert env["PHALANX_REDIS_URL"]["value"] == f"redis://{redis_svc['metadata']['name']}.phalanx-system.svc:6379/0"
        assert "PHALANX_REDIS_CA_FILE" not in env, "Redis TLS is off by default"
        assert env["OTEL_SDK_DISABLED"]["value"] == "true"
        volume, _ = secret_volume_at(pod, pod["containers"][0], "/etc/phalanx/redis-auth")
        assert volume["secret"]["secretName"] == auth["metadata"]["name"]
    redis_pod = deployments["redis"]["spec"]["template"]["spec"]
    volume, _ = secret_volume_at(redis_pod, redis_pod["containers"][0], "/etc/redis/auth")
    assert volume["secret"]["secretName"] == auth["metadata"]["name"]
    assert not of_kind(docs, "PodDisruptionBudget")
    # Without cert-manager in the cluster the chart generates the certificates.
    assert not of_kind(docs, "Certificate")
    check_generated_certificates(docs, {f"phalanx-{svc}" for svc in SERVICES})
    check_network_policies(docs)


@needs_helm
def test_helm_second_values(tmp_path: Path) -> None:
    docs = helm_template(tmp_path, SECOND_VALUES)
    deployments = {component(d): d for d in of_kind(docs, "Deployment")}
    assert set(deployments) == {*SERVICES, CONTROLLER}, "no bundled Redis with an external one"
    assert deployments["binder"]["spec"]["replicas"] == 2
    assert deployments["binder"]["spec"]["strategy"]["type"] == "RollingUpdate"
    [pdb] = of_kind(docs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"] == deployments["binder"]["spec"]["selector"]
    assert not [s for s in of_kind(docs, "Secret") if s.get("type") == "Opaque"], (
        "no password generated for an external Redis"
    )
    for svc in SERVICES:
        pod = deployments[svc]["spec"]["template"]["spec"]
        env = env_of(pod["containers"][0])
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"] == SECOND_VALUES["otel"]["endpoint"]
        assert "OTEL_SDK_DISABLED" not in env
        if svc != "queue":
            assert env["PHALANX_REDIS_URL"]["value"] == SECOND_VALUES["redis"]["url"]
            assert env["PHALANX_REDIS_CA_FILE"]["value"] == "/etc/phalanx/redis-ca/ca.crt"
            volume, _ = secret_volume_at(pod, pod["containers"][0], "/etc/phalanx/redis-ca")
            assert volume["secret"]["secretName"] == "redis-ca"
            volume, _ = secret_volume_at(pod, pod["containers"][0], "/etc/phalanx/redis-auth")
            assert volume["secret"]["secretName"] == "redis-password"
            assert volume["secret"]["items"] == [{"key": "pw", "path": "password"}]
    check_network_policies(docs)


@needs_helm
def test_helm_cert_manager(tmp_path: Path) -> None:
    """cert-manager: detected from the cluster's APIs (auto, the default), or forced on; the bundled Redis
    over TLS gets a certificate of its own and the services check it against their ca.crt."""
    auto = helm_template(tmp_path, None, "--api-versions", CERT_MANAGER_API)
    check_cert_manager_objects(auto, {f"phalanx-{svc}" for svc in SERVICES})
    off = helm_template(tmp_path, {"tls": {"certManager": {"enabled": False}}}, "--api-versions", CERT_MANAGER_API)
    assert not of_kind(off, "Certificate")
    check_generated_certificates(off, {f"phalanx-{svc}" for svc in SERVICES})

    docs = helm_template(tmp_path, CERT_MANAGER_VALUES)
    identities = {f"phalanx-{i}" for i in (*SERVICES, "redis", "operator")}
    check_cert_manager_objects(docs, identities)
    assert not of_kind(docs, "NetworkPolicy")
    deployments = {component(d): d for d in of_kind(docs, "Deployment")}
    redis_pod = deployments["redis"]["spec"]["template"]["spec"]
    script, probes = redis_script_and_probes(docs)
    assert "--port 0 --tls-port 6379" in script and "--tls-cert-file /etc/redis/tls/tls.crt" in script
    assert all("--tls --cacert /etc/redis/tls/ca.crt" in p for p in probes)
    volume, _ = secret_volume_at(redis_pod, redis_pod["containers"][0], "/etc/redis/tls")
    [redis_cert] = [c for c in of_kind(docs, "Certificate") if c["spec"]["commonName"] == "phalanx-redis"]
    assert volume["secret"]["secretName"] == redis_cert["spec"]["secretName"]
    redis_svc = next(s for s in of_kind(docs, "Service") if component(s) == "redis")
    host = f"{redis_svc['metadata']['name']}.phalanx-system.svc"
    assert host in redis_cert["spec"]["dnsNames"], "redis clients check the URL's host"
    for svc in ("scheduler", "binder"):
        env = env_of(deployments[svc]["spec"]["template"]["spec"]["containers"][0])
        assert env["PHALANX_REDIS_URL"]["value"] == f"rediss://{host}:6379/0"
        assert env["PHALANX_REDIS_CA_FILE"]["value"] == f"{TLS_DIR}/ca.crt"


@needs_helm
def test_helm_existing_secrets(tmp_path: Path) -> None:
    names = {"queue": "q-tls", "scheduler": "s-tls", "binder": "b-tls"}
    docs = helm_template(
        tmp_path,
        {"tls": {"existingSecrets": names}, "redis": {"auth": {"existingSecret": "my-redis"}}},
        "--api-versions",
        CERT_MANAGER_API,
    )
    assert tls_secret_names(docs) == names
    assert not of_kind(docs, "Certificate") and not of_kind(docs, "Issuer")
    assert not of_kind(docs, "Secret"), "neither certificates nor a Redis password are generated"


@needs_helm
def test_helm_generated_certificates_do_mutual_tls(tmp_path: Path) -> None:
    """The chart's genCA/genSignedCertWithKey output works with Python gRPC as the services use it: a server
    with its identity's certificate that requires client certificates, a client with another identity's
    checking the server's name against the expected identity (target-name override)."""
    from concurrent.futures import ThreadPoolExecutor

    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    pairs = generated_key_pairs(helm_template(tmp_path))
    queue, scheduler, binder = (pairs[f"phalanx-{s}"] for s in SERVICES)
    server = grpc.server(ThreadPoolExecutor(2))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    creds = grpc.ssl_server_credentials(
        [(queue["tls.key"], queue["tls.crt"])], root_certificates=queue["ca.crt"], require_client_auth=True
    )
    port = server.add_secure_port("127.0.0.1:0", creds)
    server.start()
    try:

        def check(client: dict[str, bytes] | None, name: str) -> bool:
            channel_creds = grpc.ssl_channel_credentials(
                root_certificates=scheduler["ca.crt"],
                private_key=client["tls.key"] if client else None,
                certificate_chain=client["tls.crt"] if client else None,
            )
            with grpc.secure_channel(
                f"127.0.0.1:{port}", channel_creds, options=[("grpc.ssl_target_name_override", name)]
            ) as channel:
                try:
                    reply = health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(service=""), timeout=5
                    )
                except grpc.RpcError:
                    return False
                return reply.status == health_pb2.HealthCheckResponse.SERVING

        assert check(scheduler, "phalanx-queue"), "the scheduler reaches the queue"
        assert check(binder, "phalanx-queue"), "any certificate of the CA passes TLS (authorization is the services')"
        assert not check(scheduler, "phalanx-binder"), "the server's certificate is checked against the identity"
        assert not check(None, "phalanx-queue"), "a client without a certificate is refused"
    finally:
        server.stop(0)


@needs_helm
def test_helm_toggles_and_errors(tmp_path: Path) -> None:
    helm = find_helm() or "helm"
    docs = helm_template(tmp_path, None, "--set", "crds.install=false")
    assert not of_kind(docs, "CustomResourceDefinition")
    assert not of_kind(docs, "PriorityClass"), "cluster-wide, like the CRDs: a second release must not claim them"
    docs = helm_template(tmp_path, None, "--set", "crds.groups.schedulingVolcanoSh=false")
    assert {c["spec"]["group"] for c in of_kind(docs, "CustomResourceDefinition")} == {
        "scheduling.x-k8s.io",
        "scheduling.sigs.k8s.io",
        "phalanx.dev",
    }
    docs = helm_template(tmp_path, None, "--set", "controller.crd=false", "--set", "controller.priorityClasses=false")
    assert "phalanx.dev" not in {c["spec"]["group"] for c in of_kind(docs, "CustomResourceDefinition")}
    assert not of_kind(docs, "PriorityClass") and CONTROLLER in {component(d) for d in of_kind(docs, "Deployment")}
    docs = helm_template(tmp_path, None, "--set", "controller.enabled=false")
    assert not any(component(d) == CONTROLLER for d in docs)
    assert not of_kind(docs, "PriorityClass")
    assert "phalanx.dev" not in {c["spec"]["group"] for c in of_kind(docs, "CustomResourceDefinition")}
    docs = helm_template(tmp_path)
    classes = {p["metadata"]["name"]: p["value"] for p in of_kind(docs, "PriorityClass")}
    shipped = {
        p["metadata"]["name"]: p["value"] for p in load_docs((MANIFESTS / "15-job-priorityclasses.yaml").read_text())
    }
    assert classes == shipped == {f"phalanx-job-priority-{n}": n for n in range(1, 11)}
    docs = helm_template(tmp_path, {"redis": {"enabled": False, "existingSecret": {"name": "phalanx-redis-url"}}})
    binder_env = env_of(
        next(d for d in of_kind(docs, "Deployment") if component(d) == "binder")["spec"]["template"]["spec"][
            "containers"
        ][0]
    )
    assert binder_env["PHALANX_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": "phalanx-redis-url", "key": "url"}
    assert "PHALANX_REDIS_PASSWORD_FILE" not in binder_env, "no password Secret given for the external Redis"
    # Helm merges maps: a default score plugin is dropped by setting it to null.
    docs = helm_template(
        tmp_path,
        {
            "profile": {
                "filters": ["NodeResourcesFit"],
                "scores": {
                    "MostAllocated": 2,
                    "LeastAllocated": None,
                    "GPUFragmentation": None,
                    "InterPodAffinity": None,
                    "PodTopologySpread": None,
                },
                "basicPolicy": "BinPack",
            }
        },
    )
    [cm] = [c for c in of_kind(docs, "ConfigMap") if "profile" in c["metadata"]["name"]]
    assert yaml.safe_load(cm["data"]["profile.yaml"]) == {
        "filters": ["NodeResourcesFit"],
        "scores": {"MostAllocated": 2},
        "percentageOfNodesToScore": 100,
        "basicPolicy": "BinPack",
    }
    # IPv6 clusters bracket the pod IP.
    docs = helm_template(tmp_path, {"listenHost": "[$(POD_IP)]"})
    queue_env = env_of(
        next(d for d in of_kind(docs, "Deployment") if component(d) == "queue")["spec"]["template"]["spec"][
            "containers"
        ][0]
    )
    assert queue_env["PHALANX_LISTEN"]["value"] == "[$(POD_IP)]:50051"
    assert queue_env["PHALANX_HEALTH_LISTEN"]["value"] == "[$(POD_IP)]:50061"
    docs = helm_template(tmp_path, {"networkPolicy": {"enabled": False}})
    assert not of_kind(docs, "NetworkPolicy")
    # Scheduler replicas: several with leader election (and a PodDisruptionBudget); without it, one.
    docs = helm_template(tmp_path, {"scheduler": {"replicas": 3, "leaderElection": {"leaseName": "my-lease"}}})
    [sched] = [d for d in of_kind(docs, "Deployment") if component(d) == "scheduler"]
    assert sched["spec"]["replicas"] == 3 and sched["spec"]["strategy"]["type"] == "RollingUpdate"
    [pdb] = of_kind(docs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"] == sched["spec"]["selector"] and pdb["spec"]["maxUnavailable"] == 1
    assert scheduler_env(docs)["PHALANX_LEADER_ELECT_LEASE_NAME"]["value"] == "my-lease"
    check_rbac(docs)
    check_workloads(docs)
    docs = helm_template(tmp_path, {"scheduler": {"leaderElection": {"enabled": False}}})
    assert scheduler_env(docs)["PHALANX_LEADER_ELECT"]["value"] == "false"
    assert not of_kind(docs, "Role") and not of_kind(docs, "RoleBinding")
    check_rbac(docs)
    check_workloads(docs)
    for bad in (
        ["--set", "redis.enabled=false"],  # Redis is required
        ["--set", "scheduler.replicas=2,scheduler.leaderElection.enabled=false"],  # one may schedule
        ["--set", "scheduler.leaderElection.renewDeadline=15"],  # leaseDuration > renewDeadline
        ["--set", "scheduler.leaderElection.retryPeriod=9"],  # renewDeadline > 1.2 x retryPeriod
        ["--set", "scheduler.leaderElection.leaseName=Bad_Name"],
        ["--set", "otel.enabled=true"],  # an endpoint is required
        ["--set", "queue.replicas=2"],  # the queue is a singleton
        ["--set", "profile.scores.NoSuchPlugin=1"],  # unknown plugin
        ["--set", "tls.existingSecrets.queue=q"],  # all three or none: one CA
        ["--set", "tls.existingSecrets.redis=r"],  # redis only with the three services'
        ["--set", "tls.certManager.enabled=maybe"],  # auto, true or false
        [
            "--set",
            "tls.existingSecrets.queue=q,tls.existingSecrets.scheduler=s,tls.existingSecrets.binder=b,"
            "redis.tls.enabled=true",
        ],  # the bundled Redis over TLS needs its certificate too
        ["--kube-version", "1.29.0"],
    ):  # Kubernetes 1.30+
        out = _run([helm, "template", "phalanx", str(CHART), *bad])
        assert out.returncode != 0, f"helm template {' '.join(bad)} should fail"
    out = _run([helm, "template", "phalanx", str(CHART), "--kube-version", "1.30.0"])
    assert out.returncode == 0, out.stderr


def _service_containers(docs: list[dict[str, Any]]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """service -> (pod template, its container)."""
    out = {}
    for d in of_kind(docs, "Deployment"):
        if component(d) in SERVICES:
            out[component(d)] = (d["spec"]["template"], d["spec"]["template"]["spec"]["containers"][0])
    return out


@needs_helm
def test_helm_metrics(tmp_path: Path) -> None:
    """/metrics by default (ports, Service ports, scrapes admitted from anywhere), no ServiceMonitor and no
    scrape annotations unless asked; metrics.from narrows the NetworkPolicy; off turns it all off."""
    helm = find_helm() or "helm"
    docs = helm_template(tmp_path)
    assert not of_kind(docs, "ServiceMonitor")
    for name, (template, _) in _service_containers(docs).items():
        assert "prometheus.io/scrape" not in template["metadata"].get("annotations", {}), name

    monitoring = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    docs = helm_template(
        tmp_path,
        {
            "metrics": {
                "podAnnotations": True,
                "from": monitoring,
                "serviceMonitor": {"enabled": True, "interval": "15s", "labels": {"release": "prometheus"}},
            }
        },
    )
    check_workloads(docs)
    check_network_policies(docs, metrics_from={"namespace monitoring"})
    for name, (template, _) in _service_containers(docs).items():
        annotations = template["metadata"]["annotations"]
        assert (
            annotations["prometheus.io/scrape"],
            annotations["prometheus.io/port"],
            annotations["prometheus.io/path"],
        ) == ("true", str(METRICS_PORTS[name]), "/metrics")
    [monitor] = of_kind(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["phalanx-system"]}
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "scheme": "http", "interval": "15s", "scrapeTimeout": "10s"}
    ]
    # It selects exactly the services' Services and the job controller's, and each has the port it names.
    selector = monitor["spec"]["selector"]
    picked = []
    for svc in of_kind(docs, "Service"):
        labels = svc["metadata"]["labels"]
        if selector["matchLabels"].items() <= labels.items() and all(
            labels.get(e["key"]) in e["values"] for e in selector["matchExpressions"]
        ):
            picked.append(component(svc))
            assert "metrics" in {p["name"] for p in svc["spec"]["ports"]}
    assert sorted(picked) == sorted([*SERVICES, CONTROLLER])
    [controller] = [d for d in of_kind(docs, "Deployment") if component(d) == CONTROLLER]
    annotations = controller["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(CONTROLLER_METRICS_PORT)

    docs = helm_template(tmp_path, {"metrics": {"enabled": False, "serviceMonitor": {"enabled": True}}})
    assert not of_kind(docs, "ServiceMonitor")
    for name, (_, c) in _service_containers(docs).items():
        assert env_of(c)["PHALANX_METRICS_LISTEN"]["value"] == "off"
        assert "metrics" not in {p["name"] for p in c["ports"]}, name
    for svc in of_kind(docs, "Service"):
        assert "metrics" not in {p["name"] for p in svc["spec"]["ports"]}
    for policy in of_kind(docs, "NetworkPolicy"):
        for rule in policy["spec"].get("ingress", []):
            assert not {p["port"] for p in rule.get("ports", [])} & set(METRICS_PORTS.values())

    for bad in (
        ["--set", "metrics.serviceMonitor.interval=often"],
        ["--set", "metrics.enabled=maybe"],
        ["--set", "metrics.scrape=true"],
    ):
        out = _run([helm, "template", "phalanx", str(CHART), *bad])
        assert out.returncode != 0, f"helm template {' '.join(bad)} should fail"


# --- the bundled Redis' start script and probes, run against a local redis-server ------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_redis_script(script: str, probes: list[str], tmp: Path, tls: dict[str, bytes] | None = None) -> None:
    """Runs the container's script and probes with the container's paths moved under `tmp`: Redis must
    refuse unauthenticated clients, accept the password, run in protected mode, show the password on no
    command line, and the probes must pass. `tls`: the files of the Redis TLS Secret."""
    if not (shutil.which("redis-server") and shutil.which("redis-cli")):
        pytest.skip("redis-server/redis-cli not installed")
    port = str(_free_port())
    password = 'pa ss"wo\\rd-' + os.urandom(6).hex()  # quotes, a backslash, a space: the escaping must hold
    (tmp / "auth").mkdir()
    (tmp / "auth" / "password").write_text(password)
    (tmp / "data").mkdir()
    cli = ["redis-cli", "-h", "127.0.0.1", "-p", port]
    if tls:
        (tmp / "tls").mkdir()
        for name, data in tls.items():
            (tmp / "tls" / name).write_bytes(data)
        cli += ["--tls", "--cacert", str(tmp / "tls" / "ca.crt")]

    def local(text: str) -> str:
        return (
            text.replace("/etc/redis/auth", str(tmp / "auth"))
            .replace("/tmp/redis.conf", str(tmp / "redis.conf"))
            .replace("/etc/redis/tls", str(tmp / "tls"))
            .replace("--dir /data", f"--dir {tmp / 'data'}")
            .replace("6379", port)
        )

    proc = subprocess.Popen(["sh", "-c", local(script)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while _run(["sh", "-c", local(probes[0])]).returncode != 0:
            assert proc.poll() is None, "redis-server exited"
            assert time.monotonic() < deadline, "the readiness probe never passed"
            time.sleep(0.1)
        for probe in probes:
            assert _run(["sh", "-c", local(probe)]).returncode == 0, probe
        assert "NOAUTH" in _run([*cli, "ping"]).stdout
        authed = _run([*cli, "config", "get", "protected-mode"], env={**os.environ, "REDISCLI_AUTH": password})
        assert authed.stdout.split() == ["protected-mode", "yes"]
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert b"redis-server" in cmdline and password.encode() not in cmdline
        assert (tmp / "redis.conf").stat().st_mode & 0o077 == 0, "the config file is private"
        if tls:
            plain = ["redis-cli", "-h", "127.0.0.1", "-p", port, "ping"]
            assert "PONG" not in _run(plain, env={**os.environ, "REDISCLI_AUTH": password}).stdout
    finally:
        proc.terminate()
        proc.wait(10)


def test_manifests_redis_script_runs(tmp_path: Path) -> None:
    run_redis_script(*redis_script_and_probes(load_dir(MANIFESTS)), tmp_path)


@needs_helm
def test_helm_redis_script_runs(tmp_path: Path) -> None:
    run_redis_script(*redis_script_and_probes(helm_template(tmp_path)), tmp_path)


@needs_helm
def test_helm_redis_tls_script_runs(tmp_path: Path) -> None:
    """The bundled Redis over TLS, with the chart-generated certificate of phalanx-redis: TLS only (a
    plaintext client gets nothing), the probes connect with TLS."""
    docs = helm_template(tmp_path, {"redis": {"tls": {"enabled": True}}})
    check_generated_certificates(docs, {f"phalanx-{i}" for i in (*SERVICES, "redis")})
    run_redis_script(*redis_script_and_probes(docs), tmp_path, generated_key_pairs(docs)["phalanx-redis"])


# --- docker compose -----------------------------------------------------------------------------------


def compose_config(*files: str) -> dict[str, Any]:
    cmd, reason = find_compose()
    if cmd is None:
        pytest.skip(reason)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PHALANX_", "OTEL", "OTLP_", "COMPOSE_", "REDIS_", "JAEGER_"))
    }
    args = [a for f in files for a in ("-f", str(REPO / f))]
    out = _run([*cmd, "--project-directory", str(REPO), *args, "config", "--format", "json"], env=env, cwd=REPO)
    assert out.returncode == 0, f"docker compose config failed:\n{out.stderr}"
    return json.loads(out.stdout)


def _volume_mounts(service: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["target"]: v for v in service.get("volumes", [])}


def test_compose_config_base() -> None:
    cfg = compose_config("docker-compose.yml")
    services = cfg["services"]
    assert set(services) == {"certs", "redis", *SERVICES}
    certs = services["certs"]
    assert certs["command"][:2] == ["sh", "-c"] and "phalanx certs --out /certs --redis-password" in certs["command"][2]
    # Each identity the services use is a volume of its own, mounted where `phalanx certs` writes it.
    assert {t: m["source"] for t, m in _volume_mounts(certs).items()} == {
        "/certs": "certs",
        "/certs/redis": "redis-auth",
        **{f"/certs/phalanx-{svc}": f"tls-{svc}" for svc in SERVICES},
    }
    assert certs["read_only"] is True and certs["cap_drop"] == ["ALL"]
    for svc in SERVICES:
        s = services[svc]
        assert s["build"]["dockerfile"] == "deploy/docker/Dockerfile"
        assert s["command"] == [f"phalanx-{svc}"]
        env = s["environment"]
        assert env["PHALANX_CLOCK"] == "real" and env["PHALANX_BACKEND"] == "simulated"
        assert env["PHALANX_LISTEN"] == f"0.0.0.0:{PORTS[svc]}"
        assert env["PHALANX_HEALTH_LISTEN"] == f"0.0.0.0:{HEALTH_PORTS[svc]}"
        assert env["PHALANX_TLS_DIR"] == TLS_DIR and "PHALANX_PLAINTEXT" not in env
        # Its own identity's volume only, read-only; never the `certs` volume (the CA's key, other identities).
        tls = _volume_mounts(s)[TLS_DIR]
        assert (tls["type"], tls["source"], tls["read_only"]) == ("volume", f"tls-{svc}", True)
        assert sorted(m["source"] for m in s["volumes"]) == ([] if svc == "queue" else ["redis-auth"]) + [f"tls-{svc}"]
        assert s["depends_on"]["certs"]["condition"] == "service_completed_successfully"
        # CMD-SHELL: podman's Docker API splits CMD arguments at spaces.
        kind, script = s["healthcheck"]["test"]
        assert kind == "CMD-SHELL" and script.startswith("exec /opt/phalanx/bin/python -c ")
        assert "grpc_health" in script and "PHALANX_HEALTH_LISTEN" in script
        assert s["read_only"] is True and s["user"] == "65532:65532"
        assert [p["target"] for p in s["ports"]] == [PORTS[svc], METRICS_PORTS[svc]]
        assert all(p["host_ip"] == "127.0.0.1" for p in s["ports"])
        assert env["PHALANX_METRICS_LISTEN"] == f"0.0.0.0:{METRICS_PORTS[svc]}"
        if svc != "queue":
            assert env["PHALANX_REDIS_URL"] == "redis://redis:6379/0"
            directory, file = env["PHALANX_REDIS_PASSWORD_FILE"].rsplit("/", 1)
            auth = _volume_mounts(s)[directory]
            assert (auth["source"], auth["read_only"], file) == ("redis-auth", True, "password")
        else:
            assert not any(k.startswith("PHALANX_REDIS") for k in env)
    deps = services["scheduler"]["depends_on"]
    assert {k: v["condition"] for k, v in deps.items()} == {
        "certs": "service_completed_successfully",
        "redis": "service_healthy",
        "queue": "service_healthy",
        "binder": "service_healthy",
    }
    redis = services["redis"]
    assert redis["depends_on"]["certs"]["condition"] == "service_completed_successfully"
    script = " ".join(redis["command"])
    assert "requirepass" in script and "protected-mode yes" in script and "protected-mode no" not in script
    assert "--requirepass" not in script and "exec docker-entrypoint.sh redis-server /tmp/redis.conf" in script
    auth = _volume_mounts(redis)["/etc/redis/auth"]
    assert (auth["source"], auth["read_only"]) == ("redis-auth", True)
    assert not any("subpath" in m.get("volume", {}) for svc in services.values() for m in svc.get("volumes", []))
    profile = services["scheduler"]["configs"][0]
    assert cfg["configs"][profile["source"]]["file"] == str(DEPLOY / "compose" / "scheduler-profile.yaml")
    assert "REDISCLI_AUTH" in " ".join(redis["healthcheck"]["test"])


def test_compose_config_with_observability() -> None:
    cfg = compose_config("docker-compose.yml", "docker-compose.observability.yml")
    services = cfg["services"]
    assert set(services) == {"certs", "redis", *SERVICES, "otel-collector", "jaeger"}
    assert services["otel-collector"]["image"].startswith("otel/opentelemetry-collector-contrib:")
    [mount] = services["otel-collector"]["volumes"]
    assert Path(mount["source"]) == DEPLOY / "otel" / "collector.yaml"
    for svc in SERVICES:
        env = services[svc]["environment"]
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4317"
        assert env["PHALANX_BACKEND"] == "simulated", "the overlay keeps the base environment"
        assert env["PHALANX_TLS_DIR"] == TLS_DIR, "the overlay keeps TLS on"
        assert {"otel-collector", "certs"} <= set(services[svc]["depends_on"])


def test_collector_config_pipeline() -> None:
    cfg = yaml.safe_load((DEPLOY / "otel" / "collector.yaml").read_text())
    traces = cfg["service"]["pipelines"]["traces"]
    assert traces["receivers"] == ["otlp"]
    for name in (*traces["receivers"], *traces["processors"], *traces["exporters"]):
        section = {"receivers", "processors", "exporters"}
        assert any(name in cfg[s] for s in section), f"pipeline component {name} is not configured"
    jaeger = next(v for k, v in cfg["exporters"].items() if k.endswith("/jaeger"))
    assert jaeger["endpoint"] == "jaeger:4317"


# --- image --------------------------------------------------------------------------------------------


def test_dockerfile_and_dockerignore() -> None:
    text = (DEPLOY / "docker" / "Dockerfile").read_text()
    froms = re.findall(r"^FROM\s+(\S+)(?:\s+AS\s+(\S+))?", text, re.M)
    assert len(froms) >= 2, "multi-stage"
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim$", text, re.M)
    assert re.search(r"^USER 65532:65532$", text, re.M)
    assert "pip wheel" in text and "venv" in text
    assert "ENTRYPOINT" not in [
        line.split()[0] for line in text.splitlines() if line.strip() and not line.startswith("#")
    ]
    copied = set(re.findall(r"^COPY\s+(?!--from)(\S+)", text, re.M))
    ignored = {
        line.strip().rstrip("/")
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert copied and not copied & ignored, f".dockerignore excludes what the Dockerfile copies: {copied & ignored}"
    assert {".git", ".venv", "tests"} <= ignored


# --- layout: combined ---------------------------------------------------------------------------------

COMBINED_VALUES = {"layout": "combined", "metrics": {"enabled": True}, "networkPolicy": {"enabled": True}}
POD_IP = "10.1.2.3"


def _expanded(text: str, env: dict[str, str]) -> str:
    """What the kubelet does to $(VAR) in a container's env values and args."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), text)


def combined_sections(container: dict[str, Any]) -> dict[str, Any]:
    """The combined container's command line parsed by phalanx-combined itself, in a fresh interpreter with
    the container's environment (the services' parsers read PHALANX_* when they are built); and, under
    "shares_cluster_view", whether the binder's view then follows the scheduler's watch."""
    env: dict[str, str] = {"POD_IP": POD_IP}
    for e in container["env"]:
        if "value" in e:
            env[e["name"]] = _expanded(e["value"], env)
        else:  # downward API and Secret references: a stand-in value (the pod's IP as above)
            env.setdefault(e["name"], f"<{e['name']}>")
    argv = [_expanded(a, env) for a in container["args"]]
    probe = (
        "import json, sys\n"
        "from phalanx_combined.__main__ import parse, shares_cluster_view\n"
        "args = parse(json.loads(sys.argv[1]))\n"
        "out = {k: vars(v) for k, v in args.items()}\n"
        "out['shares_cluster_view'] = shares_cluster_view(args['binder'], args['scheduler'])\n"
        "print(json.dumps(out, default=str))\n"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PHALANX_", "OTEL_"))}
    out = _run([sys.executable, "-c", probe, json.dumps(argv)], env={**clean, **env}, cwd=REPO)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@needs_helm
def test_helm_combined_layout(tmp_path: Path) -> None:
    """layout: combined: the scheduler's pods run phalanx-combined with the three services' own ports and
    certificates; the queue and binder Deployments, Services and accounts are gone; the scheduler's account
    holds the binder's role; the NetworkPolicy admits the three health and metrics ports."""
    docs = helm_template(tmp_path, COMBINED_VALUES)
    lint = _run([find_helm() or "helm", "lint", "--strict", str(CHART), *helm_values_args(COMBINED_VALUES, tmp_path)])
    assert lint.returncode == 0, lint.stdout + lint.stderr
    deployments = {component(d): d for d in of_kind(docs, "Deployment")}
    assert set(deployments) == {"scheduler", CONTROLLER, "redis"}
    assert {component(s) for s in of_kind(docs, "Service")} == {"scheduler", CONTROLLER, "redis"}
    assert {component(s) for s in of_kind(docs, "ServiceAccount")} == {"scheduler", CONTROLLER}
    pod = deployments["scheduler"]["spec"]["template"]["spec"]
    [c] = pod["containers"]
    assert c["command"] == ["phalanx-combined"]
    parsed = combined_sections(c)
    listen = {name: parsed[name]["listen"] for name in SERVICES}
    assert listen == {"queue": "127.0.0.1:50051", "scheduler": f"{POD_IP}:50052", "binder": "127.0.0.1:50053"}
    assert parsed["scheduler"]["queue"] == "127.0.0.1:50051" and parsed["scheduler"]["binder"] == "127.0.0.1:50053"
    for name in SERVICES:
        assert parsed[name]["health_listen"] == f"{POD_IP}:{HEALTH_PORTS[name]}"
        assert parsed[name]["metrics_listen"] == f"{POD_IP}:{METRICS_PORTS[name]}"
        assert parsed[name]["backend"] == "kubernetes" and not parsed[name]["plaintext"]
    assert parsed["binder"]["lock_lease"] == 30.0
    assert parsed["shares_cluster_view"] is True  # one stream of pods from the API server, not two
    assert parsed["binder"]["redis_url"] == parsed["scheduler"]["redis_url"]
    # Each service its own certificate, from its own Secret.
    secrets = {}
    for name in SERVICES:
        tls_dir = parsed[name]["tls_dir"]
        assert tls_dir == (TLS_DIR if name == "scheduler" else f"{TLS_DIR}-{name}")
        volume, _ = secret_volume_at(pod, c, tls_dir)
        secrets[name] = volume["secret"]["secretName"]
    assert secrets == {name: f"phalanx-{name}-tls" for name in SERVICES}
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for name in ("queue", "binder"):
        assert ports[f"health-{name}"] == HEALTH_PORTS[name] and ports[f"metrics-{name}"] == METRICS_PORTS[name]
    # RBAC: the scheduler's account is bound to the binder's ClusterRole too.
    subjects = {component(b): b["subjects"][0]["name"] for b in of_kind(docs, "ClusterRoleBinding")}
    assert subjects["binder"] == subjects["scheduler"] == pod["serviceAccountName"]
    # NetworkPolicy: the combined pods admit the three health and metrics ports, no gRPC port.
    [policy] = [p for p in of_kind(docs, "NetworkPolicy") if component(p) == "scheduler"]
    admitted = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    assert admitted == set(HEALTH_PORTS.values()) | set(METRICS_PORTS.values())
    assert not [p for p in of_kind(docs, "NetworkPolicy") if component(p) in ("queue", "binder")]
