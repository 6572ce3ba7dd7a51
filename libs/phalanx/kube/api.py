"""The API calls the services make, as the kubernetes client's generated API classes would send them, without
that client.

The client's generated API modules are pydantic code: importing `kubernetes.client.CoreV1Api` builds some 250
model classes (0.4-0.7 s of CPU on this project's 2-core VM, in each of the binder and the scheduler, at
start-up, when the three services start together on the same cores), and every call is validated by
pydantic before it is sent; importing any part of the package loads the rest of the client (kube/errors.py).
Phalanx never uses the models: it sends plain dicts and reads the raw JSON. `KubeApi` makes the same requests
as the generated methods of the same names and arguments (path, query, Accept and Content-Type, the bearer
token) through a `KubeConnection` (kube/connection.py: a urllib3 pool), and answers as they do with
`_preload_content=False`: the urllib3 response on 2xx, `ApiError` (status, reason, body, headers: the
attributes of the client's ApiException) otherwise.

Only the calls Phalanx makes are here; each takes the keyword arguments it is given (`_request_timeout`,
`_content_type`, the query parameters below), and refuses others, so a call that would have been sent
differently fails loudly instead.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from phalanx import fast_json
from phalanx.kube.connection import KubeConnection
from phalanx.kube.errors import from_response

if TYPE_CHECKING:
    from phalanx.kube.pipeline import Pipeline, Request

JSON = "application/json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"

_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})

# The generated methods' query parameters Phalanx uses, by their Python names.
QUERY = {
    "field_selector": "fieldSelector",
    "label_selector": "labelSelector",
    "resource_version": "resourceVersion",
    "allow_watch_bookmarks": "allowWatchBookmarks",
    "timeout_seconds": "timeoutSeconds",
    "watch": "watch",
    "limit": "limit",
    "_continue": "continue",
}


class KubeApi:
    """CoreV1Api, PolicyV1Api, CustomObjectsApi and CoordinationV1Api, for the calls Phalanx makes (see the
    module docstring). `connection`: a KubeConnection (kube/connection.py), or a kubernetes ApiClient (tests,
    tools: its configuration is used); None: the kubernetes client's default configuration."""

    def __init__(self, connection: Any = None, pipeline: Pipeline | None = None) -> None:
        self.connection = KubeConnection.of(connection)
        # Writes (POST, PUT, PATCH, DELETE) go through `pipeline` when given (kube/pipeline.py: many in one
        # TLS write); reads, lists and watches always through the connection's pool.
        self.pipeline = pipeline

    def send(self, method: str, path: str, body: Any, content_type: str | None = None) -> Future[Any]:
        """A write through the pipeline, not waited for: the future's result is the answer (any status)."""
        if self.pipeline is None:
            raise RuntimeError("KubeApi.send needs a pipeline")
        return self.pipeline.submit(_pipelined(method, path, body, content_type))

    def send_pod_binding(self, name: str, namespace: str, body: Any) -> Future[Any]:
        """create_namespaced_pod_binding's request, through the pipeline, not waited for."""
        return self.send("POST", f"{_pod(namespace, name)}/binding", body)

    def send_event(self, namespace: str, body: Any) -> Future[Any]:
        """create_namespaced_event's request, through the pipeline, not waited for."""
        return self.send("POST", _events(namespace), body)

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str | None = None,
        request_timeout: Any = None,
        preload_content: bool = False,
        **params: Any,
    ) -> Any:
        """One request to `path` (already holding its path parameters, which must be URL-safe names);
        `params`: query parameters by their generated Python names (QUERY)."""
        if preload_content:
            raise ValueError("KubeApi answers raw (as _preload_content=False): read the response's .data")
        if self.pipeline is not None and method in _WRITES and not params:
            reply = self.pipeline.call(_pipelined(method, path, body, content_type))
            raise_for_status(reply)
            return reply
        query = []
        for name, value in params.items():
            if name not in QUERY:
                raise TypeError(f"KubeApi: unexpected argument {name!r} for {method} {path}")
            if value is not None:
                query.append((QUERY[name], value))
        headers = {"Accept": JSON}
        if body is not None or method in ("POST", "PUT", "PATCH"):
            headers["Content-Type"] = content_type or JSON
        data = None if body is None else fast_json.dumps_bytes(body)
        resp = self.connection.request(method, path, query=query, headers=headers, body=data, timeout=request_timeout)
        if not 200 <= resp.status <= 299:
            resp.read()
            raise_for_status(resp)
        return resp

    # -- core/v1 -------------------------------------------------------------------------------------------
    def list_node(self, *, _preload_content: bool = False, _request_timeout: Any = None, **params: Any) -> Any:
        return self.request(
            "GET", "/api/v1/nodes", request_timeout=_request_timeout, preload_content=_preload_content, **params
        )

    def read_node(self, name: str, *, _preload_content: bool = False, _request_timeout: Any = None) -> Any:
        return self.request(
            "GET", f"/api/v1/nodes/{_seg(name)}", request_timeout=_request_timeout, preload_content=_preload_content
        )

    def list_pod_for_all_namespaces(
        self, *, _preload_content: bool = False, _request_timeout: Any = None, **params: Any
    ) -> Any:
        return self.request(
            "GET", "/api/v1/pods", request_timeout=_request_timeout, preload_content=_preload_content, **params
        )

    def list_namespaced_pod(
        self, namespace: str, *, _preload_content: bool = False, _request_timeout: Any = None, **params: Any
    ) -> Any:
        return self.request(
            "GET",
            f"/api/v1/namespaces/{_seg(namespace)}/pods",
            request_timeout=_request_timeout,
            preload_content=_preload_content,
            **params,
        )

    def list_config_map_for_all_namespaces(
        self, *, _preload_content: bool = False, _request_timeout: Any = None, **params: Any
    ) -> Any:
        return self.request(
            "GET", "/api/v1/configmaps", request_timeout=_request_timeout, preload_content=_preload_content, **params
        )

    def read_namespaced_pod(
        self, name: str, namespace: str, *, _preload_content: bool = False, _request_timeout: Any = None
    ) -> Any:
        return self.request(
            "GET", _pod(namespace, name), request_timeout=_request_timeout, preload_content=_preload_content
        )

    def patch_namespaced_pod(
        self,
        name: str,
        namespace: str,
        body: Any,
        *,
        _content_type: str | None = None,
        _preload_content: bool = False,
        _request_timeout: Any = None,
    ) -> Any:
        return self.request(
            "PATCH",
            _pod(namespace, name),
            body=body,
            content_type=_content_type or STRATEGIC_MERGE_PATCH,
            request_timeout=_request_timeout,
            preload_content=_preload_content,
        )

    def patch_namespaced_pod_status(
        self,
        name: str,
        namespace: str,
        body: Any,
        *,
        _content_type: str | None = None,
        _preload_content: bool = False,
        _request_timeout: Any = None,
    ) -> Any:
        return self.request(
            "PATCH",
            f"{_pod(namespace, name)}/status",
            body=body,
            content_type=_content_type or STRATEGIC_MERGE_PATCH,
            request_timeout=_request_timeout,
            preload_content=_preload_content,
        )

    def delete_namespaced_pod(
        self,
        name: str,
        namespace: str,
        body: Any = None,
        *,
        _preload_content: bool = False,
        _request_timeout: Any = None,
    ) -> Any:
        return self.request(
            "DELETE",
            _pod(namespace, name),
            body=body,
            request_timeout=_request_timeout,
            preload_content=_preload_content,
        )

    def create_namespaced_pod_binding(
        self, name: str, namespace: str, body: Any, *, _preload_content: bool = False, _request_timeout: Any = None
    ) -> Any:
        return self.request(
            "POST",
            f"{_pod(namespace, name)}/binding",
            body=body,
            request_timeout=_request_timeout,
            preload_content=_preload_content,
        )

    def create_namespaced_pod_eviction(
        self, name: str, namespace: str, body: Any, *, _preload_content: bool = False, _request_timeout: Any = None
    ) -> Any:
        return self.request(
            "POST",
            f"{_pod(namespace, name)}/eviction",
            body=body,
            request_timeout=_request_timeout,
            preload_content=_preload_content,
        )

    def create_namespaced_event(
        self, namespace: str, body: Any, *, _preload_content: bool = False, _request_timeout: Any = None
    ) -> Any:
        return self.request(
            "POST",
            _events(namespace),
            body=body,
            request_timeout=_request_timeout,
            preload_content=_preload_content,
        )

    # -- policy/v1 -----------------------------------------------------------------------------------------
    def list_pod_disruption_budget_for_all_namespaces(
        self, *, _preload_content: bool = False, _request_timeout: Any = None, **params: Any
    ) -> Any:
        return self.request(
            "GET",
            "/apis/policy/v1/poddisruptionbudgets",
            request_timeout=_request_timeout,
            preload_content=_preload_content,
            **params,
        )

    # -- custom resources ------------------------------------------------------------------------------------
    def list_cluster_custom_object(
        self,
        group: str,
        version: str,
        plural: str,
        *,
        _preload_content: bool = False,
        _request_timeout: Any = None,
        **params: Any,
    ) -> Any:
        return self.request(
            "GET",
            f"/apis/{_seg(group)}/{_seg(version)}/{_seg(plural)}",
            request_timeout=_request_timeout,
            preload_content=_preload_content,
            **params,
        )

    def patch_namespaced_custom_object_status(
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        name: str,
        body: Any,
        *,
        _content_type: str | None = None,
        _preload_content: bool = False,
        _request_timeout: Any = None,
    ) -> Any:
        path = f"/apis/{_seg(group)}/{_seg(version)}/namespaces/{_seg(namespace)}/{_seg(plural)}/{_seg(name)}/status"
        return self.request(
            "PATCH",
            path,
            body=body,
            content_type=_content_type or MERGE_PATCH,
            request_timeout=_request_timeout,
            preload_content=_preload_content,
        )

    # -- coordination.k8s.io/v1 --------------------------------------------------------------------------------
    def read_namespaced_lease(
        self, name: str, namespace: str, *, _preload_content: bool = False, _request_timeout: Any = None
    ) -> Any:
        return self.request(
            "GET", _lease(namespace, name), request_timeout=_request_timeout, preload_content=_preload_content
        )

    def create_namespaced_lease(
        self, namespace: str, body: Any, *, _preload_content: bool = False, _request_timeout: Any = None
    ) -> Any:
        return self.request(
            "POST",
            f"/apis/coordination.k8s.io/v1/namespaces/{_seg(namespace)}/leases",
            body=body,
            request_timeout=_request_timeout,
            preload_content=_preload_content,
        )

    def replace_namespaced_lease(
        self, name: str, namespace: str, body: Any, *, _preload_content: bool = False, _request_timeout: Any = None
    ) -> Any:
        return self.request(
            "PUT",
            _lease(namespace, name),
            body=body,
            request_timeout=_request_timeout,
            preload_content=_preload_content,
        )


def raise_for_status(resp: Any) -> None:
    """Raises ApiError (status, reason, body, headers) for an answer outside 2xx whose body has been read."""
    if not 200 <= resp.status <= 299:
        raise from_response(resp)


def _pipelined(method: str, path: str, body: Any, content_type: str | None) -> Request:
    from phalanx.kube.pipeline import Request

    data = None if body is None else fast_json.dumps_bytes(body)
    return Request(method, path, data, content_type or JSON)


def _seg(value: str) -> str:
    """One path segment, quoted as the generated client quotes path parameters."""
    from urllib.parse import quote

    if not value:
        raise ValueError("KubeApi: an empty name or namespace in a request path")
    return quote(str(value), safe="")


def _pod(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{_seg(namespace)}/pods/{_seg(name)}"


def _events(namespace: str) -> str:
    return f"/api/v1/namespaces/{_seg(namespace)}/events"


def _lease(namespace: str, name: str) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{_seg(namespace)}/leases/{_seg(name)}"
