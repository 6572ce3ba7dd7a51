"""bench-startup's table: the workload it was run on (the 50-node start, or bench-k8s's gang burst with
--shape burst) and each label's layout, with the combined process's start-up CPU in its own row."""

from __future__ import annotations

from typing import Any

from phalanx.bench.startup import BURST, SHAPE, SHAPES, summarize, table


def _row(first: float, cpu: dict[str, float]) -> dict[str, Any]:
    return {
        "first_binding_s": first,
        "launch_to_last_binding_s": first + 1,
        "phases_s": {},
        "load_average_at_launch": [0.1],
        "other_cpu_s": 0.0,
        "window_s": 3.0,
        "scheduler_cpu_s": sum(cpu.values()),
        "processes": {},
        "startup_cpu_s": cpu,
        "phalanx_cpu_to_first_binding_s": sum(cpu.values()),
        "machine_busy_to_first_binding_s": sum(cpu.values()) + 0.5,
        "correct": True,
    }


def _set(layout: str, cpu: dict[str, float]) -> dict[str, Any]:
    rows = [_row(0.8, cpu), _row(0.9, cpu), _row(1.1, cpu)]
    return {"machine": {"git_commit": "abc", "layout": layout}, "summary": summarize(rows), "runs": rows}


def test_the_burst_table_names_its_workload_and_each_labels_layout() -> None:
    doc = {
        "sets": {
            "three": _set("services", {"redis": 0.03, "queue": 0.3, "binder": 0.4, "scheduler": 0.9}),
            "one": _set("combined", {"redis": 0.03, "combined": 1.2}),
        }
    }
    text = table(doc, BURST)
    assert "500 nodes" in text and "1,000 gangs of 3" in text
    assert "layout services" in text and "layout combined" in text
    combined = next(line for line in text.splitlines() if line.strip().startswith("combined "))
    assert combined.split()[1:] == ["-", "1.20"]  # the three processes' set has no combined process
    first = next(line for line in text.splitlines() if line.startswith("launch -> first binding, s"))
    assert first.split()[-2:] == ["0.90", "0.90"]  # medians


def test_the_default_shape_is_the_fifty_node_start() -> None:
    assert SHAPES["startup"] is SHAPE and "50 nodes" in table({"sets": {}}, SHAPE)
