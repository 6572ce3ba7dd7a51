"""phalanx.fast_json: orjson where it can, the standard library where orjson refuses, the same values."""

from __future__ import annotations

import json
import math

import pytest

from phalanx import fast_json
from phalanx.model.objects import GangMode, GangSpec, NodeInfo, PodInfo, Taint
from phalanx.state import codec


def test_reading_what_orjson_refuses_reads_as_the_standard_library_does() -> None:
    assert fast_json.loads(b'{"type":"ADDED","object":{"n":1}}') == {"type": "ADDED", "object": {"n": 1}}
    assert math.isnan(fast_json.loads(b'{"a": NaN}')["a"])  # NaN, as json.loads reads it
    assert fast_json.loads(b'{"name":"caf\xe9"}') == {"name": "caf\ufffd"}  # invalid UTF-8 replaced
    assert fast_json.loads(memoryview(b"[1,2]")) == [1, 2]
    with pytest.raises(ValueError):
        fast_json.loads(b"{not json")


@pytest.mark.parametrize("write", [fast_json.dumps, fast_json.dumps_bytes])
def test_writing_what_orjson_refuses_falls_back_to_the_standard_library(write: object) -> None:
    huge = {"memory": 2**70}  # beyond orjson's 64-bit integers
    int_keys = {1: "a"}  # orjson writes only string keys
    for value in (huge, int_keys):
        out = write(value)  # type: ignore[operator]
        text = out.decode() if isinstance(out, bytes) else out
        assert text == json.dumps(value, separators=(",", ":"))
    with pytest.raises(TypeError):
        write({"s": {1, 2}})  # type: ignore[operator]  # what neither can write is still an error


def test_records_read_back_the_same_whichever_library_wrote_them() -> None:
    """A record an older scheduler wrote with the standard library reads as the one written now, and the
    other way round (a restart or a rolling upgrade mixes them), non-ASCII and float exponents included."""
    pod = PodInfo(
        "ns",
        "café-0",
        priority=5,
        created_at=1e16,
        requests={"cpu": 100, "memory": 2**40},
        gang="ns/g",
        annotations={"note": "ünïcode ✓"},
        labels={"app": "x"},
    )
    now = codec.reservation_record(pod, "node-1", {"cpu": 100})
    old = json.dumps(json.loads(now), separators=(",", ":"))  # the standard library's bytes of the same record
    assert now != old  # they do differ in bytes (UTF-8 against \u escapes, 1e16 against 1e+16)
    assert codec.pod_record("ns/café-0", now, "bound") == codec.pod_record("ns/café-0", old, "bound")
    assert codec.pod_record("ns/café-0", now, "bound").pod == pod
    gang = GangSpec("ns", "g", 2, 3, mode=GangMode.NON_STRICT, groups=("ns/g", "ns/h"), wait_seconds=1.5)
    assert codec.gang_from_json(codec.gang_to_json(gang)) == gang
    node = NodeInfo("n", {"cpu": 1000}, taints=(Taint("k", "v", "NoSchedule"),))
    assert codec.node_from_json(codec.node_to_json(node)) == node


@pytest.mark.parametrize("uid", ["", "0d5b1c3e-1111-2222-3333-444455556666"])
@pytest.mark.parametrize("state", [None, "assumed", "binding", "bound"])
def test_a_reservations_mark_says_what_its_full_record_says(uid: str, state: str | None) -> None:
    """Reconciliation compares marks (node, pod uid, state) read without building the pod; they must agree
    with the full record, state defaulting to assumed where podstate has none."""
    pod = PodInfo("ns", "w-0", created_at=1.0, requests={"cpu": 100}, gang="ns/g", uid=uid)
    raw = codec.reservation_record(pod, "node-7", {"cpu": 100})
    full, mark = codec.pod_record("ns/w-0", raw, state), codec.pod_mark(raw, state)
    assert (mark.node, mark.uid, mark.state) == (full.node, full.pod.uid, full.state)
    assert (mark.node, mark.uid) == ("node-7", uid)
