"""The chart's Redis with Sentinel: a primary with replicas and Sentinels (bundled), or an existing Sentinel
deployment (external). Rendered with the real helm binary, like the other chart tests."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from test_deploy_artifacts import (
    CHART,
    SERVICES,
    _run,
    component,
    env_of,
    find_helm,
    helm_template,
    helm_values_args,
    needs_helm,
    of_kind,
    secret_volume_at,
)

BUNDLED = {"redis": {"sentinel": {"enabled": True}}}
EXTERNAL = {
    "redis": {
        "enabled": False,
        "auth": {"existingSecret": "redis-password", "existingSecretKey": "pw"},
        "tls": {"enabled": True, "caSecret": {"name": "redis-ca", "key": "ca.crt"}},
        "sentinel": {"external": "sentinel-a.data.svc:26379,sentinel-b.data.svc:26379", "masterName": "jobs"},
    }
}
NAMESPACE = "phalanx-system"
PEERS = {"scheduler", "binder", "redis", "redis-sentinel"}


def service_env(docs: list[dict[str, Any]], svc: str) -> dict[str, dict[str, Any]]:
    [d] = [d for d in of_kind(docs, "Deployment") if component(d) == svc]
    return env_of(d["spec"]["template"]["spec"]["containers"][0])


@needs_helm
@pytest.mark.parametrize("values", [BUNDLED, EXTERNAL], ids=["bundled", "external"])
def test_helm_lint_strict_with_sentinel(values: dict[str, Any], tmp_path: Path) -> None:
    out = _run([find_helm() or "helm", "lint", "--strict", str(CHART), *helm_values_args(values, tmp_path)])
    assert out.returncode == 0, f"helm lint --strict failed:\n{out.stdout}\n{out.stderr}"


@needs_helm
def test_bundled_sentinel_deploys_data_nodes_and_sentinels_spread_across_nodes(tmp_path: Path) -> None:
    docs = helm_template(tmp_path, BUNDLED)
    assert "redis" not in {component(d) for d in of_kind(docs, "Deployment")}, "no single Redis beside it"
    sets = {component(s): s for s in of_kind(docs, "StatefulSet")}
    assert set(sets) == {"redis", "redis-sentinel"}
    assert sets["redis"]["spec"]["replicas"] == 3 and sets["redis-sentinel"]["spec"]["replicas"] == 3
    headless = {s["metadata"]["name"]: s for s in of_kind(docs, "Service") if s["spec"].get("clusterIP") == "None"}
    pdbs = {component(p): p for p in of_kind(docs, "PodDisruptionBudget")}
    for name, s in sets.items():
        pod = s["spec"]["template"]["spec"]
        labels = s["spec"]["template"]["metadata"]["labels"]
        # Never two of them on one Kubernetes node.
        [term] = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        assert term["labelSelector"]["matchLabels"].items() <= labels.items()
        assert pdbs[name]["spec"]["maxUnavailable"] == 1
        assert pdbs[name]["spec"]["selector"]["matchLabels"].items() <= labels.items()
        assert headless[s["spec"]["serviceName"]]["spec"]["publishNotReadyAddresses"] is True
        [c] = pod["containers"]
        script = c["command"][2]
        assert subprocess.run(["sh", "-n", "-c", script]).returncode == 0, f"{name}: the start script does not parse"
        # The password from the mounted Secret into a config file; never on a command line.
        assert 'PW="$(cat /etc/redis/auth/password)"' in script and "requirepass" in script
        assert "--requirepass" not in script and " -a " not in script and "protected-mode yes" in script
        volume, _ = secret_volume_at(pod, c, "/etc/redis/auth")
        assert [i["path"] for i in volume["secret"]["items"]] == ["password"]
        for probe in ("readinessProbe", "livenessProbe"):
            assert 'REDISCLI_AUTH="$(cat /etc/redis/auth/password)"' in c[probe]["exec"]["command"][2]
        assert pod["automountServiceAccountToken"] is False and pod["securityContext"]["runAsNonRoot"] is True
    data_script = sets["redis"]["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert "masterauth" in data_script and "min-replicas-to-write %d" in data_script
    assert "sentinel get-master-addr-by-name phalanx" in data_script  # comes back as the replica of the primary
    watch_script = sets["redis-sentinel"]["spec"]["template"]["spec"]["containers"][0]["command"][2]
    for line in ("sentinel sentinel-pass", "sentinel auth-pass", "sentinel monitor", "--sentinel"):
        assert line in watch_script
    # The services find the primary through every Sentinel, by its pod's stable name.
    sentinel_set = sets["redis-sentinel"]["metadata"]["name"]
    want = ",".join(f"{sentinel_set}-{i}.{sentinel_set}-headless.{NAMESPACE}.svc:26379" for i in range(3))
    for svc in ("scheduler", "binder"):
        env = service_env(docs, svc)
        assert env["PHALANX_REDIS_SENTINELS"]["value"] == want
        assert env["PHALANX_REDIS_MASTER_NAME"]["value"] == "phalanx"
        assert "PHALANX_REDIS_URL" not in env
        assert env["PHALANX_REDIS_PASSWORD_FILE"]["value"] == "/etc/phalanx/redis-auth/password"
    assert not any(k.startswith("PHALANX_REDIS") for k in service_env(docs, "queue"))


@needs_helm
def test_bundled_sentinel_is_reachable_only_from_the_scheduler_binder_and_itself(tmp_path: Path) -> None:
    docs = helm_template(tmp_path, BUNDLED)
    pods = {component(d): d["spec"]["template"]["metadata"]["labels"] for d in of_kind(docs, "Deployment")}
    pods |= {component(s): s["spec"]["template"]["metadata"]["labels"] for s in of_kind(docs, "StatefulSet")}
    policies = {component(p): p for p in of_kind(docs, "NetworkPolicy") if component(p) in ("redis", "redis-sentinel")}
    for target, port in (("redis", 6379), ("redis-sentinel", 26379)):
        spec = policies[target]["spec"]
        assert spec["podSelector"]["matchLabels"].items() <= pods[target].items()
        [rule] = spec["ingress"]
        assert rule["ports"] == [{"port": port, "protocol": "TCP"}]
        admitted = {
            name
            for peer in rule["from"]
            for name, labels in pods.items()
            if peer["podSelector"]["matchLabels"].items() <= labels.items()
        }
        assert admitted == PEERS
        assert not set(SERVICES) - {"scheduler", "binder"} & admitted  # not the queue


@needs_helm
def test_an_external_sentinel_deployment_is_named_to_the_services(tmp_path: Path) -> None:
    docs = helm_template(tmp_path, EXTERNAL)
    assert not of_kind(docs, "StatefulSet")
    for svc in ("scheduler", "binder"):
        env = service_env(docs, svc)
        assert env["PHALANX_REDIS_SENTINELS"]["value"] == "sentinel-a.data.svc:26379,sentinel-b.data.svc:26379"
        assert env["PHALANX_REDIS_MASTER_NAME"]["value"] == "jobs"
        assert env["PHALANX_REDIS_CA_FILE"]["value"] == "/etc/phalanx/redis-ca/ca.crt"
        assert "PHALANX_REDIS_URL" not in env


@needs_helm
@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"redis": {"sentinel": {"enabled": True}, "tls": {"enabled": True}}}, "redis.sentinel.enabled: the bundled"),
        ({"redis": {"sentinel": {"enabled": True, "quorum": 4}}}, "redis.sentinel.quorum cannot exceed"),
        ({"redis": {"sentinel": {"external": "no-port"}}}, "external"),
    ],
)
def test_sentinel_values_that_cannot_work_are_refused(values: dict[str, Any], message: str, tmp_path: Path) -> None:
    out = _run([find_helm() or "helm", "template", "p", str(CHART), *helm_values_args(values, tmp_path)])
    assert out.returncode != 0 and message in out.stderr, out.stderr
