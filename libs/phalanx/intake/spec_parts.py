"""The parts of a pod's spec that a job's pods share (requests, node placement, pod affinity), parsed once per
distinct content.

A job's pods come from one template: their resources, node selector, affinity, tolerations and spread
constraints are equal, and the API server adds the same two default tolerations to every pod. Parsing and
checking those parts was about 40 us of the 58 us a pod's parse takes (parse_pod), and every pod is parsed
when the scheduler lists the cluster (3,000 pending or 30,000 bound at a start) and again when it is bound.
Here the raw parts are written as JSON (orjson, ~1 us) and the parsed result is looked up by that text; what
differs between a job's pods (names, env, hostname, nodeName) is not part of the key.

Only a successful parse is kept: a pod whose parts do not parse raises the same error, naming the pod and
the field, as without the memo. Values JSON cannot spell exactly (datetimes from YAML, subclasses, integers
beyond 64 bits) skip the memo. The results are frozen (Placement, PodAffinitySpec) or copied (requests).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from phalanx.intake import fields
from phalanx.intake.errors import Subject
from phalanx.intake.placement import parse_placement
from phalanx.intake.pod_affinity import parse_pod_affinity
from phalanx.intake.resource_requests import pod_requests
from phalanx.model.objects import Placement, Resources
from phalanx.model.pod_affinity import PodAffinitySpec

# Distinct job templates alive at once in a cluster: a few hundred; past this the memo starts again.
MAX_ENTRIES = 4096
# Anything orjson would write the same way as some other value (a datetime as its text, a str subclass as a
# str) raises instead, so two keys are equal only when the parts are.
_EXACT = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS

Parts = tuple[Resources, Placement, PodAffinitySpec | None]

_parts: dict[bytes, Parts] = {}
_requests: dict[bytes, Resources] = {}


def spec_parts(spec: Mapping[str, Any], subject: Subject) -> Parts:
    """The pod's requests (a copy the caller may keep), placement and pod affinity (None: none declared)."""
    key = _parts_key(spec)
    if key is not None and (hit := _parts.get(key)) is not None:
        return dict(hit[0]), hit[1], hit[2]
    parts = (pod_requests(spec, subject), parse_placement(spec, subject), parse_pod_affinity(spec, subject))
    if key is not None:
        _keep(_parts, key, (dict(parts[0]), parts[1], parts[2]))
    return parts


def _parts_key(spec: Mapping[str, Any]) -> bytes | None:
    asks = _asks(spec)
    if asks is None:
        return None
    placed = ("nodeSelector", "affinity", "tolerations", "topologySpreadConstraints")
    return _json((*asks, *(fields.get(spec, name) for name in placed)))


def requests_of(spec: Mapping[str, Any], subject: Subject) -> Resources:
    """The pod's requests alone (the binder's check of a reservation), a copy the caller may keep."""
    asks = _asks(spec)
    key = None if asks is None else _json(asks)
    if key is not None and (hit := _requests.get(key)) is not None:
        return dict(hit)
    requests = pod_requests(spec, subject)
    if key is not None:
        _keep(_requests, key, dict(requests))
    return requests


def _asks(spec: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """What pod_requests reads from `spec`; None when a container is not a mapping (the parse reports it)."""
    containers = fields.get(spec, "containers")
    inits = fields.get(spec, "initContainers")
    if not _all_mappings(containers) or not _all_mappings(inits):
        return None
    return (
        [fields.get(c, "resources") for c in containers or ()],
        [(fields.get(c, "resources"), fields.get(c, "restartPolicy")) for c in inits or ()],
        fields.get(spec, "overhead"),
    )


def _json(parts: tuple[Any, ...]) -> bytes | None:
    try:
        return orjson.dumps(parts, option=_EXACT)
    except TypeError:  # orjson.JSONEncodeError: a value JSON cannot spell exactly, so no memo
        return None


def _keep(memo: dict[bytes, Any], key: bytes, value: Any) -> None:
    if len(memo) >= MAX_ENTRIES:
        memo.clear()  # rare; a bounded LRU would cost more per pod than it saves
    memo[key] = value


def _all_mappings(items: Any) -> bool:
    return items is None or (isinstance(items, list | tuple) and all(isinstance(c, Mapping) for c in items))


def clear() -> None:
    """Forgets every parsed part (tests)."""
    _parts.clear()
    _requests.clear()
