"""GangParams layers: a later declaration overrides what it says and keeps the rest."""

from __future__ import annotations

from phalanx.intake.errors import Subject
from phalanx.intake.gang_shapes import Declared, GangParams

POD = Subject("Pod", "ns", "p")


def declared(value: object, field: str) -> Declared[object]:
    return Declared(value, POD, field)


def test_a_layer_overrides_what_it_says_and_keeps_the_rest() -> None:
    base = GangParams(min_available=declared(3, "a"), wait_seconds=declared(30.0, "w"), queue="q1")  # type: ignore[arg-type]
    layer = GangParams(min_available=declared(4, "b"), min_resources={"cpu": 1000})  # type: ignore[arg-type]
    merged = base.overridden_by(layer)
    assert merged.min_available == declared(4, "b")
    assert merged.wait_seconds == declared(30.0, "w") and merged.queue == "q1"
    assert merged.min_resources == {"cpu": 1000} and merged.total_number is None
    assert base.min_available == declared(3, "a"), "the layers themselves are unchanged"


def test_a_layer_that_says_nothing_leaves_the_params_as_they_were() -> None:
    base = GangParams(min_available=declared(2, "a"))  # type: ignore[arg-type]
    assert base.overridden_by(GangParams()) is base
    assert GangParams().overridden_by(base) == base
