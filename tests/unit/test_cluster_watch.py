"""The list-then-watch loop against a scripted list function: resume, bookmarks, 410 re-list with a diff,
a missing collection."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from phalanx.kube.errors import ApiError
from phalanx.kube.watch import LIST_PAGE, Collection, Watcher


def obj(name: str, rv: str, namespace: str = "ns") -> dict[str, Any]:
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": rv},
    }


class Resp:
    def __init__(self, body: dict[str, Any] | None = None, events: list[dict[str, Any]] = ()) -> None:  # type: ignore[assignment]
        self.data = json.dumps(body or {}).encode()
        self.status = 200
        self._lines = [json.dumps(e).encode() + b"\n" for e in events]

    def stream(self, amt: Any = None, decode_content: bool = False) -> Any:
        yield from self._lines

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class Script:
    """A list function answering calls from a script; sets `stop` when the script runs out."""

    def __init__(self, stop: threading.Event, answers: list[Any]) -> None:
        self.stop = stop
        self.answers = answers
        self.calls: list[dict[str, Any]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        if not self.answers:
            self.stop.set()
            return Resp()
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def run(answers: list[Any]) -> tuple[list[tuple[str, str, str]], Script, Watcher]:
    stop = threading.Event()
    script = Script(stop, answers)
    seen: list[tuple[str, str, str]] = []

    def sink(collection: str, kind: str, o: dict[str, Any]) -> None:
        seen.append((kind, o["metadata"]["name"], o["metadata"].get("resourceVersion", "")))

    watcher = Watcher(Collection("pods", script, "Pod", "v1"), sink, stop, missing_retry=0.01)
    watcher.start()
    watcher.join(5)
    return seen, script, watcher


def listing(rv: str, *items: dict[str, Any]) -> Resp:
    bare = [{k: v for k, v in i.items() if k not in ("kind", "apiVersion")} for i in items]  # as lists send them
    return Resp({"metadata": {"resourceVersion": rv}, "items": bare})


def test_list_then_watch_resumes_from_the_last_version_and_relists_on_410() -> None:
    seen, script, watcher = run(
        [
            listing("10", obj("a", "1"), obj("b", "2")),
            Resp(
                events=[
                    {"type": "MODIFIED", "object": obj("a", "11")},
                    {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}},
                ]
            ),
            Resp(events=[{"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}]),
            listing("20", obj("a", "13"), obj("c", "14")),
        ]
    )
    assert seen == [
        ("ADDED", "a", "1"),
        ("ADDED", "b", "2"),
        ("MODIFIED", "a", "11"),
        ("MODIFIED", "a", "13"),
        ("ADDED", "c", "14"),
        ("DELETED", "b", ""),  # the diff after the re-list
    ]
    watches = [c for c in script.calls if c.get("watch")]
    assert [c["resource_version"] for c in watches] == ["10", "12", "20"]  # resumed after the bookmark
    assert all(c["allow_watch_bookmarks"] for c in watches)
    assert watcher.synced.is_set() and watcher.relists == 1


def test_list_items_get_the_collections_kind() -> None:
    stop = threading.Event()
    kinds: list[str] = []
    script = Script(stop, [listing("1", obj("a", "1"))])
    watcher = Watcher(
        Collection("configmaps", script, "ConfigMap", "v1"), lambda c, k, o: kinds.append(o["kind"]), stop
    )
    watcher.start()
    watcher.join(5)
    assert kinds == ["ConfigMap"]


def test_managed_fields_are_dropped_from_listed_and_watched_objects() -> None:
    """Nothing reads metadata.managedFields, and it is 40% of a decoded pod held while a rebuild waits."""
    managed = [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}]

    def with_fields(o: dict[str, Any]) -> dict[str, Any]:
        o["metadata"]["managedFields"] = managed
        return o

    stop = threading.Event()
    got: list[dict[str, Any]] = []
    script = Script(
        stop,
        [
            listing("1", with_fields(obj("a", "1"))),
            Resp(events=[{"type": "MODIFIED", "object": with_fields(obj("a", "2"))}]),
        ],
    )
    watcher = Watcher(Collection("pods", script, "Pod", "v1"), lambda c, k, o: got.append(o), stop)
    watcher.start()
    watcher.join(5)
    assert [o["metadata"]["resourceVersion"] for o in got] == ["1", "2"]
    assert all("managedFields" not in o["metadata"] for o in got)


def test_a_missing_collection_counts_as_synced_and_is_retried() -> None:
    seen, script, watcher = run(
        [
            ApiError(status=404, reason="Not Found"),
            ApiError(status=404, reason="Not Found"),
            listing("5", obj("a", "1")),  # the CRD got installed
        ]
    )
    assert watcher.synced.is_set()
    assert seen == [("ADDED", "a", "1")]
    assert len([c for c in script.calls if not c.get("watch")]) == 3


def test_a_collection_missing_at_start_is_quiet_and_its_arrival_is_said(caplog: Any) -> None:
    """A PodGroup CRD that is not installed is the normal case (three API groups are watched): no
    warning at start (the feed lists what is and is not watched in one INFO line), INFO when it arrives,
    a warning only when one that was served goes away."""
    import logging

    caplog.set_level(logging.DEBUG, logger="phalanx.kube.watch")
    seen, _, _ = run(
        [
            ApiError(status=404, reason="Not Found"),
            listing("5", obj("a", "1")),
            ApiError(status=404, reason="Not Found"),  # (then the script's end lists it once more)
        ]
    )
    assert seen[:2] == [("ADDED", "a", "1"), ("DELETED", "a", "")]  # a CRD gone: what it held is deleted
    levels = [(r.levelname, r.getMessage().split(";")[0]) for r in caplog.records]
    assert levels[:3] == [
        ("DEBUG", "pods: not served by the API server"),
        ("INFO", "pods: now served by the API server"),
        ("WARNING", "pods: no longer served by the API server"),
    ]


class SlowReads(Resp):
    """Two reads, the first holding two events split across the read boundary, the second the rest."""

    def __init__(self, events: list[dict[str, Any]], times: list[float]) -> None:
        super().__init__()
        raw = b"".join(json.dumps(e).encode() + b"\n" for e in events)
        cut = raw.index(b"\n", raw.index(b"\n") + 1) + 5  # the second line's end and a bit of the third
        self._reads = [raw[:cut], raw[cut:]]
        self._times = times

    def stream(self, amt: Any = None, decode_content: bool = False) -> Any:
        import time

        for read in self._reads:
            self._times.append(time.monotonic())
            yield read


def test_a_timed_sink_gets_each_event_with_the_time_its_bytes_arrived() -> None:
    """Every event completed by one read carries that read's time, however long the sink spends on the
    earlier ones; list items carry the time the list's answer came."""
    import time

    stop = threading.Event()
    reads: list[float] = []
    events = [{"type": "MODIFIED", "object": obj(n, str(i + 2))} for i, n in enumerate("abc")]
    script = Script(stop, [listing("1", obj("a", "1")), SlowReads(events, reads)])
    seen: list[tuple[float, str, str, str]] = []

    def timed(arrived: float, collection: str, kind: str, o: dict[str, Any]) -> None:
        seen.append((arrived, collection, kind, o["metadata"]["name"]))
        time.sleep(0.02)  # a busy sink: the next event's stamp must not include it

    before = time.monotonic()
    watcher = Watcher(Collection("pods", script, "Pod", "v1"), None, stop, timed_sink=timed)
    watcher.start()
    watcher.join(5)
    assert [s[1:] for s in seen] == [
        ("pods", "ADDED", "a"),
        ("pods", "MODIFIED", "a"),
        ("pods", "MODIFIED", "b"),
        ("pods", "MODIFIED", "c"),
    ]
    assert before <= seen[0][0] <= reads[0]
    assert seen[1][0] == seen[2][0]  # one read: one time, though the sink took 20 ms over the first
    assert reads[0] <= seen[1][0] < reads[0] + 0.01 and reads[1] <= seen[3][0] < reads[1] + 0.01


