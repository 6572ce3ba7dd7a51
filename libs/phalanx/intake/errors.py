"""The one error type of the intake: it always says which object and which field were refused."""

from __future__ import annotations

import json
from dataclasses import dataclass


class IntakeError(ValueError):
    """A Kubernetes object that cannot be turned into the model.

    Reads like `Pod default/worker-0: metadata.annotations[...]: "abc" is not a positive integer`, so the
    text can go unchanged into an Event or a pod condition.
    """

    def __init__(self, kind: str, namespace: str, name: str, field: str, message: str) -> None:
        self.kind = kind
        self.namespace = namespace
        self.name = name
        self.field = field
        self.message = message
        super().__init__(self._text())

    def _text(self) -> str:
        subject = f"{self.namespace}/{self.name}" if self.namespace else self.name
        where = f"{self.field}: " if self.field else ""
        return f"{self.kind} {subject}: {where}{self.message}"

    def __str__(self) -> str:
        return self._text()

    def __reduce__(self) -> tuple[type[IntakeError], tuple[str, str, str, str, str]]:
        # Exceptions pickle their args; ours are five fields, not the formatted text.
        return (type(self), (self.kind, self.namespace, self.name, self.field, self.message))


@dataclass(frozen=True, slots=True)
class Subject:
    """The object being read, so code deep inside a parser can raise a fully named error."""

    kind: str
    namespace: str
    name: str

    def error(self, field: str, message: str) -> IntakeError:
        return IntakeError(self.kind, self.namespace, self.name, field, message)

    def describe(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"


MAX_SHOWN = 100  # characters of a user's string echoed in an error; a 1 MB name must not make a 1 MB error


def quoted(value: object) -> str:
    """Show a user's value in double quotes, as kubectl does, so "" and " 5" stay visible."""
    if isinstance(value, str):
        shown = json.dumps(value[:MAX_SHOWN], ensure_ascii=False)
        return shown if len(value) <= MAX_SHOWN else f"{shown}... ({len(value)} characters)"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        # repr() of an int over 4,300 digits raises ValueError; such a number is only ever "too large".
        return f"a {value.bit_length()}-bit integer"
    if isinstance(value, (list, tuple, dict, set)):
        return f"a {type(value).__name__}"
    return repr(value)
