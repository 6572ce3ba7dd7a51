"""docker-compose.sentinel.yml: the chart's Sentinel shape for development (a primary, 2 replicas and 3
Sentinels, the scheduler and the binder finding the primary through them)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_deploy_artifacts import compose_config, find_compose

REPO = Path(__file__).resolve().parents[2]
FILE = REPO / "docker-compose.sentinel.yml"
DATA_NODES = ("redis", "redis-replica-1", "redis-replica-2")
SENTINELS = ("sentinel-1", "sentinel-2", "sentinel-3")
ADDRESSES = "sentinel-1:26379,sentinel-2:26379,sentinel-3:26379"


def services() -> dict[str, Any]:
    return dict(yaml.safe_load(FILE.read_text())["services"])  # anchors and merge keys resolved


def test_the_override_adds_replicas_and_sentinels_with_the_password() -> None:
    s = services()
    assert set(DATA_NODES + SENTINELS) <= set(s)
    for name in DATA_NODES + SENTINELS:
        svc = s[name]
        assert svc["environment"]["NODE"] == name  # what it announces itself as
        script = svc["command"][2].replace("$$", "$")  # compose's escape of a literal $
        assert subprocess.run(["sh", "-n", "-c", script]).returncode == 0, f"{name}: the script does not parse"
        assert 'PW="$(cat /etc/redis/auth/password)"' in script and "requirepass" in script
        assert "--requirepass" not in script and " -a " not in script
        [auth] = [v for v in svc["volumes"] if v["target"] == "/etc/redis/auth"]
        assert (auth["source"], auth["read_only"]) == ("redis-auth", True)
        assert "REDISCLI_AUTH" in " ".join(svc["healthcheck"]["test"])
    for name in DATA_NODES:
        script = s[name]["command"][2]
        assert "masterauth" in script and "min-replicas-to-write 1" in script
        assert "get-master-addr-by-name phalanx" in script  # a restarted primary rejoins as a replica
    for name in SENTINELS:
        script = s[name]["command"][2]
        assert "--sentinel" in script and "sentinel monitor phalanx redis 6379 2" in script
        assert "sentinel auth-pass" in script and "sentinel sentinel-pass" in script
    for name in ("scheduler", "binder"):
        env = s[name]["environment"]
        assert env == {"PHALANX_REDIS_SENTINELS": ADDRESSES, "PHALANX_REDIS_MASTER_NAME": "phalanx"}
        assert set(s[name]["depends_on"]) == set(SENTINELS)


@pytest.mark.skipif(find_compose()[0] is None, reason=find_compose()[1])
def test_compose_merges_the_override_onto_the_stack() -> None:
    cfg = compose_config("docker-compose.yml", "docker-compose.sentinel.yml")
    merged = cfg["services"]
    for name in ("scheduler", "binder"):
        env = merged[name]["environment"]
        assert env["PHALANX_REDIS_SENTINELS"] == ADDRESSES and env["PHALANX_REDIS_MASTER_NAME"] == "phalanx"
        assert env["PHALANX_REDIS_PASSWORD_FILE"] == "/etc/phalanx/redis-auth/password"
        assert {k: v["condition"] for k, v in merged[name]["depends_on"].items() if k.startswith("sentinel")} == {
            s: "service_healthy" for s in SENTINELS
        }
