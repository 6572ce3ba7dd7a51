"""List-then-watch of one Kubernetes collection in a daemon thread, delivering raw JSON objects.

What client-go's reflector does, for the few collections the scheduler needs:
- list in pages of `limit` objects (following `metadata.continue`: the pages are one consistent snapshot,
  at the first page's resourceVersion), remember every object's resourceVersion, then watch from the list's
  resourceVersion (with bookmarks, so an idle watch still advances it); each page is delivered as it
  arrives (ADDED, or MODIFIED where its version changed) and the deletions once every page is in, so a
  re-list's diff sees the whole set while no more than a page is held decoded (listing 30,000 pods held
  them all before: most of the binder's 265 MiB peak at a restart), and the next page is asked for while
  one is delivered (one ahead, undecoded), so the API server encodes it meanwhile; a continue token that
  expired (410: etcd compacted the snapshot's revision meanwhile) lists again from scratch in one
  unpaginated request, as client-go's pager does (so a list slower than compaction still ends), diffed
  against what was delivered: an object of the first pages gone by then is delivered DELETED;
- a watch that ends (the server's timeout, a dropped connection) resumes from the last version seen;
- 410 Gone (that version was compacted away) re-lists and diffs against what it knew: objects that vanished
  meanwhile are delivered as DELETED, changed ones as MODIFIED, so no deletion is ever missed;
- 404 on the list (a PodGroup CRD that is not installed) is logged once and retried slowly; it counts as
  synced with no objects, so one missing API group does not hold the scheduler back.

Objects are the API server's JSON (camelCase), which the intake reads directly: skipping the client's model
deserialisation is faster and avoids its known mis-parses. They are decoded in C (kube/object_json.py: msgspec
for pods, nodes and PodGroups, orjson for the rest), to the same values for everything the API server writes,
and without metadata.managedFields, which nothing here reads (pods', nodes' and PodGroups' are not even
built). List items come without kind/apiVersion, so the collection's are filled in.

A sink can also be told when each event arrived (`timed_sink`): the monotonic time the bytes that completed
it were read from the socket, taken before the event is parsed or any earlier event of the same read is
delivered, so a busy sink does not delay the stamps of what follows it (the bench-k8s harness times bindings
and status writes by them).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from phalanx.background import in_background
from phalanx.kube.errors import ApiError, api_errors
from phalanx.kube.object_json import decode_event, decode_page

log = logging.getLogger(__name__)

# Objects per page of a first list. Each page is decoded whole (500 bench pods: ~4 MiB with their managedFields,
# until trimmed) while the next is fetched; fewer per page lowers that peak but costs the API server a request
# each, and a restart's 30,000-pod list is on the way to scheduling again (the binder's view, which is not,
# lists in smaller pages: backends/cluster_view.py).
LIST_PAGE = 500

Sink = Callable[[str, str, dict[str, Any]], None]  # (collection name, ADDED|MODIFIED|DELETED, object)
TimedSink = Callable[[float, str, str, dict[str, Any]], None]  # (time.monotonic() at arrival, then as Sink)


@dataclass(frozen=True)
class Collection:
    name: str  # for logs and for the sink, e.g. "pods", "podgroups.scheduling.x-k8s.io"
    list_fn: Callable[..., Any]  # a list function, e.g. phalanx.kube.api.KubeApi.list_node
    kind: str
    api_version: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


class _Gone(Exception):
    """The watch's resourceVersion is too old: re-list."""


def object_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace, name = meta.get("namespace") or "", meta.get("name") or ""
    return f"{namespace}/{name}" if namespace else name


def _stub(collection: Collection, key: str) -> dict[str, Any]:
    """What a DELETED event found by a re-list carries: the object's identity only."""
    namespace, _, name = key.rpartition("/")
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"kind": collection.kind, "apiVersion": collection.api_version, "metadata": meta}


