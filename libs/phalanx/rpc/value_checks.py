"""The checks of single values that every request shares: times, texts, counts, keys, maps, resources.

Each returns a list of errors naming the field (`pods[3].labels: ...`); the bounds are phalanx.model.limits,
the table the intake checks too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence, Sized
from typing import Any

from phalanx.intake import names
from phalanx.model.limits import MAX_AMOUNT, MAX_ENTRIES, MAX_ITEMS, MAX_KEY, MAX_TIME, MAX_VALUE


def shown(value: object) -> str:
    """A user's value in an error, cut short: a 1 MB name must not make a 1 MB error."""
    if isinstance(value, str) and len(value) > 100:
        return f"{value[:100]!r}... ({len(value)} characters)"
    return repr(value)


def check_time(value: float, path: str, *, zero_ok: bool = True, negative_ok: bool = False) -> list[str]:
    """A time or duration: finite, within MAX_TIME, non-negative unless negative has a meaning."""
    if not math.isfinite(value):
        return [f"{path}: {value!r} is not a finite number of seconds"]
    if value < 0 and not negative_ok:
        return [f"{path}: {value!r} is negative"]
    if abs(value) > MAX_TIME:
        return [f"{path}: {value!r} is too large (at most {MAX_TIME:g} seconds)"]
    if value == 0 and not zero_ok:
        return [f"{path}: is required"]
    return []


def check_text(value: str, path: str, limit: int) -> list[str]:
    return [f"{path}: {len(value)} characters is too long (at most {limit})"] if len(value) > limit else []


def check_count(items: Sized, path: str, limit: int = MAX_ITEMS) -> list[str]:
    return [f"{path}: {len(items)} items is too many (at most {limit})"] if len(items) > limit else []


def check_keys(keys: Sequence[str], path: str, what: str) -> list[str]:
    """A list of "namespace/name" keys (pods or gangs)."""
    errors = check_count(keys, path)
    if errors:
        return errors
    return [
        f"{path}[{i}]: {shown(k)} is not a {what} key (namespace/name)"
        for i, k in enumerate(keys)
        if not names.is_object_key(k)
    ]


def check_node_names(items: Sequence[str], path: str) -> list[str]:
    errors = check_count(items, path)
    if errors:
        return errors
    return [
        f"{path}[{i}]: {shown(n)} is not {names.SUBDOMAIN_RULE}"
        for i, n in enumerate(items)
        if not names.is_dns_subdomain(n)
    ]


def check_string_map(m: Mapping[str, str], path: str) -> list[str]:
    errors = check_count(m, path, MAX_ENTRIES)
    if errors:
        return errors
    # Every pod's labels and annotations pass here: the error paths are formatted only for a map that fails.
    if all(key and len(key) <= MAX_KEY and len(value) <= MAX_VALUE for key, value in m.items()):
        return errors
    for key, value in m.items():
        if not key or len(key) > MAX_KEY:
            errors.append(f"{path}: key {shown(key)} must have 1 to {MAX_KEY} characters")
        errors += check_text(value, f"{path}[{shown(key)}]", MAX_VALUE)
    return errors


def check_resources(m: Mapping[str, int], path: str) -> list[str]:
    """Milli-units: a negative amount would drive a node's recorded usage below zero."""
    errors = check_count(m, path, MAX_ENTRIES)
    if errors:
        return errors
    if all(key and len(key) <= MAX_KEY and 0 <= amount <= MAX_AMOUNT for key, amount in m.items()):
        return errors
    for key, amount in m.items():
        if not key or len(key) > MAX_KEY:
            errors.append(f"{path}: resource name {shown(key)} must have 1 to {MAX_KEY} characters")
        if amount < 0:
            errors.append(f"{path}[{shown(key)}]: {amount} is negative")
        elif amount > MAX_AMOUNT:  # the Redis state adds amounts up as doubles (see intake.fields)
            errors.append(f"{path}[{shown(key)}]: {amount} is too large (at most {MAX_AMOUNT})")
    return errors


def check_resource_names(items: Sequence[str], path: str) -> list[str]:
    return check_count(items, path, MAX_ENTRIES) or [
        f"{path}[{i}]: resource name {shown(r)} must have 1 to {MAX_KEY} characters"
        for i, r in enumerate(items)
        if not r or len(r) > MAX_KEY
    ]


def check_each(items: Sequence[Any], path: str, check: Any, limit: int = MAX_ITEMS) -> list[str]:
    errors = check_count(items, path, limit)
    if errors:
        return errors
    for i, item in enumerate(items):
        errors += check(item, f"{path}[{i}]")
    return errors
