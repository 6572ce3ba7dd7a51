"""Koordinator's gang parameter annotations (on pods and PodGroups), and the parsers of gang values.

Each parser takes the text as written and returns the value or raises ValueError saying why; the callers
turn that into an IntakeError naming the object and the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from phalanx.intake import fields, names
from phalanx.intake.errors import Subject, quoted
from phalanx.intake.gang_shapes import NOTHING_SAID, Declared, GangParams, T
from phalanx.model import keys, limits
from phalanx.model.objects import GangMode

MATCH_POLICIES = ("once-satisfied", "only-waiting", "waiting-and-running")
_POSITIVE_INT = re.compile(r"\+?[0-9]{1,20}")


def positive_int(text: str) -> int:
    """A gang size: it travels as a protobuf int32, so 2^31 and above is refused rather than overflowed."""
    stripped = text.strip()
    if not _POSITIVE_INT.fullmatch(stripped) or int(stripped) <= 0:
        raise ValueError(f"{quoted(text)} is not a positive integer")
    if int(stripped) > limits.INT32_MAX:
        raise ValueError(f"{quoted(text)} is too large (at most {limits.INT32_MAX})")
    return int(stripped)


def gang_mode(text: str) -> GangMode:
    for mode in GangMode:
        if text == mode.value:
            return mode
    raise ValueError(f"{quoted(text)} is not a gang mode (Strict or NonStrict)")


def positive_duration(text: str) -> float:
    seconds = fields.duration_seconds(text)
    if seconds <= 0:
        raise ValueError(f"{quoted(text)} is not a positive duration")
    if seconds > limits.MAX_TIME:
        raise ValueError(f"{quoted(text)} is above the maximum {int(limits.MAX_TIME)} seconds")
    return seconds


def match_policy(text: str) -> str:
    if text not in MATCH_POLICIES:
        raise ValueError(f"{quoted(text)} is not a match policy ({', '.join(MATCH_POLICIES)})")
    return text


def gang_groups(text: str) -> tuple[str, ...]:
    """A GangGroup: a JSON list of "namespace/name"; "" means the gang stands alone.

    The unquoted form `[nsA/gang-a, nsB/gang-b]` is accepted too: it is how the Koordinator documentation
    writes it, and YAML users copy that.
    """
    stripped = text.strip()
    if not stripped:
        return ()
    try:
        value: Any = json.loads(stripped)
    except json.JSONDecodeError:
        value = _unquoted_list(stripped)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f'{quoted(text)} is not a list of "namespace/name" (e.g. ["ns-a/gang-a","ns-b/gang-b"])')
    if len(value) > limits.MAX_ENTRIES:
        raise ValueError(f"{len(value)} members is above the maximum {limits.MAX_ENTRIES}")
    members: list[str] = []
    for item in (entry.strip() for entry in value):
        namespace, _, name = item.partition("/")
        if not names.is_dns_label(namespace) or not is_gang_name(name):
            raise ValueError(f'{quoted(text)}: {quoted(item)} is not "namespace/name" with RFC 1123 parts')
        if item not in members:
            members.append(item)
    return tuple(members)


def _unquoted_list(text: str) -> list[str] | None:
    if not (text.startswith("[") and text.endswith("]")):
        return None
    inner = text[1:-1].strip()
    return [part.strip().strip("'\"") for part in inner.split(",")] if inner else []


def is_gang_name(name: str) -> bool:
    return names.is_dns_subdomain(name)


_PARAM_PARSERS: dict[str, tuple[str, Callable[[str], Any]]] = {
    keys.KOORD_MIN_AVAILABLE: ("min_available", positive_int),
    keys.KOORD_TOTAL_NUMBER: ("total_number", positive_int),
    keys.KOORD_MODE: ("mode", gang_mode),
    keys.KOORD_WAITING_TIME: ("wait_seconds", positive_duration),
    keys.KOORD_GROUPS: ("groups", gang_groups),
    keys.KOORD_MATCH_POLICY: ("match_policy", match_policy),
}
POD_OVERRIDE_KEYS = tuple(_PARAM_PARSERS)
# Koordinator documents only these on a PodGroup: its spec already has the minimum and the timeout.
PODGROUP_ANNOTATION_KEYS = (keys.KOORD_TOTAL_NUMBER, keys.KOORD_MODE, keys.KOORD_GROUPS, keys.KOORD_MATCH_POLICY)


def koordinator_params(annotations: Mapping[str, str], subject: Subject, names: tuple[str, ...]) -> GangParams:
    values: dict[str, Any] = {}
    for key in names:
        attribute, parse = _PARAM_PARSERS[key]
        declared = annotation_param(annotations, key, subject, parse)
        if declared is not None:
            values[attribute] = declared
    # Most pods say nothing here: the one empty layer, which overridden_by passes over without a look.
    return GangParams(**values) if values else NOTHING_SAID


def annotation_param(
    annotations: Mapping[str, str], key: str, subject: Subject, parse: Callable[[str], T]
) -> Declared[T] | None:
    if key not in annotations:
        return None
    return declared(annotations[key], subject, f"metadata.annotations[{key}]", parse)


def declared(raw: str, subject: Subject, where: str, parse: Callable[[str], T]) -> Declared[T]:
    try:
        return Declared(parse(raw), subject, where)
    except ValueError as exc:
        raise subject.error(where, str(exc)) from None
