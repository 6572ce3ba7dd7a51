"""Refusing at the intake what the services would refuse on the wire: phalanx.model.limits, named by field.

Each helper raises the IntakeError naming the object and the field, so `phalanx simulate` and the cluster
feed report the bad input where it entered instead of sending a request the services refuse as a whole.
"""

from __future__ import annotations

from collections.abc import Sized

from phalanx.intake.errors import Subject, quoted
from phalanx.model import limits


def count(items: Sized, subject: Subject, field: str, limit: int = limits.MAX_ENTRIES) -> None:
    """At most `limit` entries (a map, a list); checked before the entries are read, so it stays cheap."""
    if len(items) > limit:
        raise subject.error(field, f"{len(items)} entries is above the maximum {limit}")


def length(text: str, subject: Subject, field: str, limit: int = limits.MAX_KEY) -> str:
    if len(text) > limit:
        raise subject.error(field, f"{len(text)} characters is above the maximum {limit}")
    return text


def key(name: str, subject: Subject, field: str, what: str = "key") -> str:
    """A map key (label, annotation, resource name): 1 to MAX_KEY characters. The key is quoted short: a
    1 MB key must not make a 1 MB error, nor a field path."""
    if not name:
        raise subject.error(field, f"a {what} must not be empty")
    if len(name) > limits.MAX_KEY:
        raise subject.error(
            field, f"{what} {quoted(name)} has {len(name)} characters, above the maximum {limits.MAX_KEY}"
        )
    return name


def at_most(value: int, subject: Subject, field: str, limit: int) -> None:
    """An integer within its protobuf field: a value past it would fail to serialize, or wrap."""
    if value > limit:
        raise subject.error(field, f"{quoted(value)} is above the maximum {limit}")


def seconds(value: float, subject: Subject, field: str, written: object = None) -> float:
    """A time or duration the services accept: within MAX_TIME either way (a negative one can have a
    meaning). `written` is the value as the user wrote it, shown in the error instead of the float."""
    if abs(value) > limits.MAX_TIME:
        shown = quoted(written) if written is not None else f"{value:g}"
        side = "above the maximum " if value > 0 else "below the minimum -"
        raise subject.error(field, f"{shown} is {side}{int(limits.MAX_TIME)} seconds")
    return value