class Watcher:
    """`sink` gets every event; or, with sink None, `timed_sink` gets each with its arrival time."""

    def __init__(
        self,
        collection: Collection,
        sink: Sink | None,
        stop: threading.Event,
        *,
        timed_sink: TimedSink | None = None,
        watch_timeout: int = 300,
        missing_retry: float = 30.0,
        max_backoff: float = 30.0,
        request_timeout: float = 60.0,
        limit: int = LIST_PAGE,
        pace: Callable[[int], None] | None = None,
    ) -> None:
        """`pace`: called with the number of pages a list has read when the last of them has a next one,
        before that page is delivered and the next asked for; it may block (the binder's view holds a large
        list back until it has work)."""
        if (sink is None) == (timed_sink is None):
            raise ValueError("Watcher: give either sink or timed_sink")
        self.collection = collection
        self.sink = sink
        self.timed_sink = timed_sink
        self.stop = stop
        self.watch_timeout = watch_timeout
        self.missing_retry = missing_retry
        self.max_backoff = max_backoff
        self.request_timeout = request_timeout
        self.limit = limit  # objects per list page (0: one unpaginated list)
        self.pace = pace
        self.pages = 0  # list requests made, every page of every list counted
        self.synced = threading.Event()  # set after the first list (or the first 404 of a missing collection)
        self.relists = 0  # lists after the first: 410s and reconnections that lost their place
        self.served: bool | None = None  # whether the API server has the collection (a CRD may be missing)
        self.last_error = ""  # the last failure that interrupted the list or the watch (retried since)
        self._known: dict[str, str] = {}  # key -> resourceVersion of every object delivered and not deleted
        self._resp: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> Watcher:
        self._thread = threading.Thread(target=self._run, name=f"watch-{self.collection.name}", daemon=True)
        self._thread.start()
        return self

    def interrupt(self) -> None:
        """Unblocks a watch waiting for data (after `stop` is set): shuts its socket down."""
        resp = self._resp
        sock = getattr(getattr(resp, "connection", None), "sock", None)
        if sock is not None:
            import socket

            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    # -- the loop --------------------------------------------------------------------------------------
    def _run(self) -> None:
        name = self.collection.name
        version: str | None = None
        backoff = 0.5
        missing_logged = False
        while not self.stop.is_set():
            try:
                if version is None:
                    version = self._list()
                    if self.synced.is_set():
                        self.relists += 1
                    if self.served is False:
                        log.info("%s: now served by the API server; watching it", name)
                    self.served = True
                    self.synced.set()
                    missing_logged = False
                version = self._watch(version)
                backoff = 0.5
            except _Gone:
                log.info("%s: resourceVersion %s expired; re-listing", name, version)
                version = None
            except api_errors() as exc:
                if self.stop.is_set():
                    break
                self.last_error = f"{exc.status} {exc.reason}"
                if exc.status == 404:  # the collection does not exist (CRD not installed, or removed)
                    if self.served:  # it was there: a CRD removed while we watched
                        log.warning(
                            "%s: no longer served by the API server; retrying every %gs", name, self.missing_retry
                        )
                    elif not missing_logged:  # at start: the feed says it once for every collection
                        log.debug("%s: not served by the API server; retrying every %gs", name, self.missing_retry)
                    missing_logged = True
                    self.served = False
                    self._deliver_deletions({}, time.monotonic())  # every object known so far is gone
                    self.synced.set()
                    version = None
                    self.stop.wait(self.missing_retry)
                    continue
                if exc.status == 410:
                    version = None
                    continue
                log.warning("%s: %s %s; retrying in %.1fs", name, exc.status, exc.reason, backoff)
                self.stop.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff)
            except Exception as exc:  # connection errors and the like: resume from where we were
                if self.stop.is_set():
                    break
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("%s: watch interrupted (%s: %s); retrying in %.1fs", name, type(exc).__name__, exc, backoff)
                self.stop.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff)

    def _call(self, **extra: Any) -> Any:
        c = self.collection
        return c.list_fn(*c.args, **c.kwargs, **extra, _preload_content=False)

    def _list(self) -> str:
        """Lists every page, delivering each as it arrives, then the deletions; returns the snapshot's
        resourceVersion."""
        limit = self.limit
        while True:
            fresh: dict[str, str] = {}  # key -> resourceVersion of every object this listing returned
            arrived, first_page = time.monotonic(), self.pages
            version: str | None = None
            token: str | None = None
            ahead: Future[tuple[bytes, float]] | None = None  # the next page, asked for while one is delivered
            try:
                while True:
                    data, arrived = self._page(limit, None) if ahead is None else ahead.result()
                    body = decode_page(data, self.collection.kind)
                    del data
                    meta = body.get("metadata") or {}
                    if version is None:  # the first page's: every later page is of the same snapshot
                        version = str(meta.get("resourceVersion") or "")
                    token = meta.get("continue") or None
                    if token:
                        if self.pace is not None:
                            self.pace(self.pages - first_page)
                        # The next page is asked for now, while this one is delivered: the API server
                        # encodes it while the sink parses this one (a rebuild's lists, 60 pages of pods
                        # at 30,000, waited for each other's page before).
                        ahead = in_background(self._page, limit, token, name="list-page")
                    items = body.pop("items", None) or []
                    del body
                    for item in items:
                        item.setdefault("kind", self.collection.kind)
                        item.setdefault("apiVersion", self.collection.api_version)
                    self._deliver_page(items, arrived, fresh)
                    if not token:
                        break
            except api_errors() as exc:
                if exc.status != 410 or not token:
                    raise
                log.info(
                    "%s: list's continue token expired after %d pages; listing again whole",
                    self.collection.name,
                    self.pages - first_page - 1,
                )
                limit = 0
                continue
            self._deliver_deletions(fresh, arrived)
            return version or ""

    def _page(self, limit: int, token: str | None) -> tuple[bytes, float]:
        """One page of the list, read whole, and when its last bytes arrived (counted in `pages` as asked for;
        one list asks for one page at a time, on its thread or on the one fetching ahead)."""
        self.pages += 1
        extra: dict[str, Any] = {"limit": limit} if limit > 0 else {}
        if token:
            extra["_continue"] = token
        resp = self._call(_request_timeout=self.request_timeout, **extra)
        return resp.data, time.monotonic()  # the page's items arrived once the whole answer has

    def _deliver_page(self, items: list[dict[str, Any]], arrived: float, fresh: dict[str, str]) -> None:
        """A listed page's objects that are new (ADDED) or changed (MODIFIED) since they were last delivered,
        each recorded in `fresh` and as delivered."""
        for obj in items:
            key = object_key(obj)
            version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
            fresh[key] = version
            before = self._known.get(key)
            self._known[key] = version
            if before is None:
                self._deliver("ADDED", obj, arrived)
            elif before != version:
                self._deliver("MODIFIED", obj, arrived)

    def _deliver_deletions(self, fresh: dict[str, str], arrived: float) -> None:
        """What was delivered and the complete listing `fresh` no longer has: DELETED."""
        for key in self._known.keys() - fresh.keys():
            self._deliver("DELETED", _stub(self.collection, key), arrived)
        self._known = fresh

    def _watch(self, version: str) -> str:
        resp = self._call(
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=self.watch_timeout,
            _request_timeout=(10, self.watch_timeout + 30),
        )
        self._resp = resp
        try:
            if self.stop.is_set():  # stopped while this watch was being asked for: interrupt() found no socket
                return version
            status = getattr(resp, "status", 200)
            if not 200 <= status <= 299:
                raise ApiError(status=status, reason=resp.data.decode(errors="replace")[:200])
            for arrived, line in _lines(resp):
                if self.stop.is_set():
                    break
                if not line.strip():
                    continue
                event = decode_event(line, self.collection.kind)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _Gone()
                    raise ApiError(status=obj.get("code"), reason=obj.get("message"))
                new_version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    key = object_key(obj)
                    if kind == "DELETED":
                        self._known.pop(key, None)
                    else:
                        self._known[key] = new_version
                    self._deliver(kind, obj, arrived)
                version = new_version  # BOOKMARK: only the version advances
        finally:
            self._resp = None
            resp.close()
            resp.release_conn()
        return version

    def _deliver(self, kind: str, obj: dict[str, Any], arrived: float) -> None:
        try:
            if self.timed_sink is not None:
                self.timed_sink(arrived, self.collection.name, kind, obj)
            elif self.sink is not None:
                self.sink(self.collection.name, kind, obj)
        except Exception:  # the sink's problem must not kill the watch
            log.exception("%s: handling a %s event failed", self.collection.name, kind)


def _lines(resp: Any) -> Iterator[tuple[float, bytes]]:
    """The stream's lines (as the kubernetes client's iter_resp_lines splits them), each with the monotonic
    time the read that completed it returned."""
    buffer = bytearray()
    for segment in resp.stream(amt=None, decode_content=False):
        arrived = time.monotonic()
        buffer.extend(segment.encode() if isinstance(segment, str) else segment)
        start = 0
        while (end := buffer.find(b"\n", start)) != -1:
            yield arrived, bytes(buffer[start:end])
            start = end + 1
        del buffer[:start]
