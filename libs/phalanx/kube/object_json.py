"""The watches' JSON decoding (kube/watch.py): list pages and watch events, every object without its
metadata.managedFields.

managedFields is server-side apply's record of which manager set which field: 587 of a bench pod's 1,592
bytes, 523 of a node's 1,157, and a nest of small objects for every field a manager set (more on a real
pod, whose kubelet writes its status). Nothing in Phalanx reads it, and dropping it once decoded (as
kube-scheduler's informers do) still paid for building it: 45% of orjson's time on a page of bench pods,
55% on nodes.

Objects of the kinds in `SPEC_STATUS_KINDS`, whose top level the API defines as apiVersion, kind, metadata,
spec and status, are decoded by msgspec against a schema of plain dicts (TypedDicts) that names those fields
and every field of ObjectMeta but managedFields, which the decoder steps over without building it (10.2 ->
5.6 ms a page of 500 bench pods, 7.6 -> 3.6 ms for 500 nodes). The values are the same dicts, lists, strings
and numbers fast_json gives (integers of any size, floats, nulls; the later of two equal keys). Any other
field at the top or in metadata would be dropped, hence the fixed kinds; other kinds (ConfigMaps, Events,
custom objects) are decoded whole and then trimmed. A document the schema does not fit (metadata that is not
an object, invalid UTF-8, a NaN) is decoded the general way, so nothing that decoded before fails now. A
watch's ERROR event carries a Status (code, reason, message) in place of an object: it is decoded whole.
"""

from __future__ import annotations

from typing import Any, TypedDict

import msgspec

from phalanx import fast_json

# Kinds whose objects have only apiVersion, kind, metadata, spec and status at the top (the core API's and
# the PodGroup CRDs' schemas); their watches decode by the lean schema.
SPEC_STATUS_KINDS = frozenset({"Pod", "Node", "PodGroup", "PodDisruptionBudget"})


class _ObjectMeta(TypedDict, total=False):
    """ObjectMeta's fields (k8s.io/apimachinery meta/v1) but managedFields."""

    name: Any
    generateName: Any
    namespace: Any
    selfLink: Any
    uid: Any
    resourceVersion: Any
    generation: Any
    creationTimestamp: Any
    deletionTimestamp: Any
    deletionGracePeriodSeconds: Any
    labels: Any
    annotations: Any
    ownerReferences: Any
    finalizers: Any


class _SpecStatusObject(TypedDict, total=False):
    apiVersion: Any
    kind: Any
    metadata: _ObjectMeta
    spec: Any
    status: Any


class _Page(TypedDict, total=False):
    apiVersion: Any
    kind: Any
    metadata: Any  # ListMeta: resourceVersion, continue, remainingItemCount
    items: list[_SpecStatusObject]


class _Event(TypedDict, total=False):
    type: Any
    object: _SpecStatusObject


_lean_page = msgspec.json.Decoder(_Page)
_lean_event = msgspec.json.Decoder(_Event)
_UNFIT = (msgspec.DecodeError, msgspec.ValidationError)


def trim(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` without metadata.managedFields (changed in place)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def _whole_page(data: bytes) -> dict[str, Any]:
    body = fast_json.loads(data)
    for item in body.get("items") or ():
        if isinstance(item, dict):
            trim(item)
    return body


def _whole_event(line: bytes) -> dict[str, Any]:
    event = fast_json.loads(line)
    obj = event.get("object")
    if isinstance(obj, dict):
        trim(obj)
    return event


def decode_page(data: bytes, kind: str) -> dict[str, Any]:
    """A list answer (kind/apiVersion, metadata, items) of objects of `kind`, each without managedFields."""
    if kind in SPEC_STATUS_KINDS:
        try:
            return _lean_page.decode(data)  # type: ignore[return-value]
        except _UNFIT:
            pass
    return _whole_page(data)


def decode_event(line: bytes, kind: str) -> dict[str, Any]:
    """A watch event ({"type", "object"}) on objects of `kind`, its object without managedFields."""
    if kind in SPEC_STATUS_KINDS:
        try:
            event: dict[str, Any] = _lean_event.decode(line)  # type: ignore[assignment]
        except _UNFIT:
            return _whole_event(line)
        if event.get("type") != "ERROR":
            return event
    return _whole_event(line)
