"""Kubernetes quantities as integer milli-units."""

from __future__ import annotations

import pytest

from phalanx.model.quantity import QuantityError, add, format_milli, parse_quantity

Gi = 2**30
Mi = 2**20


@pytest.mark.parametrize(
    "text, milli",
    [
        ("500m", 500),
        ("2Gi", 2 * Gi * 1000),
        ("100Mi", 100 * Mi * 1000),
        ("1Ki", 1024 * 1000),
        ("1.5", 1500),
        ("0.1", 100),
        ("1e3", 1_000_000),
        ("1E3", 1_000_000),
        ("1e-3", 1),
        ("2k", 2_000_000),
        ("1M", 1_000_000_000),
        ("3G", 3 * 10**12),
        ("1T", 10**15),
        (".5", 500),
        ("1.", 1000),
        ("+2", 2000),
        (" 4 ", 4000),
        ("0", 0),
        ("0m", 0),
        ("1.5Gi", int(1.5 * Gi) * 1000),
        ("1000000u", 1000),
    ],
)
def test_parse_text(text: str, milli: int) -> None:
    assert parse_quantity(text) == milli


@pytest.mark.parametrize(
    "value, milli",
    [
        (0, 0),
        (1, 1000),
        (64, 64_000),
        (1.5, 1500),
        (0.1, 100),  # not 100.00000000000001 rounded up to 101
        (2.0, 2000),
        (0.25, 250),
    ],
)
def test_parse_numbers(value: int | float, milli: int) -> None:
    assert parse_quantity(value) == milli


@pytest.mark.parametrize(
    "value, milli",
    [
        ("1n", 1),  # sub-milli values round up, as Kubernetes does
        ("1u", 1),
        ("999999n", 1),
        ("1000001n", 2),
        ("0.0001", 1),
        ("1.0001", 1001),
        ("1e-4", 1),
        (0.0001, 1),
        (1.0000001, 1001),
    ],
)
def test_sub_milli_values_round_up(value: str | float, milli: int) -> None:
    assert parse_quantity(value) == milli


@pytest.mark.parametrize(
    "value, message",
    [
        ("abc", "'abc' is not a quantity (expected e.g. 500m, 2Gi, 1.5)"),
        ("1.2.3", "'1.2.3' is not a quantity"),
        ("", "'' is not a quantity"),
        ("Gi", "'Gi' is not a quantity"),
        ("2 Gi", "'2 Gi' is not a quantity"),
        ("2gi", "'2gi' is not a quantity"),
        ("1e", "'1e' is not a quantity"),
        ("0x10", "'0x10' is not a quantity"),
        ("-1", "'-1' is negative"),
        ("-500m", "'-500m' is negative"),
        (-1, "-1 is negative"),
        (-0.5, "-0.5 is negative"),
        (True, "True is not a quantity"),
        (False, "False is not a quantity"),
        (None, "None is not a quantity"),
        ([1], "[1] is not a quantity"),
        (float("nan"), "nan is not a quantity"),
        (float("inf"), "inf is not a quantity"),
        ("1e30", "'1e30' is too large"),
        # The kubernetes client's parser reads these; the API server refuses them, and so does Phalanx.
        ("1K", "'1K' is not a quantity"),
        ("1e3Ki", "'1e3Ki' is not a quantity"),
        ("1_000", "'1_000' is not a quantity"),
        ("NaN", "'NaN' is not a quantity"),
        ("Infinity", "'Infinity' is not a quantity"),
        ("\u0661\u0662", "'\u0661\u0662' is not a quantity"),  # Arabic-Indic digits
        (10**18, f"{10**18} is too large"),
    ],
)
def test_bad_values_have_clear_messages(value: object, message: str) -> None:
    with pytest.raises(QuantityError) as exc:
        parse_quantity(value)
    assert str(exc.value).startswith(message)


def test_the_largest_int64_milli_value_is_accepted() -> None:
    assert parse_quantity(f"{(2**63 - 1) // 1000}") == (2**63 - 1) // 1000 * 1000
    assert parse_quantity("9223372036854775807m") == 2**63 - 1
    with pytest.raises(QuantityError, match="too large"):
        parse_quantity("9223372036854775808m")


@pytest.mark.parametrize(
    "text, milli",
    [
        ("1.000000000000000000000000000001m", 2),  # 31 significant digits: more than Decimal's default 28
        ("1.0000000000000000000000000001Ki", 1_024_001),
        ("0.000000000000000000000000000000000001", 1),
    ],
)
def test_long_quantities_round_up_exactly(text: str, milli: int) -> None:
    assert parse_quantity(text) == milli


def test_quantity_error_is_a_value_error() -> None:
    assert issubclass(QuantityError, ValueError)


def test_add_sums_in_place() -> None:
    into = {"cpu": 500}
    assert add(into, {"cpu": 250, "memory": 7}) is into
    assert into == {"cpu": 750, "memory": 7}


@pytest.mark.parametrize(
    "name, milli, text",
    [
        ("cpu", 500, "0.5"),
        ("cpu", 2000, "2"),
        ("cpu", 1, "0.001"),
        ("memory", 2 * Gi * 1000, "2Gi"),
        ("memory", int(1.5 * Gi) * 1000, "1.5Gi"),
        ("memory", 100 * Mi * 1000, "100Mi"),
        ("memory", 512 * 1024 * 1000, "512Ki"),
        ("memory", 1000 * 1000, "1000"),
        ("memory", 0, "0"),
        ("ephemeral-storage", 10 * Gi * 1000, "10Gi"),
        ("nvidia.com/gpu", 3000, "3"),
        ("pods", 110_000, "110"),
    ],
)
def test_format_milli(name: str, milli: int, text: str) -> None:
    assert format_milli(name, milli) == text


@pytest.mark.parametrize("text", ["500m", "2Gi", "100Mi", "3", "1.5Gi"])
def test_format_round_trips_through_parse(text: str) -> None:
    name = "memory" if text.endswith("i") else "cpu"
    assert parse_quantity(format_milli(name, parse_quantity(text))) == parse_quantity(text)


def _grammar_samples() -> list[str]:
    """Quantities over the API server's grammar: signs, integer and fraction forms, every suffix, exponents."""
    numbers = ["0", "1", "7", "12", "1.5", ".25", "3.", "100", "0.001", "999999", "2.000000001", "+4", "-0"]
    suffixes = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
    exponents = ["e3", "E-2", "e+1", "e0"]
    return [n + s for n in numbers for s in suffixes] + [n + e for n in numbers for e in exponents]


def test_the_arithmetic_is_the_kubernetes_clients() -> None:
    """parse_quantity no longer calls the client's function (its import loads the whole client): every
    quantity of the grammar reads as that function reads it, to the milli-unit, rounded up."""
    import math
    from decimal import localcontext

    from kubernetes.utils import parse_quantity as client_parse

    from phalanx.model.quantity import _EXACT

    checked = 0
    for text in _grammar_samples():
        with localcontext(_EXACT):
            expected = math.ceil(client_parse(text) * 1000)
        if expected < 0 or expected > 2**63 - 1:
            with pytest.raises(QuantityError):  # negative, or past int64 milli-units: refused here
                parse_quantity(text)
            continue
        checked += 1
        assert parse_quantity(text) == expected, text
    assert checked > 200


@pytest.mark.starts_processes
def test_parsing_a_quantity_does_not_load_the_kubernetes_client() -> None:
    import subprocess
    import sys

    code = (
        "import sys\nfrom phalanx.model.quantity import parse_quantity\n"
        "assert parse_quantity('1.5Gi') == 1610612736000 and parse_quantity('250m') == 250\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout
