"""Checks of the deployment artifacts: CRDs, plain manifests, the Helm chart, the compose files, the image.

What needs an external tool is skipped, with the reason, when the tool is missing:
  * helm: ${PHALANX_TOOLS_CACHE:-~/.cache/phalanx/tools}/helm-<HELM_VERSION>/helm (built by
    hack/build-helm.sh), else `helm` on PATH, else $PHALANX_HELM.
  * docker compose: the docker CLI's compose plugin, else a standalone Compose v2 `docker-compose`
    on PATH, else one built by hack/build-compose.sh, else $PHALANX_DOCKER_COMPOSE. Only `config` is
    run: no Docker engine is needed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator
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
READ_VERBS = {"get", "list", "watch"}
PODGROUP_GROUPS = {"scheduling.x-k8s.io", "scheduling.sigs.k8s.io", "scheduling.volcano.sh"}

# The second values set: an external Redis, two binders, tracing on.
SECOND_VALUES = {
    "redis": {"enabled": False, "url": "redis://redis.data.svc.cluster.local:6379/3"},
    "binder": {"replicas": 2},
    "otel": {"enabled": True, "endpoint": "http://otel-collector.observability.svc:4317"},
}
VALUE_SETS = {"default": None, "external-redis-2-binders-otel": SECOND_VALUES}


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


HELM_MISSING = (f"no helm v3 binary: run hack/build-helm.sh (builds {HELM_VERSION} into "
                "${PHALANX_TOOLS_CACHE:-~/.cache/phalanx/tools}), or put helm on PATH")


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
    return None, ("no Docker Compose v2: the docker CLI has no compose plugin (`docker compose`) and no "
                  "standalone docker-compose v2 is on PATH (or in $PHALANX_DOCKER_COMPOSE)")


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


def helm_template(tmp: Path, values: dict[str, Any] | None = None, *extra: str,
                  namespace: str = "phalanx-system") -> list[dict[str, Any]]:
    helm = find_helm()
    assert helm
    out = _run([helm, "template", "phalanx", str(CHART), "--namespace", namespace,
                *helm_values_args(values, tmp), *extra])
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
    "scheduling.volcano.sh": ({"minMember", "minResources", "minTaskMember", "queue", "priorityClassName"},
                              {"phase", "conditions", "running", "succeeded", "failed"}),
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
    assert (names["kind"], names["plural"], names["singular"], names["listKind"]) == \
        ("PodGroup", "podgroups", "podgroup", "PodGroupList")
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
    ours = sorted(p.name for p in CRD_DIR.glob("*_podgroups.yaml"))
    copies = sorted(p.name for p in (CHART / "files" / "crds").glob("*.yaml"))
    assert ours == copies == sorted(f"{g}_podgroups.yaml" for g in CRDS)
    for name in ours:
        assert (CRD_DIR / name).read_bytes() == (CHART / "files" / "crds" / name).read_bytes(), (
            f"deploy/helm/phalanx/files/crds/{name} differs from deploy/crds/{name}: "
            "cp deploy/crds/*_podgroups.yaml deploy/helm/phalanx/files/crds/")


# --- RBAC: least privilege ----------------------------------------------------------------------------

# Everything each service may do; the binder is the only writer.
ALLOWED = {
    "queue": {("", "pods"): READ_VERBS},
    "scheduler": {("", "nodes"): READ_VERBS, ("", "pods"): READ_VERBS, ("", "configmaps"): READ_VERBS,
                  **{(g, "podgroups"): READ_VERBS for g in PODGROUP_GROUPS}},
    "binder": {("", "pods"): {"get", "list", "patch"}, ("", "pods/binding"): {"create"},
               ("", "pods/status"): {"patch"}, ("", "events"): {"create", "patch"},
               ("events.k8s.io", "events"): {"create", "patch"},
               **{(g, "podgroups/status"): {"update", "patch"} for g in PODGROUP_GROUPS}},
}


def grants(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role.get("rules", []):
        assert "nonResourceURLs" not in rule and "resourceNames" not in rule
        for g in rule["apiGroups"]:
            for r in rule["resources"]:
                out.setdefault((g, r), set()).update(rule["verbs"])
    return out


def check_rbac(docs: list[dict[str, Any]]) -> None:
    roles = {component(r): r for r in of_kind(docs, "ClusterRole")}
    assert set(roles) == set(SERVICES), f"one ClusterRole per service, got {sorted(roles)}"
    assert not of_kind(docs, "Role") and not of_kind(docs, "RoleBinding")
    for svc, role in roles.items():
        g = grants(role)
        for (group, resource), verbs in g.items():
            assert "*" not in verbs and group != "*" and resource != "*", f"{svc}: wildcard in {role['rules']}"
        assert g == ALLOWED[svc], f"{svc} role grants {g}, expected exactly {ALLOWED[svc]}"
    # Only the binder may create pods/binding; the queue and the scheduler only read.
    creators = [svc for svc, role in roles.items() if "create" in grants(role).get(("", "pods/binding"), set())]
    assert creators == ["binder"]
    for svc in ("queue", "scheduler"):
        verbs = set().union(*grants(roles[svc]).values())
        assert verbs <= READ_VERBS, f"{svc} has write verbs {verbs - READ_VERBS}"
    # Each binding gives its role to its own service's account, and that account runs the service.
    accounts = {}
    for b in of_kind(docs, "ClusterRoleBinding"):
        svc = component(b)
        assert b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                "name": roles[svc]["metadata"]["name"]}
        [subject] = b["subjects"]
        assert subject["kind"] == "ServiceAccount"
        accounts[svc] = (subject["namespace"], subject["name"])
    assert set(accounts) == set(SERVICES)
    for d in of_kind(docs, "Deployment"):
        svc = component(d)
        if svc in SERVICES:
            assert (d["metadata"]["namespace"], d["spec"]["template"]["spec"]["serviceAccountName"]) == accounts[svc]
    assert len(set(accounts.values())) == 3, "each service has its own ServiceAccount"


# --- workloads: probes, hardening ---------------------------------------------------------------------

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
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, name
            assert sc["readOnlyRootFilesystem"] is True, name
            assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"], name
            assert c["resources"]["requests"] and c["resources"]["limits"]["memory"], name
        if name not in SERVICES:
            assert pod.get("automountServiceAccountToken") is False, f"{name} needs no API token"
            continue
        assert psc["runAsUser"] == 65532
        [c] = pod["containers"]
        port = PORTS[name]
        assert c["command"] == [f"phalanx-{name}"]
        assert {"name": "grpc", "containerPort": port, "protocol": "TCP"} in c["ports"]
        # Native gRPC probes on the health service names that separate "restart me" from "route no work to me".
        for probe, service in (("readinessProbe", "readiness"), ("livenessProbe", "liveness"),
                               ("startupProbe", "liveness")):
            assert c[probe]["grpc"] == {"port": port, "service": service}, f"{name}: {probe}"
        env = {e["name"]: e for e in c["env"]}
        assert env["PHALANX_LISTEN"]["value"] == f"0.0.0.0:{port}"
        assert env["PHALANX_SCHEDULER_NAME"]["value"] == "phalanx"
        assert env["OTEL_SERVICE_NAME"]["value"] == f"phalanx-{name}"
        if name in ("scheduler", "binder"):
            assert "PHALANX_REDIS_URL" in env and "PHALANX_REDIS_PREFIX" in env
        if name == "binder":
            assert env["PHALANX_BACKEND"]["value"] == "kubernetes"
        if name in ("queue", "scheduler"):
            assert d["spec"]["replicas"] <= 1 and d["spec"]["strategy"]["type"] == "Recreate"
        if name == "scheduler":
            assert env["PHALANX_QUEUE_ADDR"]["value"].endswith(":50051")
            assert env["PHALANX_BINDER_ADDR"]["value"].endswith(":50053")
            profile = env["PHALANX_PROFILE"]["value"]
            mount = next(m for m in c["volumeMounts"] if profile.startswith(m["mountPath"] + "/"))
            volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
            cms = {m["metadata"]["name"]: m for m in of_kind(docs, "ConfigMap")}
            data = cms[volume["configMap"]["name"]]["data"][profile.rsplit("/", 1)[1]]
            assert set(yaml.safe_load(data)) <= {"filters", "scores", "percentageOfNodesToScore"}
        svc = services[name]
        assert svc["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
        assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(port, "grpc")]


# --- plain manifests ----------------------------------------------------------------------------------

def test_manifests_rbac_least_privilege() -> None:
    check_rbac(load_dir(MANIFESTS))


def test_manifests_workloads() -> None:
    docs = load_dir(MANIFESTS)
    check_workloads(docs)
    [ns] = of_kind(docs, "Namespace")
    assert ns["metadata"]["name"] == "phalanx-system"
    assert sorted(p.name for p in MANIFESTS.glob("*.yaml"))[0].startswith("00-"), "namespace applies first"
    for d in docs:
        if d["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert d["metadata"]["namespace"] == "phalanx-system", f"{d['kind']} {d['metadata']['name']}"
    env = {e["name"]: e["value"] for e in next(
        d for d in of_kind(docs, "Deployment") if component(d) == "binder")["spec"]["template"]["spec"]["containers"][0]["env"]}
    redis_svc = next(s for s in of_kind(docs, "Service") if component(s) == "redis")
    assert env["PHALANX_REDIS_URL"] == f"redis://{redis_svc['metadata']['name']}:6379/0"


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
        if d["kind"] not in ("CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"):
            assert d["metadata"]["namespace"] == "phalanx-system", f"{d['kind']} {d['metadata']['name']}"
        assert d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "phalanx"


def test_helm_crds_rendered_from_copies(rendered: list[dict[str, Any]]) -> None:
    crds = {c["metadata"]["name"]: c for c in of_kind(rendered, "CustomResourceDefinition")}
    assert set(crds) == {f"podgroups.{g}" for g in CRDS}
    for g in CRDS:
        assert crds[f"podgroups.{g}"] == load_docs(crd_file(g).read_text())[0]


@needs_helm
def test_helm_default_values(tmp_path: Path) -> None:
    docs = helm_template(tmp_path)
    deployments = {component(d): d for d in of_kind(docs, "Deployment")}
    assert set(deployments) == {*SERVICES, "redis"}
    redis_svc = next(s for s in of_kind(docs, "Service") if component(s) == "redis")
    for svc in ("scheduler", "binder"):
        env = {e["name"]: e for e in deployments[svc]["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["PHALANX_REDIS_URL"]["value"] == f"redis://{redis_svc['metadata']['name']}.phalanx-system.svc:6379/0"
        assert env["OTEL_SDK_DISABLED"]["value"] == "true"
    assert not of_kind(docs, "PodDisruptionBudget")


@needs_helm
def test_helm_second_values(tmp_path: Path) -> None:
    docs = helm_template(tmp_path, SECOND_VALUES)
    deployments = {component(d): d for d in of_kind(docs, "Deployment")}
    assert set(deployments) == set(SERVICES), "no bundled Redis with an external one"
    assert deployments["binder"]["spec"]["replicas"] == 2
    assert deployments["binder"]["spec"]["strategy"]["type"] == "RollingUpdate"
    [pdb] = of_kind(docs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"] == deployments["binder"]["spec"]["selector"]
    for svc in SERVICES:
        env = {e["name"]: e for e in deployments[svc]["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"] == SECOND_VALUES["otel"]["endpoint"]
        assert "OTEL_SDK_DISABLED" not in env
        if svc != "queue":
            assert env["PHALANX_REDIS_URL"]["value"] == SECOND_VALUES["redis"]["url"]


@needs_helm
def test_helm_toggles_and_errors(tmp_path: Path) -> None:
    helm = find_helm() or "helm"
    docs = helm_template(tmp_path, None, "--set", "crds.install=false")
    assert not of_kind(docs, "CustomResourceDefinition")
    docs = helm_template(tmp_path, None, "--set", "crds.groups.schedulingVolcanoSh=false")
    assert {c["spec"]["group"] for c in of_kind(docs, "CustomResourceDefinition")} == {
        "scheduling.x-k8s.io", "scheduling.sigs.k8s.io"}
    docs = helm_template(tmp_path, {"redis": {"enabled": False, "existingSecret": {"name": "phalanx-redis-url"}}})
    env = {e["name"]: e for e in next(
        d for d in of_kind(docs, "Deployment") if component(d) == "binder")["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["PHALANX_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": "phalanx-redis-url", "key": "url"}
    # Helm merges maps: a default score plugin is dropped by setting it to null.
    docs = helm_template(tmp_path, {"profile": {"filters": ["NodeResourcesFit"],
                                                "scores": {"MostAllocated": 2, "LeastAllocated": None}}})
    [cm] = [c for c in of_kind(docs, "ConfigMap") if "profile" in c["metadata"]["name"]]
    assert yaml.safe_load(cm["data"]["profile.yaml"]) == {
        "filters": ["NodeResourcesFit"], "scores": {"MostAllocated": 2}, "percentageOfNodesToScore": 100}
    for bad in (["--set", "redis.enabled=false"],            # Redis is required
                ["--set", "otel.enabled=true"],              # an endpoint is required
                ["--set", "queue.replicas=2"],               # the queue is a singleton
                ["--set", "profile.scores.NoSuchPlugin=1"],  # unknown plugin
                ["--kube-version", "1.29.0"]):               # Kubernetes 1.30+
        out = _run([helm, "template", "phalanx", str(CHART), *bad])
        assert out.returncode != 0, f"helm template {' '.join(bad)} should fail"
    out = _run([helm, "template", "phalanx", str(CHART), "--kube-version", "1.30.0"])
    assert out.returncode == 0, out.stderr


# --- docker compose -----------------------------------------------------------------------------------

def compose_config(*files: str) -> dict[str, Any]:
    cmd, reason = find_compose()
    if cmd is None:
        pytest.skip(reason)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PHALANX_", "OTEL", "COMPOSE_", "REDIS_IMAGE", "JAEGER_IMAGE"))}
    args = [a for f in files for a in ("-f", str(REPO / f))]
    out = _run([*cmd, "--project-directory", str(REPO), *args, "config", "--format", "json"], env=env, cwd=REPO)
    assert out.returncode == 0, f"docker compose config failed:\n{out.stderr}"
    return json.loads(out.stdout)


def test_compose_config_base() -> None:
    cfg = compose_config("docker-compose.yml")
    services = cfg["services"]
    assert set(services) == {"redis", *SERVICES}
    for svc in SERVICES:
        s = services[svc]
        assert s["build"]["dockerfile"] == "deploy/docker/Dockerfile"
        assert s["command"] == [f"phalanx-{svc}"]
        env = s["environment"]
        assert env["PHALANX_CLOCK"] == "real" and env["PHALANX_BACKEND"] == "simulated"
        assert env["PHALANX_LISTEN"] == f"0.0.0.0:{PORTS[svc]}"
        assert s["healthcheck"]["test"][:3] == ["CMD", "python", "-c"]
        assert "grpc_health" in s["healthcheck"]["test"][3]
        assert s["read_only"] is True and s["user"] == "65532:65532"
        if svc != "queue":
            assert env["PHALANX_REDIS_URL"] == "redis://redis:6379/0"
    deps = services["scheduler"]["depends_on"]
    assert {k: v["condition"] for k, v in deps.items()} == {
        "redis": "service_healthy", "queue": "service_healthy", "binder": "service_healthy"}


def test_compose_config_with_observability() -> None:
    cfg = compose_config("docker-compose.yml", "docker-compose.observability.yml")
    services = cfg["services"]
    assert set(services) == {"redis", *SERVICES, "otel-collector", "jaeger"}
    assert services["otel-collector"]["image"].startswith("otel/opentelemetry-collector-contrib:")
    [mount] = services["otel-collector"]["volumes"]
    assert Path(mount["source"]) == DEPLOY / "otel" / "collector.yaml"
    for svc in SERVICES:
        env = services[svc]["environment"]
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4317"
        assert env["PHALANX_BACKEND"] == "simulated", "the overlay keeps the base environment"
        assert "otel-collector" in services[svc]["depends_on"]


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
    assert "ENTRYPOINT" not in [line.split()[0] for line in text.splitlines() if line.strip() and not line.startswith("#")]
    copied = set(re.findall(r"^COPY\s+(?!--from)(\S+)", text, re.M))
    ignored = {line.strip().rstrip("/") for line in (REPO / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert copied and not copied & ignored, f".dockerignore excludes what the Dockerfile copies: {copied & ignored}"
    assert {".git", ".venv", "tests"} <= ignored
