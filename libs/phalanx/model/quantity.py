"""Kubernetes resource quantities ("500m", "2Gi", "1.5", "1e3") as integer milli-units."""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from phalanx.model.objects import Resources

_SUFFIX: dict[str, Decimal] = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")


class QuantityError(ValueError):
    pass


_MAX_MILLI = 2**63 - 1  # quantities travel as int64 milli-units (numpy, protobuf)


def _checked(value: object, milli: int) -> int:
    if milli < 0:
        raise QuantityError(f"{value!r} is negative")
    if milli > _MAX_MILLI:
        raise QuantityError(f"{value!r} is too large")
    return milli


def parse_quantity(value: object) -> int:
    """Return the quantity in milli-units, rounded up as Kubernetes does for sub-milli precision."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return _checked(value, value * 1000)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{value!r} is not a quantity")
        return _checked(value, math.ceil(Decimal(repr(value)) * 1000))
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity")
    match = _QUANTITY.match(value.strip())
    if not match:
        raise QuantityError(f"{value!r} is not a quantity (expected e.g. 500m, 2Gi, 1.5)")
    number, exponent, suffix = match.groups()
    try:
        amount = Decimal(number) * (Decimal(f"1{exponent}") if exponent else _SUFFIX[suffix or ""])
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only valid decimals
        raise QuantityError(f"{value!r} is not a quantity") from exc
    if amount < 0:
        raise QuantityError(f"{value!r} is negative")
    return _checked(value, math.ceil(amount * 1000))


def parse_resource_list(raw: object, where: str) -> Resources:
    """Parse a ResourceList mapping; `where` names the field in error messages."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise QuantityError(f"{where}: expected a mapping of resource name to quantity, got {type(raw).__name__}")
    out: Resources = {}
    for name, quantity in raw.items():
        try:
            out[str(name)] = parse_quantity(quantity)
        except QuantityError as exc:
            raise QuantityError(f"{where}.{name}: {exc}") from None
    return out


def add(into: Resources, other: Resources) -> Resources:
    for name, amount in other.items():
        into[name] = into.get(name, 0) + amount
    return into


def format_milli(name: str, milli: int) -> str:
    """Human form for messages: cpu in cores, memory in Gi/Mi, others as counts."""
    if name == "memory" or name.endswith("storage"):
        value = milli / 1000
        for unit, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if value >= size:
                return f"{value / size:g}{unit}"
        return f"{value:g}"
    return f"{milli / 1000:g}"
