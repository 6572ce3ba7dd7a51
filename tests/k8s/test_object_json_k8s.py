"""The watches' lean decoding (kube/object_json.py) on what a real kube-apiserver writes: pods, nodes and
PodGroups carrying managedFields from several managers (a create, a status patch, a binding) decode, in list
pages and watch events, to exactly what the general decoder gives once managedFields is dropped."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Cluster

from phalanx import fast_json
from phalanx.kube.api import KubeApi
from phalanx.kube.object_json import decode_event, decode_page, trim
from phalanx.kube.podgroups import VERSIONS
from phalanx.testing.apiserver import APISERVER_MISSING_REASON, LocalApiServer, apiserver_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not apiserver_available(), reason=APISERVER_MISSING_REASON),
]

GROUP = "scheduling.x-k8s.io"


def _whole(data: bytes, key: str) -> Any:
    body = fast_json.loads(data)
    for obj in body["items"] if key == "items" else [body["object"]]:
        trim(obj)
    return body


def _objects(cluster: Cluster, ns: str) -> None:
    node = cluster.node("n")  # created, then its status patched: two managers
    cluster.podgroup(GROUP, ns, "g", 2, annotations={"note": '"managedFields":[]},"spec":{'})
    cluster.custom.patch_namespaced_custom_object_status(
        GROUP, VERSIONS[GROUP], ns, "podgroups", "g", {"status": {"phase": "Pending"}}
    )
    for name in ("a", "b"):
        cluster.pod(ns, name)
    cluster.bind(ns, "a", node)
    cluster.set_phase(ns, "a", "Running")


def test_lists_and_watch_events_decode_to_the_general_values(apiserver: LocalApiServer, cluster: Cluster) -> None:
    api = KubeApi(apiserver.api_client())
    ns = cluster.namespace()
    before = fast_json.loads(api.list_namespaced_pod(ns).data)["metadata"]["resourceVersion"]
    _objects(cluster, ns)

    lists = [
        ("Pod", lambda **kw: api.list_namespaced_pod(ns, **kw)),
        ("Node", lambda **kw: api.list_node(**kw)),
        ("PodGroup", lambda **kw: api.list_cluster_custom_object(GROUP, VERSIONS[GROUP], "podgroups", **kw)),
    ]
    for kind, list_fn in lists:
        data = list_fn().data
        assert b'"managedFields"' in data, kind  # the server wrote them: the test decodes something
        page = decode_page(data, kind)
        assert page == _whole(data, "items"), kind
        assert page["items"] and all("managedFields" not in o["metadata"] for o in page["items"]), kind

    # Every change since `before`: ADDED, MODIFIED (the binding, the phase), then the watch's own end.
    resp = api.list_namespaced_pod(ns, watch=True, resource_version=before, timeout_seconds=2, _request_timeout=30)
    lines = [line for line in resp.data.split(b"\n") if line.strip()]
    assert len(lines) >= 4
    kinds = []
    for line in lines:
        event = decode_event(line, "Pod")
        assert event == _whole(line, "object")
        assert "managedFields" not in event["object"]["metadata"]
        kinds.append(event["type"])
    assert kinds.count("ADDED") == 2 and "MODIFIED" in kinds
