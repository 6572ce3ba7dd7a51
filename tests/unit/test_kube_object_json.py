"""The watches' decoding (kube/object_json.py): pods, nodes and PodGroups decoded without managedFields to the
same values the general decoder gives once trimmed, the general path where the schema does not fit, and other
kinds kept whole."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from phalanx import fast_json
from phalanx.kube import object_json
from phalanx.kube.object_json import decode_event, decode_page, trim

MANAGED = [
    {
        "manager": "kubectl-client-side-apply",
        "operation": "Update",
        "apiVersion": "v1",
        "time": "2026-11-30T05:16:20Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:containers": {'k:{"name":"main"}': {".": {}, "f:image": {}}}},
        },
    },
    {"manager": 'odd "]},\\"spec\\":[" name', "operation": "Update", "subresource": "status", "fieldsV1": {}},
]


def pod(name: str, **extra_meta: Any) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": "7",
            "generation": 1,
            "creationTimestamp": "2026-11-30T05:16:20Z",
            "labels": {"scheduling.x-k8s.io/pod-group": "g"},
            # text that looks like the structure the decoder steps over
            "annotations": {"note": '"managedFields":[{"x":1}]},"spec":{', "ünï": "çødé ✓"},
            "ownerReferences": [{"kind": "Job", "name": "j", "uid": "u", "controller": True}],
            "finalizers": ["f"],
            "deletionTimestamp": None,
            "managedFields": copy.deepcopy(MANAGED),
            **extra_meta,
        },
        "spec": {
            "schedulerName": "phalanx",
            "priority": 2**70,  # beyond 64 bits
            "overhead": None,
            "containers": [{"name": "main", "resources": {"requests": {"cpu": "100m"}}}],
            "tolerations": [{"key": "k", "operator": "Exists", "tolerationSeconds": 300}],
            "weight": 0.25,
        },
        "status": {"phase": "Pending", "conditions": []},
    }


def encode(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()


def whole_then_trimmed(data: bytes, items: bool) -> Any:
    body = fast_json.loads(data)
    for o in body["items"] if items else [body["object"]]:
        trim(o)
    return body


def test_a_page_of_pods_decodes_to_the_general_values_without_managed_fields() -> None:
    body = {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "42", "continue": "tok", "remainingItemCount": 3},
        "items": [pod("a"), pod("b", selfLink="/x"), {"metadata": {"name": "bare"}}],
    }
    data = encode(body)
    got = decode_page(data, "Pod")
    assert got == whole_then_trimmed(data, items=True)
    assert all("managedFields" not in item["metadata"] for item in got["items"])
    assert got["items"][0]["spec"]["priority"] == 2**70
    assert got["items"][0]["metadata"]["annotations"]["ünï"] == "çødé ✓"
    got["items"][0].setdefault("kind", "Pod")  # plain dicts, which the watch fills in
    assert type(got["items"][0]["metadata"]) is dict


@pytest.mark.parametrize("kind", ["Node", "PodGroup", "PodDisruptionBudget"])
def test_the_other_spec_status_kinds_decode_alike(kind: str) -> None:
    obj = {"kind": kind, "apiVersion": "v1", "metadata": {"name": "n", "managedFields": MANAGED}, "spec": {"a": [1]}}
    event = encode({"type": "MODIFIED", "object": obj})
    assert decode_event(event, kind) == whole_then_trimmed(event, items=False)
    assert "managedFields" not in decode_event(event, kind)["object"]["metadata"]


@pytest.mark.parametrize("kind", ["ADDED", "MODIFIED", "DELETED", "BOOKMARK"])
def test_watch_events_keep_their_type_and_object(kind: str) -> None:
    obj = pod("a") if kind != "BOOKMARK" else {"kind": "Pod", "metadata": {"resourceVersion": "9"}}
    line = encode({"type": kind, "object": obj})
    got = decode_event(line, "Pod")
    assert got == whole_then_trimmed(line, items=False)
    assert got["type"] == kind


def test_an_error_event_keeps_its_status() -> None:
    # A Status has code, reason and message where an object has spec and status: decoded by the pod schema,
    # the watch would not see the 410 that tells it to list again.
    line = encode(
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "code": 410,
                "reason": "Expired",
                "message": "too old resource version",
            },
        }
    )
    got = decode_event(line, "Pod")
    assert got["object"]["code"] == 410
    assert got["object"]["reason"] == "Expired"
    assert got["object"]["message"] == "too old resource version"


def test_pods_do_not_go_through_the_general_decoder(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(data: Any) -> Any:
        raise AssertionError("decoded whole")

    monkeypatch.setattr(object_json.fast_json, "loads", refuse)
    page = decode_page(encode({"metadata": {}, "items": [pod("a")]}), "Pod")
    assert page["items"][0]["metadata"]["name"] == "a"
    event = decode_event(encode({"type": "ADDED", "object": pod("b")}), "Node")
    assert event["object"]["metadata"]["name"] == "b"


def test_other_kinds_are_decoded_whole_then_trimmed() -> None:
    cm = {
        "kind": "ConfigMap",
        "apiVersion": "v1",
        "metadata": {"name": "c", "managedFields": MANAGED},
        "data": {"gang": "x"},
        "binaryData": {"b": "AA=="},
        "immutable": True,
    }
    got = decode_page(encode({"metadata": {}, "items": [cm]}), "ConfigMap")["items"][0]
    assert got["data"] == {"gang": "x"} and got["binaryData"] == {"b": "AA=="} and got["immutable"] is True
    assert "managedFields" not in got["metadata"]
    event = decode_event(encode({"type": "ADDED", "object": cm}), "Event")["object"]
    assert event["data"] == {"gang": "x"} and "managedFields" not in event["metadata"]


def test_documents_the_schema_does_not_fit_are_decoded_the_general_way() -> None:
    # metadata null, invalid UTF-8 (replaced, as the general decoder does), items null, a NaN
    null_meta = b'{"type":"ADDED","object":{"kind":"Pod","metadata":null,"spec":{}}}'
    assert decode_event(null_meta, "Pod") == fast_json.loads(null_meta)
    bad_utf8 = b'{"metadata":{},"items":[{"metadata":{"name":"a\xff","managedFields":[]}}]}'
    assert decode_page(bad_utf8, "Pod")["items"][0]["metadata"] == {"name": "a\ufffd"}
    assert decode_page(b'{"metadata":{},"items":null}', "Pod") == {"metadata": {}, "items": None}
    nan = b'{"type":"MODIFIED","object":{"metadata":{"name":"a","managedFields":[]},"spec":{"w":NaN}}}'
    got = decode_event(nan, "Pod")["object"]
    assert got["metadata"] == {"name": "a"} and got["spec"]["w"] != got["spec"]["w"]


def test_not_json_still_raises() -> None:
    with pytest.raises(ValueError):
        decode_event(b'{"type":"ADDED","object":', "Pod")
