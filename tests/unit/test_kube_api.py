"""phalanx.kube.api.KubeApi: the requests the generated client would have sent, without its generated API
classes (whose import dominated the services' start-up)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from phalanx.kube.api import MERGE_PATCH, KubeApi
from phalanx.kube.connection import KubeConnection
from phalanx.kube.errors import ApiError


class Recorder:
    """Stands in for the connection's urllib3 pool: records each request, answers `status`."""

    def __init__(self, status: int = 200, body: bytes = b"{}") -> None:
        self.status, self.body = status, body
        self.calls: list[dict[str, Any]] = []

    def request(self, method: str, url: str, body: Any = None, headers: Any = None, **kw: Any) -> Any:
        self.calls.append({"method": method, "url": url, "headers": dict(headers or {}), "body": body, **kw})
        return SimpleNamespace(
            status=self.status, reason="R", data=self.body, read=lambda: self.body, headers={"X": "1"}
        )


def api(status: int = 200, token: str = "") -> tuple[KubeApi, Recorder]:
    conn = KubeConnection("https://k8s.test:6443/", authorization=(lambda: f"Bearer {token}") if token else None)
    rec = Recorder(status)
    conn._pool = rec
    return KubeApi(conn), rec


def test_a_watch_is_sent_as_the_generated_list_would_send_it() -> None:
    k, rec = api(token="t0k")
    resp = k.list_pod_for_all_namespaces(
        field_selector="spec.schedulerName=x",
        watch=True,
        resource_version="42",
        allow_watch_bookmarks=True,
        timeout_seconds=300,
        _preload_content=False,
        _request_timeout=(10, 330),
    )
    [call] = rec.calls
    assert call["method"] == "GET"
    assert call["url"] == (
        "https://k8s.test:6443/api/v1/pods?fieldSelector=spec.schedulerName%3Dx&watch=true&resourceVersion=42"
        "&allowWatchBookmarks=true&timeoutSeconds=300"
    )
    assert call["headers"]["Accept"] == "application/json"
    assert call["headers"]["Authorization"] == "Bearer t0k", "the connection's token applies"
    assert (call["timeout"].connect_timeout, call["timeout"].read_timeout) == (10, 330)
    assert call["preload_content"] is False
    assert resp.data == b"{}", "the raw answer, as with _preload_content=False"


def test_writes_carry_their_body_and_content_type() -> None:
    k, rec = api()
    k.create_namespaced_pod_binding("p/1", "ns", {"target": {"name": "n"}}, _request_timeout=15)
    k.patch_namespaced_custom_object_status(
        "scheduling.x-k8s.io", "v1alpha1", "ns", "podgroups", "g", {"status": {}}, _content_type=MERGE_PATCH
    )
    k.patch_namespaced_pod_status("p", "ns", {"status": {}})
    k.delete_namespaced_pod("p", "ns", body={"preconditions": {"uid": "u"}})
    k.replace_namespaced_lease("l", "ns", {"spec": {}})
    bind, pg, status, delete, lease = rec.calls
    assert (bind["method"], bind["url"]) == ("POST", "https://k8s.test:6443/api/v1/namespaces/ns/pods/p%2F1/binding")
    assert bind["headers"]["Content-Type"] == "application/json"
    assert json.loads(bind["body"]) == {"target": {"name": "n"}}
    assert bind["timeout"].total == 15
    assert pg["url"].endswith("/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ns/podgroups/g/status")
    assert (pg["method"], pg["headers"]["Content-Type"]) == ("PATCH", MERGE_PATCH)
    assert status["headers"]["Content-Type"] == "application/strategic-merge-patch+json", "the generated default"
    assert delete["method"] == "DELETE" and json.loads(delete["body"]) == {"preconditions": {"uid": "u"}}
    assert (lease["method"], lease["url"]) == (
        "PUT",
        "https://k8s.test:6443/apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
    )


def test_an_error_answer_raises_api_error_with_its_status_and_body() -> None:
    k, rec = api(status=409)
    rec.body = json.dumps({"message": "conflict"}).encode()
    with pytest.raises(ApiError) as exc:
        k.read_namespaced_pod("p", "ns")
    assert exc.value.status == 409
    assert json.loads(exc.value.body or "")["message"] == "conflict" and exc.value.headers == {"X": "1"}


def test_a_kubernetes_api_client_is_taken_for_its_configuration() -> None:
    """Tests and tools hand KubeApi the client's ApiClient: its host, TLS files and token are used."""
    from kubernetes.client import ApiClient, Configuration

    config = Configuration(host="https://k8s.test:6443")
    config.api_key = {"authorization": "t0k"}
    config.api_key_prefix = {"authorization": "Bearer"}
    k = KubeApi(ApiClient(config))
    rec = Recorder()
    k.connection._pool = rec
    k.read_node("n1")
    [call] = rec.calls
    assert call["url"] == "https://k8s.test:6443/api/v1/nodes/n1"
    assert call["headers"]["Authorization"] == "Bearer t0k"


def test_what_it_cannot_send_as_the_generated_client_would_is_refused() -> None:
    k, _ = api()
    with pytest.raises(TypeError):
        k.list_node(pretty="true")
    with pytest.raises(ValueError):
        k.list_node(_preload_content=True)
    with pytest.raises(ValueError):
        k.read_namespaced_pod("", "ns")


@pytest.mark.starts_processes
def test_the_services_kubernetes_paths_do_not_load_the_kubernetes_client(tmp_path: Path) -> None:
    """Importing any of the kubernetes package loads the whole client (19 MiB, 0.2-0.3 s of CPU in each of
    the binder and the scheduler at start-up; kube/errors.py). The binder's backend, the feed's collections,
    the Lease, a pod's parse and a kubeconfig with a token and a CA do not."""
    import base64

    from phalanx.security.certs import new_ca

    ca = base64.b64encode(new_ca("k8s-test").cert_pem).decode()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": "https://127.0.0.1:1",
                            "certificate-authority-data": ca,
                        },
                    }
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    code = f"""
import sys
from phalanx.backends.kubernetes import KubernetesBackend
from phalanx.cluster.sources import collections
from phalanx.cluster.leader import ElectionConfig, LeaderElector
from phalanx.intake.pods import parse_pod
from phalanx.kube.api import KubeApi
from phalanx.kube.connection import connect
conn = connect({str(kubeconfig)!r})
assert conn.authorization() == "Bearer t" and conn.ssl_ca_cert
backend = KubernetesBackend(conn)
sources = collections(conn)
elector = LeaderElector(KubeApi(conn), ElectionConfig("ns", "l", "me_1"), on_started_leading=print, on_stopped_leading=print)
pod = {{"metadata": {{"name": "p", "namespace": "ns", "uid": "u"}}, "spec": {{"containers": [{{"name": "c", "resources": {{"requests": {{"cpu": "100m", "memory": "1Gi"}}}}}}]}}}}
parse_pod(pod)
backend.close()
print(sorted(m for m in sys.modules if m.split(".")[0] == "kubernetes"))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout
