"""phalanx.kube.connection: kubeconfigs and the pod's service account, read without the kubernetes client."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from phalanx.kube import connection
from phalanx.kube.connection import KubeconfigError, connect, in_cluster, load_kubeconfig
from phalanx.security.certs import issue, new_ca


def kubeconfig(path: Path, cluster: dict[str, Any], user: dict[str, Any], **top: Any) -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
        **top,
    }
    path.write_text(json.dumps(doc))  # JSON is YAML
    return str(path)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_a_kubeconfig_with_a_token_and_inline_tls_files(tmp_path: Path) -> None:
    ca = new_ca("k8s-test")
    client = issue(ca, "alice")
    conn = connect(
        kubeconfig(
            tmp_path / "kc",
            {
                "server": "https://10.0.0.1:6443/",
                "certificate-authority-data": b64(ca.cert_pem),
                "tls-server-name": "api",
            },
            {
                "token": "s3cret",
                "client-certificate-data": b64(client.cert_pem),
                "client-key-data": b64(client.key_pem),
            },
        )
    )
    assert conn.host == "https://10.0.0.1:6443"
    assert conn.authorization() == "Bearer s3cret"
    assert conn.verify_ssl and conn.tls_server_name == "api"
    assert conn.ssl_ca_cert and Path(conn.ssl_ca_cert).read_bytes() == ca.cert_pem
    assert conn.cert_file and Path(conn.cert_file).read_bytes() == client.cert_pem
    assert conn.key_file and Path(conn.key_file).read_bytes() == client.key_pem
    assert Path(conn.key_file).stat().st_mode & 0o077 == 0, "a key written out is the user's alone"


def test_file_paths_are_relative_to_the_kubeconfig_and_a_token_file_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = new_ca("k8s-test")
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    (tmp_path / "token").write_text("first\n")
    monkeypatch.setattr(connection, "TOKEN_FILE_RECHECK_S", 0.0)
    elsewhere = tmp_path / "run"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    conn = load_kubeconfig(
        kubeconfig(
            tmp_path / "kc",
            {"server": "https://h:1", "certificate-authority": "ca.crt", "insecure-skip-tls-verify": False},
            {"tokenFile": "token"},
        )
    )
    assert conn.ssl_ca_cert == str(tmp_path / "ca.crt")
    assert conn.authorization() == "Bearer first"
    (tmp_path / "token").write_text("rotated")
    assert conn.authorization() == "Bearer rotated", "a rotated token is used"


def test_insecure_and_plain_http(tmp_path: Path) -> None:
    insecure = load_kubeconfig(
        kubeconfig(tmp_path / "a", {"server": "https://h:1", "insecure-skip-tls-verify": True}, {})
    )
    assert not insecure.verify_ssl and insecure.authorization() == ""
    plain = load_kubeconfig(kubeconfig(tmp_path / "b", {"server": "http://127.0.0.1:8080"}, {"token": "t"}))
    assert plain.ssl_ca_cert is None and plain.cert_file is None


@pytest.mark.parametrize(
    "change, message",
    [
        ({"current-context": ""}, "current-context is not set"),
        ({"current-context": "nope"}, "contexts has no entry named 'nope'"),
        ({"clusters": [{"name": "c", "cluster": {}}]}, "cluster 'c' has no server"),
        ({"clusters": [{"name": "other", "cluster": {"server": "https://h"}}]}, "clusters has no entry named 'c'"),
        (
            {"clusters": [{"name": "c", "cluster": {"server": "https://h", "certificate-authority-data": "%%"}}]},
            "certificate-authority-data is not base64",
        ),
        (
            {"clusters": [{"name": "c", "cluster": {"server": "https://h", "certificate-authority": "missing.crt"}}]},
            "certificate-authority",
        ),
        (
            {"clusters": [{"name": "c", "cluster": {"server": "https://h", "insecure-skip-tls-verify": "yes"}}]},
            "insecure-skip-tls-verify must be true or false",
        ),
        (
            {"users": [{"name": "u", "user": {"tokenFile": "/no/such/token"}}]},
            "tokenFile '/no/such/token' does not exist",
        ),
        ({"contexts": [{"name": "x", "context": "c"}]}, "contexts entry 'x' has no context mapping"),
    ],
)
def test_a_bad_kubeconfig_names_the_file_and_the_field(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    path = kubeconfig(tmp_path / "kc", {"server": "https://h:1"}, {"token": "t"}, **change)
    with pytest.raises(KubeconfigError) as err:
        load_kubeconfig(path)
    assert str(tmp_path / "kc") in str(err.value) and message in str(err.value)


def test_broken_yaml_and_a_missing_file_are_named(tmp_path: Path) -> None:
    (tmp_path / "kc").write_text("clusters: [unclosed\n")
    with pytest.raises(KubeconfigError, match="not YAML"):
        load_kubeconfig(str(tmp_path / "kc"))
    with pytest.raises(KubeconfigError, match="cannot be read"):
        load_kubeconfig(str(tmp_path / "absent"))


@pytest.mark.starts_processes
def test_an_exec_credential_plugin_goes_to_the_kubernetes_clients_loader(tmp_path: Path) -> None:
    """The client's loader runs the plugin (a real process here) and its token is what the connection sends."""
    plugin = tmp_path / "cred.py"
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": "from-exec"},
    }
    plugin.write_text(f"import json\nprint(json.dumps({credential!r}))\n")
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(plugin)],
            "interactiveMode": "Never",
        }
    }
    conn = load_kubeconfig(kubeconfig(tmp_path / "kc", {"server": "http://127.0.0.1:1"}, user))
    assert conn.host == "http://127.0.0.1:1"
    assert conn.authorization() == "Bearer from-exec"


def test_in_a_pod_the_service_account_is_read_and_its_rotated_token_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    account = tmp_path / "sa"
    account.mkdir()
    (account / "token").write_text("one")
    (account / "ca.crt").write_bytes(new_ca("k8s").cert_pem)
    monkeypatch.setattr(connection, "TOKEN_FILE_RECHECK_S", 0.0)
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    conn = in_cluster(env, account)
    assert conn.host == "https://[fd00::1]:443" and conn.ssl_ca_cert == str(account / "ca.crt")
    assert conn.authorization() == "Bearer one"
    (account / "token").write_text("two")
    assert conn.authorization() == "Bearer two"
    with pytest.raises(KubeconfigError, match="KUBERNETES_SERVICE_HOST"):
        in_cluster({}, account)
    (account / "token").write_text("")
    with pytest.raises(KubeconfigError, match="token is missing or empty"):
        in_cluster(env, account)


def test_a_process_makes_its_connection_once(tmp_path: Path) -> None:
    """The scheduler's feed and its Lease share one connection (one pool; inline keys written out once)."""
    from argparse import Namespace

    from phalanx.kube.connection import connection_of

    args = Namespace(kubeconfig=kubeconfig(tmp_path / "kc", {"server": "https://h:1"}, {"token": "t"}))
    first = connection_of(args)
    assert connection_of(args) is first and first.authorization() == "Bearer t"