def test_a_watcher_takes_one_sink_and_remembers_its_last_failure() -> None:
    stop = threading.Event()
    collection = Collection("pods", Script(stop, []), "Pod", "v1")
    for sinks in ((None, None), (lambda c, k, o: None, lambda t, c, k, o: None)):
        try:
            Watcher(collection, sinks[0], stop, timed_sink=sinks[1])
        except ValueError:
            continue
        raise AssertionError(f"accepted {sinks}")
    _, _, watcher = run([ApiError(status=500, reason="Internal Server Error"), listing("1")])
    assert watcher.last_error == "500 Internal Server Error" and watcher.synced.is_set()


def page(rv: str, token: str, *items: dict[str, Any]) -> Resp:
    """One page of a paginated list: `token` is its metadata.continue ("" on the last page)."""
    resp = listing(rv, *items)
    body = json.loads(resp.data)
    body["metadata"]["continue"] = token
    resp.data = json.dumps(body).encode()
    return resp


def test_a_paginated_list_follows_continue_and_asks_one_page_ahead_at_most() -> None:
    """Three pages of one snapshot: every call asks for `limit`, the later ones with the previous page's
    token; the next page is asked for while a page is delivered, never the one after it (so no more than
    two pages are held, one of them undecoded); the watch
    starts from the first page's resourceVersion; a re-list in pages still finds what vanished meanwhile
    (its deletions wait for the whole set, not one page)."""
    stop = threading.Event()
    script = Script(
        stop,
        [
            page("10", "t1", obj("a", "1"), obj("b", "2")),
            page("99", "t2", obj("c", "3"), obj("d", "4")),  # (a later page's version is not the snapshot's)
            page("99", "", obj("e", "5")),
            Resp(events=[{"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}]),
            page("20", "u1", obj("a", "1"), obj("c", "6")),
            page("20", "", obj("e", "5"), obj("f", "7")),
        ],
    )
    seen: list[tuple[str, str]] = []
    asked: dict[str, int] = {}  # object name -> list calls made when it was first delivered

    def sink(c: str, k: str, o: dict[str, Any]) -> None:
        seen.append((k, o["metadata"]["name"]))
        asked.setdefault(o["metadata"]["name"], len(script.calls))

    watcher = Watcher(Collection("pods", script, "Pod", "v1"), sink, stop, limit=2)
    watcher.start()
    watcher.join(5)
    assert seen[:7] == [*[("ADDED", n) for n in "abcde"], ("MODIFIED", "c"), ("ADDED", "f")]
    # page p's objects are delivered once p calls were made, and before p + 2 were (the fetch ahead runs
    # on its own thread: whether it has called yet when an object is delivered is a race)
    for p, names in ((1, "ab"), (2, "cd"), (3, "e")):
        assert all(asked[n] in (p, min(p + 1, 3)) for n in names), asked
    assert sorted(seen[7:]) == [("DELETED", "b"), ("DELETED", "d")]  # (a set's order)
    lists = [c for c in script.calls if not c.get("watch")]
    assert [(c.get("limit"), c.get("_continue")) for c in lists[:5]] == [
        (2, None),
        (2, "t1"),
        (2, "t2"),
        (2, None),
        (2, "u1"),
    ]
    watches = [c for c in script.calls if c.get("watch")]
    assert [c["resource_version"] for c in watches[:2]] == ["10", "20"]
    assert watcher.pages == len(lists) and watcher.relists >= 1


def test_the_next_page_is_asked_for_while_a_page_is_delivered() -> None:
    """While the sink is still busy with page 1's object, page 2 has been asked for (the API server encodes it
    meanwhile); a 410 on the page fetched ahead still lists again whole."""
    stop = threading.Event()
    script = Script(
        stop,
        [
            page("10", "t1", obj("a", "1")),
            ApiError(status=410, reason="Expired"),
            listing("30", obj("a", "1"), obj("c", "3")),
        ],
    )
    during_a: list[bool] = []
    seen: list[str] = []

    def sink(c: str, k: str, o: dict[str, Any]) -> None:
        name = o["metadata"]["name"]
        if name == "a" and not during_a:
            deadline = time.monotonic() + 2.0
            while len(script.calls) < 2 and time.monotonic() < deadline:
                time.sleep(0.005)
            during_a.append(len(script.calls) >= 2)
        seen.append(f"{k} {name}")

    watcher = Watcher(Collection("pods", script, "Pod", "v1"), sink, stop, limit=1)
    watcher.start()
    watcher.join(5)
    assert during_a == [True]
    assert seen[:2] == ["ADDED a", "ADDED c"]
    lists = [c for c in script.calls if not c.get("watch")]
    assert [(c.get("limit"), c.get("_continue")) for c in lists[:3]] == [(1, None), (1, "t1"), (None, None)]


def test_pace_holds_the_next_page_back_and_is_told_how_many_pages_were_read() -> None:
    """`pace` is called with the pages read when the last one has a next, before that page is delivered and
    the next asked for; while it blocks, nothing more is asked."""
    stop = threading.Event()
    script = Script(
        stop, [page("10", "t1", obj("a", "1")), page("10", "t2", obj("b", "2")), page("10", "", obj("c", "3"))]
    )
    release = threading.Event()
    paced: list[tuple[int, int, list[str]]] = []  # (pages read, calls made, delivered) at each call
    seen: list[str] = []

    def pace(pages: int) -> None:
        paced.append((pages, len(script.calls), list(seen)))
        if pages == 2:
            release.wait(5)

    watcher = Watcher(
        Collection("pods", script, "Pod", "v1"),
        lambda c, k, o: seen.append(o["metadata"]["name"]),
        stop,
        limit=1,
        pace=pace,
    )
    watcher.start()
    deadline = time.monotonic() + 5
    while len(paced) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.2)
    assert paced == [(1, 1, []), (2, 2, ["a"])] and len(script.calls) == 2  # held: page 3 not asked for
    release.set()
    watcher.join(5)
    assert seen[:3] == ["a", "b", "c"] and len(paced) == 2  # the last page has no next: no call


def test_an_expired_continue_lists_again_whole_and_delivers_only_the_difference() -> None:
    """A 410 on a continue (etcd compacted the snapshot's revision between two pages): the list starts again,
    unpaginated, and is diffed against the pages already delivered: nothing unchanged is delivered twice,
    and what went away meanwhile is deleted."""
    seen, script, watcher = run(
        [
            page("10", "t1", obj("a", "1"), obj("b", "2")),
            ApiError(status=410, reason="Expired"),
            listing("30", obj("a", "1"), obj("c", "3")),  # the whole list, in one answer
        ]
    )
    assert seen[:4] == [("ADDED", "a", "1"), ("ADDED", "b", "2"), ("ADDED", "c", "3"), ("DELETED", "b", "")]
    lists = [c for c in script.calls if not c.get("watch")]
    assert [(c.get("limit"), c.get("_continue")) for c in lists[:3]] == [
        (LIST_PAGE, None),
        (LIST_PAGE, "t1"),
        (None, None),
    ]
    assert [c["resource_version"] for c in script.calls if c.get("watch")][:1] == ["30"]
    assert watcher.pages == len(lists)
