"""The harness's requests to the API server, through the project's client (phalanx.kube.api.KubeApi).

JSON in and out, with a few retries on the answers a loaded API server gives (429, 500, 503); /metrics'
request counters; list functions of any path in the form phalanx.kube.watch calls them. Nothing here goes
through the kubernetes client's model classes, which are slow enough to steal CPU from the schedulers under
test.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

from phalanx.kube.api import KubeApi
from phalanx.kube.errors import ApiError

RETRIED = (429, 500, 503)


class BenchK8sError(RuntimeError):
    pass


def connect(kubeconfig: str) -> KubeApi:
    """A KubeApi on the services' own connection (phalanx.kube.connection: a pool of 32 connections)."""
    from phalanx.kube.connection import connect as kube_connect

    return KubeApi(kube_connect(kubeconfig))


def call(api: KubeApi, method: str, path: str, body: Any = None, content_type: str | None = None) -> Any:
    """One request; its JSON answer (None when empty). Retried on 429/500/503, BenchK8sError otherwise."""
    for attempt in range(5):
        try:
            resp = api.request(method, path, body=body, content_type=content_type, request_timeout=(10, 60))
        except ApiError as exc:
            if exc.status in RETRIED and attempt < 4:
                time.sleep(0.2 * (attempt + 1))
                continue
            raise BenchK8sError(f"{method} {path}: {exc.status} {str(exc.body)[:300]!r}") from None
        return json.loads(resp.data) if resp.data else None
    raise AssertionError("unreachable")


def get(api: KubeApi, path: str) -> Any:
    return call(api, "GET", path)


def served(api: KubeApi, path: str) -> bool:
    """Whether GET `path` answers 200 (a CRD's collection, once the API server serves it)."""
    try:
        api.request("GET", path, limit=1, request_timeout=(10, 60))
    except ApiError:
        return False
    return True


def lister(api: KubeApi, path: str) -> Callable[..., Any]:
    """A list function of `path` as phalanx.kube.watch.Collection wants one (the generated methods' keywords)."""

    def list_fn(*, _preload_content: bool = False, _request_timeout: Any = None, **params: Any) -> Any:
        return api.request("GET", path, request_timeout=_request_timeout, preload_content=_preload_content, **params)

    return list_fn


def metrics(api: KubeApi) -> dict[str, float]:
    """kube-apiserver's apiserver_request_total, summed by "VERB resource[/subresource]"."""
    resp = api.request("GET", "/metrics", request_timeout=(10, 60))
    return parse_request_totals(resp.data.decode())


_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_request_totals(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels_part, _, value = line.rpartition("} ")
        labels = dict(_LABEL.findall(labels_part))
        resource = labels.get("resource", "")
        if not resource:
            continue  # non-resource URLs (/metrics, /healthz, ...)
        if labels.get("group") not in (None, "", "core"):
            resource += "." + labels["group"]  # kubectl's notation: podgroups.scheduling.x-k8s.io
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        key = f"{labels.get('verb', '?')} {resource}"
        out[key] = out.get(key, 0.0) + float(value)
    return out


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, int]:
    """The requests made between two `metrics`, most first; kinds with none left out."""
    out = {k: int(round(v - before.get(k, 0.0))) for k, v in after.items()}
    return {k: v for k, v in sorted(out.items(), key=lambda kv: -kv[1]) if v > 0}
