"""Paginated initial lists on a real kube-apiserver: a collection larger than the page size is listed in
several pages, every object is delivered once and the watch then continues from the snapshot; a continue
token that expires between two pages (etcd compacted meanwhile, on an API server without its watch cache)
lists again whole, delivering only what differs from the pages already delivered."""

from __future__ import annotations

import base64
import json
import threading
import urllib.request
from collections import Counter
from typing import Any

import pytest
from waiting import wait_for

from phalanx.kube.api import KubeApi
from phalanx.kube.watch import Collection, Watcher
from phalanx.testing.apiserver import APISERVER_MISSING_REASON, LocalApiServer, apiserver_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not apiserver_available(), reason=APISERVER_MISSING_REASON),
]

PODS = 120
LIMIT = 50


class Recorded:
    """KubeApi.list_namespaced_pod, remembering each list request's arguments; `after_first_page` runs once
    the first page of the first list has been answered."""

    def __init__(self, api: KubeApi, after_first_page: Any = None) -> None:
        self.api = api
        self.lists: list[dict[str, Any]] = []
        self.after_first_page = after_first_page

    def __call__(self, namespace: str, **kwargs: Any) -> Any:
        if not kwargs.get("watch"):
            self.lists.append({k: v for k, v in kwargs.items() if k in ("limit", "_continue")})
        resp = self.api.list_namespaced_pod(namespace, **kwargs)
        if self.after_first_page is not None and len(self.lists) == 1:
            resp.data  # (read before the world changes)
            self.after_first_page()
        return resp


def _pod(name: str) -> dict[str, Any]:
    spec = {"schedulerName": "nobody", "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}
    return {"metadata": {"name": name}, "spec": spec}


def _setup(apiserver: LocalApiServer, ns: str) -> Any:
    from kubernetes import client

    core: Any = client.CoreV1Api(apiserver.api_client())
    core.create_namespace({"metadata": {"name": ns}})
    for i in range(PODS):
        core.create_namespaced_pod(ns, _pod(f"p{i:03}"), _preload_content=False)
    return core


def _watch(
    apiserver: LocalApiServer, ns: str, after_first_page: Any = None
) -> tuple[Watcher, Recorded, Counter[tuple[str, str]], threading.Event]:
    recorded = Recorded(KubeApi(apiserver.api_client()), after_first_page)
    seen: Counter[tuple[str, str]] = Counter()
    stop = threading.Event()
    watcher = Watcher(
        Collection("pods", recorded, "Pod", "v1", args=(ns,)),
        lambda c, kind, o: seen.update([(kind, o["metadata"]["name"])]),
        stop,
        limit=LIMIT,
    ).start()
    return watcher, recorded, seen, stop


def test_a_list_larger_than_the_page_size_comes_in_pages_each_object_once(apiserver: LocalApiServer) -> None:
    ns = "paginated-list"
    core = _setup(apiserver, ns)
    watcher, recorded, seen, stop = _watch(apiserver, ns)
    try:
        wait_for(watcher.synced.is_set, 30, "the paginated list")
        assert recorded.lists[:3] == [
            {"limit": LIMIT},
            {"limit": LIMIT, "_continue": recorded.lists[1].get("_continue")},
            {"limit": LIMIT, "_continue": recorded.lists[2].get("_continue")},
        ]
        assert len(recorded.lists) == 3 and all(c.get("_continue") for c in recorded.lists[1:])
        assert watcher.pages == 3
        assert seen == Counter({("ADDED", f"p{i:03}"): 1 for i in range(PODS)})
        core.create_namespaced_pod(ns, _pod("later"), _preload_content=False)  # the watch took over
        wait_for(lambda: seen[("ADDED", "later")] == 1, 30, "the watch's ADDED")
        assert sum(seen.values()) == PODS + 1
    finally:
        stop.set()
        watcher.interrupt()
        watcher.join(5)


def _etcd(apiserver: LocalApiServer, call: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(f"{apiserver.etcd_url}/v3/{call}", data=json.dumps(body).encode())
    with urllib.request.urlopen(request, timeout=10) as resp:
        out: dict[str, Any] = json.loads(resp.read())
        return out


@pytest.fixture(scope="module")
def etcd_served() -> Any:
    """An API server without its watch cache: continue tokens are served by etcd, which can forget them (the
    cache keeps its own snapshots, which an etcd compaction does not expire)."""
    with LocalApiServer(extra_apiserver_args=["--watch-cache=false"]) as server:
        yield server


def test_an_expired_continue_lists_again_and_delivers_only_the_difference(etcd_served: LocalApiServer) -> None:
    apiserver = etcd_served
    ns = "paginated-expired"
    core = _setup(apiserver, ns)

    def change_and_compact() -> None:
        """Between the first and second pages: one pod goes, one comes, and etcd forgets every earlier
        revision, so the first page's continue token can no longer be served."""
        core.delete_namespaced_pod("p000", ns, grace_period_seconds=0)
        core.create_namespaced_pod(ns, _pod("new"), _preload_content=False)
        revision = _etcd(apiserver, "kv/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"]
        _etcd(apiserver, "kv/compaction", {"revision": revision, "physical": True})

    watcher, recorded, seen, stop = _watch(apiserver, ns, change_and_compact)
    try:
        wait_for(watcher.synced.is_set, 30, "the list")
        assert recorded.lists[:2] == [{"limit": LIMIT}, {"limit": LIMIT, "_continue": recorded.lists[1]["_continue"]}]
        assert recorded.lists[2:] == [{}], recorded.lists  # expired: listed again, whole
        # The first page was delivered as it arrived (p000 with it); the whole re-list adds what the first
        # page did not have, and deletes p000, gone by then. Nothing is delivered twice.
        final = {f"p{i:03}" for i in range(1, PODS)} | {"new"}
        assert seen == Counter({("ADDED", name): 1 for name in final | {"p000"}} | {("DELETED", "p000"): 1})
    finally:
        stop.set()
        watcher.interrupt()
        watcher.join(5)


def test_a_watcher_stopped_while_its_watch_is_asked_for_ends(apiserver: LocalApiServer) -> None:
    # interrupt() shuts the socket of a watch already open; a stop that comes while the watch request is on
    # its way (after the list, say) found none, and the watch then waited for an event or its timeout (5
    # minutes) before the thread saw the stop. The watch now looks at the stop once it has its answer.
    from kubernetes import client

    ns = "watch-stopped"
    core: Any = client.CoreV1Api(apiserver.api_client())
    core.create_namespace({"metadata": {"name": ns}})
    api = KubeApi(apiserver.api_client())
    stop = threading.Event()

    def list_then_stop(namespace: str, **kwargs: Any) -> Any:
        if kwargs.get("watch"):  # stopped while this watch request is made: interrupt() finds no socket yet
            stop.set()
            watcher.interrupt()
        return api.list_namespaced_pod(namespace, **kwargs)

    watcher = Watcher(Collection("pods", list_then_stop, "Pod", "v1", args=(ns,)), lambda c, k, o: None, stop)
    watcher.start()
    watcher.join(10)
    assert watcher._thread is not None and not watcher._thread.is_alive(), "the stopped watcher still waits"
