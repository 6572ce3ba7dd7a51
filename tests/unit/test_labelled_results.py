"""bench-startup, bench-restart and bench-idle keep their results by label across runs, in one JSON file and
the table of every label beside it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from phalanx.bench.report import LabelledResults


def labels(doc: dict[str, Any]) -> str:
    return " ".join(f"{k}={v['x']}" for k, v in doc["sets"].items())


def test_a_label_is_added_beside_the_others_and_replaced_when_run_again(tmp_path: Path) -> None:
    out = tmp_path / "bench"  # made if missing
    assert LabelledResults(out, "idle").save("before", {"x": 1}, labels) == "before=1"
    results = LabelledResults(out, "idle")  # a later run reads what the first wrote
    assert results.get("before") == {"x": 1} and results.get("after") is None
    assert results.save("after", {"x": 2}, labels) == "before=1 after=2"
    assert LabelledResults(out, "idle").save("before", {"x": 3}, labels) == "before=3 after=2"
    assert json.loads((out / "idle.json").read_text()) == {"sets": {"before": {"x": 3}, "after": {"x": 2}}}
    assert (out / "idle.txt").read_text() == "before=3 after=2\n"
