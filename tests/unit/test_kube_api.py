"""phalanx.kube.api.KubeApi: the requests the generated client would have sent, without its generated API
classes (whose import dominated the services' start-up)."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.rest import ApiException

from phalanx.kube.api import MERGE_PATCH, KubeApi


class Recorder:
    """Stands in for the ApiClient's REST client: records each request, answers `status`."""

    def __init__(self, status: int = 200, body: bytes = b"{}") -> None:
        self.status, self.body = status, body
        self.calls: list[dict[str, Any]] = []

    def request(self, method: str, url: str, headers: Any = None, body: Any = None, **kw: Any) -> Any:
        self.calls.append({"method": method, "url": url, "headers": dict(headers or {}), "body": body, **kw})
        raw = SimpleNamespace(status=self.status, reason="R", data=self.body, headers={})
        return SimpleNamespace(
            response=raw, status=self.status, reason="R", data=None, read=lambda: self.body, headers={}
        )


def api(status: int = 200, token: str = "") -> tuple[KubeApi, Recorder]:
    config = Configuration(host="https://k8s.test:6443")
    if token:
        config.api_key = {"authorization": token}
        config.api_key_prefix = {"authorization": "Bearer"}
    client = ApiClient(config)
    rec = Recorder(status)
    client.rest_client = rec  # type: ignore[assignment]
    return KubeApi(client), rec


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
    assert call["headers"]["authorization"] == "Bearer t0k", "the BearerToken auth setting applies"
    assert call["_request_timeout"] == (10, 330)
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
    assert bind["headers"]["Content-Type"] == "application/json" and bind["body"] == {"target": {"name": "n"}}
    assert pg["url"].endswith("/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ns/podgroups/g/status")
    assert (pg["method"], pg["headers"]["Content-Type"]) == ("PATCH", MERGE_PATCH)
    assert status["headers"]["Content-Type"] == "application/strategic-merge-patch+json", "the generated default"
    assert delete["method"] == "DELETE" and delete["body"] == {"preconditions": {"uid": "u"}}
    assert (lease["method"], lease["url"]) == (
        "PUT",
        "https://k8s.test:6443/apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
    )


def test_an_error_answer_raises_api_exception_with_its_status() -> None:
    k, rec = api(status=409)
    rec.body = json.dumps({"message": "conflict"}).encode()
    with pytest.raises(ApiException) as exc:
        k.read_namespaced_pod("p", "ns")
    assert exc.value.status == 409


def test_what_it_cannot_send_as_the_generated_client_would_is_refused() -> None:
    k, _ = api()
    with pytest.raises(TypeError):
        k.list_node(pretty="true")
    with pytest.raises(ValueError):
        k.list_node(_preload_content=True)
    with pytest.raises(ValueError):
        k.read_namespaced_pod("", "ns")


@pytest.mark.starts_processes
def test_the_services_kubernetes_paths_do_not_import_the_generated_api_classes() -> None:
    """Importing kubernetes.client.CoreV1Api builds some 250 pydantic models: most of a second of each
    service's start on 2 shared cores. The binder's backend, the feed's collections and the Lease do not."""
    code = """
import sys
from phalanx.backends.kubernetes import KubernetesBackend
from phalanx.cluster.feed import collections
from phalanx.cluster.leader import ElectionConfig, LeaderElector
from phalanx.kube.api import KubeApi
backend = KubernetesBackend(None)
sources = collections(None)
elector = LeaderElector(KubeApi(None), ElectionConfig("ns", "l", "me_1"), on_started_leading=print, on_stopped_leading=print)
backend.close()
print(sorted(m for m in sys.modules if m.startswith("kubernetes.client.api.") or m.startswith("kubernetes.client.models.")))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout
