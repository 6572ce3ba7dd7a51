"""Reading fields of Kubernetes objects given as plain dicts.

Two spellings reach the intake: camelCase from YAML, raw JSON and CustomObjectsApi, and snake_case from
the kubernetes client's `.to_dict()` (which also writes absent fields as None and timestamps as
datetime). Every structural field is read through `get`, which accepts both; label, annotation and
resource names are map keys, which both spellings leave untouched.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from phalanx.intake import bounds, names
from phalanx.intake.errors import IntakeError, Subject, quoted
from phalanx.model import limits
from phalanx.model.duration import parse_duration
from phalanx.model.objects import Resources
from phalanx.model.quantity import QuantityError, parse_quantity

_UPPER = re.compile(r"(?<!^)(?=[A-Z])")

# Real quantities and durations are a few characters long; longer text is refused before it is parsed,
# since "1e999999" would otherwise make a million-digit integer (seconds of CPU) or a decimal overflow.
MAX_QUANTITY_TEXT = 64
MAX_DURATION_TEXT = 64
_EXPONENT = re.compile(r"[+-]?(\d*)\.?(\d*)[eE]([+-]?\d+)")


@functools.lru_cache(maxsize=1024)  # field names are few; `get` asks for the same ones for every object
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


def sequence(value: Any, subject: Subject, field: str, limit: int | None = None) -> list[Any]:
    """The value as a list; `limit`: the most entries the wire takes (the list travels whole)."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise subject.error(field, f"expected a list, got {type(value).__name__}")
    if limit is not None:
        bounds.count(value, subject, field, limit)
    return list(value)


def text(value: Any, subject: Subject, field: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise subject.error(field, f"expected a string, got {quoted(value)}")
    return wire_text(value, subject, field)


def wire_text(value: str, subject: Subject, field: str) -> str:
    """The string, if protobuf can send it: a lone surrogate (possible from JSON "\\ud800") cannot be UTF-8."""
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise subject.error(field, f"{quoted(value)} is not valid UTF-8 text") from None
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
        return str(value)  # ValueError past 4,300 digits: value_text names the field
    return json.dumps(value, separators=(",", ":"), default=str)


def value_text(value: Any, subject: Subject, field: str) -> str:
    """as_text, with any value that has no text form (a 5,000-digit number, a lone surrogate) refused by name."""
    try:
        return wire_text(as_text(value), subject, field)
    except ValueError as exc:
        if isinstance(exc, IntakeError):
            raise
        raise subject.error(field, f"{quoted(value)} cannot be read as text") from None


def string_map(value: Any, subject: Subject, field: str) -> dict[str, str]:
    """Labels, annotations, selectors: within the wire's bounds on entries, key and value lengths."""
    out: dict[str, str] = {}
    raw = mapping(value, subject, field)
    bounds.count(raw, subject, field)
    for key, item in raw.items():
        name = value_text(key, subject, f"{field} key {quoted(key)}") if not isinstance(key, str) else key
        name = bounds.key(wire_text(name, subject, f"{field} key"), subject, field)
        text = value_text(item, subject, f"{field}[{name}]")
        out[name] = bounds.length(text, subject, f"{field}[{name}]", limits.MAX_VALUE)
    return out


def metadata(obj: Mapping[str, Any], kind: str, *, namespaced: bool) -> tuple[Mapping[str, Any], Subject]:
    """The object's metadata and the Subject naming it; a missing name is the first error worth raising."""
    if not isinstance(obj, Mapping):
        raise Subject(kind, "", "<unnamed>").error("", f"expected an object, got {type(obj).__name__}")
    raw = get(obj, "metadata")
    meta = raw if isinstance(raw, Mapping) else {}
    name = meta.get("name")
    namespace = meta.get("namespace") or ("default" if namespaced else "")
    subject = Subject(kind, _shown(namespace), _shown(name) if name else "<unnamed>")
    if raw is not None and not isinstance(raw, Mapping):
        raise subject.error("metadata", f"expected a mapping, got {type(raw).__name__}")
    if not isinstance(name, str) or not name:
        raise subject.error("metadata.name", "is required")
    if not isinstance(namespace, str):
        raise subject.error("metadata.namespace", f"expected a string, got {quoted(namespace)}")
    if namespaced and not names.is_dns_label(namespace):
        # The namespace is half of every pod and gang key ("namespace/name"): a "/" in it breaks them.
        raise subject.error("metadata.namespace", f"{quoted(namespace)} is not {names.LABEL_RULE}")
    return meta, subject


def subdomain_name(subject: Subject) -> None:
    """Refuse an object name that is not a DNS-1123 subdomain (pods and nodes; gangs check their own)."""
    if not names.is_dns_subdomain(subject.name):
        raise subject.error("metadata.name", f"{quoted(subject.name)} is not {names.SUBDOMAIN_RULE}")


def _shown(value: Any) -> str:
    """A name as the error text shows it; a name of the wrong type is shown quoted, and short."""
    if isinstance(value, str):
        return value if len(value) <= 300 else quoted(value)
    return quoted(value)


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
    try:
        return moment.timestamp()
    except (OverflowError, ValueError):  # year 1 with a positive offset falls before datetime.min
        raise subject.error(field, f"{quoted(value)} is out of range") from None


def resource_list(value: Any, subject: Subject, field: str) -> Resources:
    """A ResourceList in milli-units; each bad quantity is reported with its own path (`...requests.cpu`)."""
    out: Resources = {}
    raw = mapping(value, subject, field)
    bounds.count(raw, subject, field)
    for key, quantity in raw.items():
        name = key if isinstance(key, str) else value_text(key, subject, f"{field} key {quoted(key)}")
        name = bounds.key(wire_text(name, subject, f"{field} key"), subject, field, "resource name")
        out[name] = quantity_milli(quantity, subject, f"{field}.{name}")
    return out


# Quantity texts already accepted, and their milli-units: a cluster's pods repeat a handful ("100m", "64Mi"),
# and parsing one costs ~6 us (the exact decimal context), a tenth of parsing a whole pod. Only accepted texts
# are kept, so a refusal is always worked out (and worded) afresh; bounded, cleared when full.
_ACCEPTED: dict[str, int] = {}
_ACCEPTED_MAX = 4096


def quantity_milli(quantity: Any, subject: Subject, field: str) -> int:
    """One quantity in milli-units, refused by name when it is not a quantity or does not fit an int64."""
    if type(quantity) is str and (known := _ACCEPTED.get(quantity)) is not None:
        return known
    if isinstance(quantity, int) and not isinstance(quantity, bool) and quantity.bit_length() > 64:
        raise subject.error(field, f"{quoted(quantity)} is too large (at most {limits.MAX_AMOUNT} milli-units)")
    if isinstance(quantity, str):
        stripped = quantity.strip()
        if len(stripped) > MAX_QUANTITY_TEXT:
            raise subject.error(field, f"{quoted(quantity)} is not a quantity (too long)")
        exponent = _EXPONENT.fullmatch(stripped)
        if exponent is not None and int(exponent.group(3)) > 40 and (exponent.group(1) + exponent.group(2)).strip("0"):
            raise subject.error(field, f"{quoted(quantity)} is too large (at most {limits.MAX_AMOUNT} milli-units)")
    try:
        milli = parse_quantity(quantity)
    except QuantityError as exc:
        raise subject.error(field, str(exc)) from None
    if milli > limits.MAX_AMOUNT:
        raise subject.error(field, f"{quoted(quantity)} is too large (at most {limits.MAX_AMOUNT} milli-units)")
    if type(quantity) is str:
        if len(_ACCEPTED) >= _ACCEPTED_MAX:
            _ACCEPTED.clear()
        _ACCEPTED[quantity] = milli
    return milli


def checked_total(resources: Resources, subject: Subject, field: str) -> Resources:
    """A sum of quantities (containers, overhead) must still be an amount the services accept."""
    bounds.count(resources, subject, field)
    for name, amount in resources.items():
        if amount > limits.MAX_AMOUNT:
            raise subject.error(
                f"{field}.{name}", f"the total of {amount} milli-units is too large (at most {limits.MAX_AMOUNT})"
            )
    return resources


def duration_seconds(value: Any) -> float:
    """A Go duration or a number of seconds, finite as the protobuf double must be; ValueError otherwise."""
    if isinstance(value, str) and len(value.strip()) > MAX_DURATION_TEXT:
        raise ValueError(f"{quoted(value)} is not a duration (too long)")
    try:
        seconds = parse_duration(value)
    except ArithmeticError:  # decimal.Overflow
        raise ValueError(f"{quoted(value)} is too long a duration") from None
    if not math.isfinite(seconds):
        raise ValueError(f"{quoted(value)} is too long a duration")
    return seconds
