"""Reading fields of Kubernetes objects given as plain dicts.

Two spellings reach the intake: camelCase from YAML, raw JSON and CustomObjectsApi, and snake_case from
the kubernetes client's `.to_dict()` (which also writes absent fields as None and timestamps as
datetime). Every structural field is read through `get`, which accepts both; label, annotation and
resource names are map keys, which both spellings leave untouched.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from phalanx.intake.errors import Subject, quoted
from phalanx.model.objects import Resources
from phalanx.model.quantity import QuantityError, parse_quantity

_UPPER = re.compile(r"(?<!^)(?=[A-Z])")


def snake(name: str) -> str:
    return _UPPER.sub("_", name).lower()


def get(obj: Mapping[str, Any], key: str) -> Any:
    """The value of a camelCase field, or of its snake_case twin; None when absent or null."""
    value = obj.get(key)
    if value is None:
        value = obj.get(snake(key))
    return value


def mapping(value: Any, subject: Subject, field: str) -> Mapping[str, Any]:
    """The value as a mapping; absent counts as empty, anything else is an error naming the field."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise subject.error(field, f"expected a mapping, got {type(value).__name__}")
    return value


def sequence(value: Any, subject: Subject, field: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise subject.error(field, f"expected a list, got {type(value).__name__}")
    return list(value)


def text(value: Any, subject: Subject, field: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise subject.error(field, f"expected a string, got {quoted(value)}")
    return value


def as_text(value: Any) -> str:
    """A label or annotation value as Kubernetes stores it.

    YAML turns `min-available: 5` into an int and `groups: ["a/b"]` into a list; the API server would
    have refused both, but hand-written scenario files contain them, so they are read as the text the
    user meant.
    """
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def string_map(value: Any, subject: Subject, field: str) -> dict[str, str]:
    return {str(key): as_text(item) for key, item in mapping(value, subject, field).items()}


def metadata(obj: Mapping[str, Any], kind: str, *, namespaced: bool) -> tuple[Mapping[str, Any], Subject]:
    """The object's metadata and the Subject naming it; a missing name is the first error worth raising."""
    if not isinstance(obj, Mapping):
        raise Subject(kind, "", "<unnamed>").error("", f"expected an object, got {type(obj).__name__}")
    raw = get(obj, "metadata")
    meta = raw if isinstance(raw, Mapping) else {}
    name = meta.get("name")
    namespace = meta.get("namespace") or ("default" if namespaced else "")
    subject = Subject(kind, str(namespace), str(name) if name else "<unnamed>")
    if raw is not None and not isinstance(raw, Mapping):
        raise subject.error("metadata", f"expected a mapping, got {type(raw).__name__}")
    if not isinstance(name, str) or not name:
        raise subject.error("metadata.name", "is required")
    if not isinstance(namespace, str):
        raise subject.error("metadata.namespace", f"expected a string, got {quoted(namespace)}")
    return meta, subject


def timestamp(value: Any, subject: Subject, field: str) -> float | None:
    """Unix seconds of an RFC 3339 string or a datetime; naive datetimes are taken as UTC."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            raise subject.error(field, f"{quoted(value)} is not an RFC 3339 time (e.g. 2024-05-01T12:00:00Z)") from None
    elif isinstance(value, datetime):
        moment = value
    else:
        raise subject.error(field, f"expected an RFC 3339 time, got {quoted(value)}")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def integer(value: Any, subject: Subject, field: str) -> int:
    """An integer field; digit strings are accepted because ConfigMap data and YAML quoting produce them."""
    if isinstance(value, bool):
        raise subject.error(field, f"{quoted(value)} is not an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
        return int(value)
    raise subject.error(field, f"{quoted(value)} is not an integer")


def resource_list(value: Any, subject: Subject, field: str) -> Resources:
    """A ResourceList in milli-units; each bad quantity is reported with its own path (`...requests.cpu`)."""
    out: Resources = {}
    for name, quantity in mapping(value, subject, field).items():
        try:
            out[str(name)] = parse_quantity(quantity)
        except QuantityError as exc:
            raise subject.error(f"{field}.{name}", str(exc)) from None
    return out
