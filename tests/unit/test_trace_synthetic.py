"""`phalanx trace synthetic`: shape syntax, gang mix, arrivals, durations, determinism."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import yaml

from phalanx.model import keys
from phalanx.trace import synthetic
from phalanx.trace.cli import add_trace_commands
from phalanx.trace.writer import TraceError


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="phalanx")
    add_trace_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


def generate(tmp_path: Path, *extra: str, name: str = "out.yaml") -> tuple[str, list[dict[str, Any]]]:
    out = tmp_path / name
    assert run_cli(["trace", "synthetic", "-o", str(out), *extra]) == 0
    text = out.read_text()
    return text, list(yaml.safe_load_all(text))


def pods_of(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == "Pod"]


def annotation(pod: dict[str, Any], key: str) -> str | None:
    return pod["metadata"].get("annotations", {}).get(key)


BASIC = ["--nodes", "2x8gpu,64cpu,512Gi", "--gangs", "4x2"]


def test_node_shape_syntax() -> None:
    group = synthetic.parse_node_group("100x8gpu,96cpu,768Gi,model=A100,pods=50")
    assert group == synthetic.NodeGroup(count=100, gpus=8, cpu_milli=96000, memory="768Gi", model="A100", max_pods=50)
    cpu_only = synthetic.parse_node_group("3x0.5cpu,2048Mi")
    assert (cpu_only.count, cpu_only.gpus, cpu_only.cpu_milli, cpu_only.memory) == (3, 0, 500, "2048Mi")


@pytest.mark.parametrize(
    "text",
    [
        "8gpu,64cpu,512Gi",
        "0x8gpu,64cpu,512Gi",
        "2x8gpu,512Gi",
        "2x8gpu,64cpu",
        "2x8gpu,64cpu,512",
        "2x8gpu,64cpu,512Gi,color=red",
    ],
)
def test_bad_node_shapes(text: str) -> None:
    with pytest.raises(TraceError, match="--nodes"):
        synthetic.parse_node_group(text)


def test_gang_kind_syntax_and_defaults() -> None:
    assert synthetic.parse_gang_kind("16x8") == synthetic.GangKind(
        size=16, gpus_per_pod=8, cpu_milli=32000, memory="256Gi", weight=1.0
    )
    kind = synthetic.parse_gang_kind("8x1,6cpu,48Gi,model=A100|H100@3")
    assert (kind.size, kind.gpus_per_pod, kind.cpu_milli, kind.memory, kind.models, kind.weight) == (
        8,
        1,
        6000,
        "48Gi",
        ("A100", "H100"),
        3.0,
    )
    cpu_only = synthetic.parse_gang_kind("4x0")
    assert (cpu_only.cpu_milli, cpu_only.memory) == (1000, "4Gi")


@pytest.mark.parametrize("text", ["8", "8xq", "0x1", "8x1@0", "8x1@x", "8x1,lots"])
def test_bad_gang_kinds(text: str) -> None:
    with pytest.raises(TraceError, match="--gangs"):
        synthetic.parse_gang_kind(text)


def test_duration_syntax() -> None:
    assert synthetic.parse_duration("30m") == synthetic.DurationSpec(1800.0, 1800.0)
    assert synthetic.parse_duration("1h30m") == synthetic.DurationSpec(5400.0, 5400.0)
    assert synthetic.parse_duration("90") == synthetic.DurationSpec(90.0, 90.0)
    assert synthetic.parse_duration("10m-2h") == synthetic.DurationSpec(600.0, 7200.0)
    assert synthetic.parse_duration("none") == synthetic.DurationSpec(None, None)
    for bad in ("soon", "2h-10m", "5x", "-3"):
        with pytest.raises(TraceError, match="--duration"):
            synthetic.parse_duration(bad)


def test_nodes_and_gang_pods(tmp_path: Path) -> None:
    _, docs = generate(
        tmp_path,
        "--nodes",
        "2x8gpu,64cpu,512Gi,model=A100",
        "--nodes",
        "1x32cpu,128Gi",
        "--gangs",
        "4x2,8cpu,64Gi",
        "--count",
        "3",
        "--rate",
        "2",
    )
    nodes = [d for d in docs if d["kind"] == "Node"]
    assert [n["metadata"]["name"] for n in nodes] == ["node-0-0000", "node-0-0001", "node-1-0000"]
    assert nodes[0]["status"]["allocatable"] == {
        "cpu": "64000m",
        "memory": "512Gi",
        "nvidia.com/gpu": "8",
        "pods": "110",
    }
    assert nodes[0]["metadata"]["labels"]["phalanx.dev/gpu-model"] == "A100"
    assert "nvidia.com/gpu" not in nodes[2]["status"]["allocatable"]
    pods = pods_of(docs)
    assert len(pods) == 12
    first = pods[0]
    assert first["metadata"]["name"] == "gang-00001-0"
    assert first["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "8000m",
        "memory": "64Gi",
        "nvidia.com/gpu": "2",
    }
    assert annotation(first, keys.KOORD_NAME) == "gang-00001"
    assert annotation(first, keys.KOORD_MIN_AVAILABLE) == "4"
    assert annotation(first, keys.KOORD_TOTAL_NUMBER) == "4"
    assert annotation(first, keys.SIM_DURATION) == "1800s"
    # 2 gangs per minute, fixed spacing: 30 s apart, all pods of a gang together.
    stamps = [p["metadata"]["creationTimestamp"] for p in pods]
    assert stamps == ["2026-01-01T00:00:00Z"] * 4 + ["2026-01-01T00:00:30Z"] * 4 + ["2026-01-01T00:01:00Z"] * 4


def test_model_constraint_becomes_affinity(tmp_path: Path) -> None:
    _, docs = generate(tmp_path, *BASIC[:2], "--gangs", "2x1,model=A100|H100", "--count", "1")
    terms = pods_of(docs)[0]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "phalanx.dev/gpu-model", "operator": "In", "values": ["A100", "H100"]}
    ]


def test_weighted_mix_and_count(tmp_path: Path) -> None:
    _, docs = generate(tmp_path, *BASIC[:2], "--gangs", "2x1@9", "--gangs", "3x8@1", "--count", "200")
    sizes: dict[str, int] = {}
    for pod in pods_of(docs):
        gang = annotation(pod, keys.KOORD_NAME)
        assert gang is not None
        sizes[gang] = sizes.get(gang, 0) + 1
    assert len(sizes) == 200
    assert set(sizes.values()) == {2, 3}
    small = sum(1 for size in sizes.values() if size == 2)
    assert 150 < small < 195  # about 90% of 200


def test_same_seed_same_file_different_seed_differs(tmp_path: Path) -> None:
    args = [
        *BASIC[:2],
        "--gangs",
        "2x1",
        "--gangs",
        "4x8",
        "--count",
        "30",
        "--arrivals",
        "poisson",
        "--duration",
        "10m-2h",
    ]
    first, _ = generate(tmp_path, *args, "--seed", "5", name="a.yaml")
    again, _ = generate(tmp_path, *args, "--seed", "5", name="b.yaml")
    other, _ = generate(tmp_path, *args, "--seed", "6", name="c.yaml")
    assert first == again
    assert first != other


def test_poisson_arrivals_and_duration_range(tmp_path: Path) -> None:
    _, docs = generate(
        tmp_path, *BASIC, "--count", "50", "--rate", "6", "--arrivals", "poisson", "--duration", "10m-2h", "--seed", "3"
    )
    pods = pods_of(docs)
    gang_times = sorted({p["metadata"]["creationTimestamp"] for p in pods})
    assert gang_times[0] == "2026-01-01T00:00:00Z"
    assert len(gang_times) == 50  # gaps are random, not the fixed 10 s
    durations = {annotation(p, keys.SIM_DURATION) for p in pods}
    assert len(durations) > 1
    for text in durations:
        assert text is not None and text.endswith("s")
        assert 600 <= float(text[:-1]) <= 7200
    # Pods of one gang share arrival and duration.
    by_gang: dict[str, set[tuple[str, str | None]]] = {}
    for pod in pods:
        gang = annotation(pod, keys.KOORD_NAME) or ""
        by_gang.setdefault(gang, set()).add((pod["metadata"]["creationTimestamp"], annotation(pod, keys.SIM_DURATION)))
    assert all(len(values) == 1 for values in by_gang.values())


def test_arrival_mode_does_not_change_the_mix() -> None:
    base = synthetic.SyntheticOptions(
        nodes=(synthetic.parse_node_group("1x8gpu,64cpu,512Gi"),),
        gangs=(synthetic.parse_gang_kind("2x1"), synthetic.parse_gang_kind("3x2")),
        count=40,
        seed=9,
    )
    fixed = synthetic.generate(base)
    poisson = synthetic.generate(synthetic.SyntheticOptions(**{**_fields(base), "poisson": True}))
    assert [p.name for p in fixed.pods] == [p.name for p in poisson.pods]


def _fields(options: synthetic.SyntheticOptions) -> dict[str, Any]:
    return {name: getattr(options, name) for name in synthetic.SyntheticOptions.__slots__}


def test_duration_none_means_no_annotation(tmp_path: Path) -> None:
    _, docs = generate(tmp_path, *BASIC, "--count", "2", "--duration", "none")
    assert all(annotation(p, keys.SIM_DURATION) is None for p in pods_of(docs))


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for extra in (
        ["--nodes", "2x8gpu", "--gangs", "4x2"],
        [*BASIC, "--rate", "0"],
        [*BASIC, "--duration", "x"],
        [*BASIC, "--count", "0"],
        [*BASIC, "--namespace", "Bad_NS"],
    ):
        assert run_cli(["trace", "synthetic", "-o", str(tmp_path / "x.yaml"), *extra]) == 2, extra
        err = capsys.readouterr().err
        assert err.startswith("phalanx trace: ") and "Traceback" not in err
        assert err.count("\n") == 1


def test_summary_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    generate(tmp_path, *BASIC, "--count", "3")
    err = capsys.readouterr().err
    assert "2 nodes (16 GPUs), 12 pods (24 GPUs requested), 3 gangs (12 pods)" in err
