"""`phalanx trace import openb`: CSV columns and units, times, fractional GPUs, gang rules, errors."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from phalanx.model import keys
from phalanx.trace import openb
from phalanx.trace.cli import add_trace_commands
from phalanx.trace.writer import TraceError

POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
)
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "alibaba-gpu-v2023"


def write(tmp_path: Path, name: str, header: str, rows: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def default_nodes(tmp_path: Path) -> Path:
    return write(
        tmp_path,
        "nodes.csv",
        NODE_HEADER,
        [
            "n-0,64000,262144,2,P100",
            "n-1,96000,393216,8,V100M32",
            "n-2,32000,131072,0,",
        ],
    )


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="phalanx")
    add_trace_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


def import_docs(tmp_path: Path, pod_rows: list[str], *extra: str, header: str = POD_HEADER) -> list[dict[str, Any]]:
    pods = write(tmp_path, "pods.csv", header, pod_rows)
    out = tmp_path / "out.yaml"
    code = run_cli(
        [
            "trace",
            "import",
            "openb",
            "--nodes",
            str(default_nodes(tmp_path)),
            "--pods",
            str(pods),
            "-o",
            str(out),
            *extra,
        ]
    )
    assert code == 0
    return list(yaml.safe_load_all(out.read_text()))


def pods_of(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "Pod"}


def gang_of(pod: dict[str, Any]) -> tuple[str, str] | None:
    ann = pod["metadata"].get("annotations", {})
    if keys.KOORD_NAME not in ann:
        return None
    return ann[keys.KOORD_NAME], ann[keys.KOORD_MIN_AVAILABLE]


# ---------------------------------------------------------------- columns and units


def test_nodes_columns_and_units(tmp_path: Path) -> None:
    docs = import_docs(tmp_path, ["p-0,1000,1024,0,0,,BE,Running,0,10,0"])
    nodes = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Node"}
    assert set(nodes) == {"n-0", "n-1", "n-2"}
    assert nodes["n-0"]["status"]["allocatable"] == {
        "cpu": "64000m",
        "memory": "262144Mi",
        "nvidia.com/gpu": "2",
        "pods": "110",
    }
    assert nodes["n-0"]["metadata"]["labels"]["phalanx.dev/gpu-model"] == "P100"
    assert "nvidia.com/gpu" not in nodes["n-2"]["status"]["allocatable"]
    assert "phalanx.dev/gpu-model" not in nodes["n-2"]["metadata"]["labels"]
    assert nodes["n-0"]["metadata"]["creationTimestamp"] == "2026-01-01T00:00:00Z"


def test_model_label_is_sanitised(tmp_path: Path) -> None:
    nodes = write(tmp_path, "nodes.csv", NODE_HEADER, ["n-0,1000,1024,1,Tesla V100 (32GB)"])
    pods = write(tmp_path, "pods.csv", POD_HEADER, ["p-0,1000,1024,1,1000,Tesla V100 (32GB),LS,Running,0,5,0"])
    result = openb.import_openb(nodes, pods)
    assert result.workload.nodes[0].labels["phalanx.dev/gpu-model"] == "Tesla-V100-32GB"
    assert result.workload.pods[0].gpu_models == ("Tesla-V100-32GB",)


def test_pod_requests_and_scheduler(tmp_path: Path) -> None:
    docs = import_docs(
        tmp_path,
        [
            "cpu-pod,2000,4096,0,0,,BE,Running,0,100,0",
            "gpu-pod,12000,16384,2,1000,,LS,Running,5,100,7",
            "empty-milli,8000,8192,1,,,LS,Running,6,100,6",
        ],
    )
    pods = pods_of(docs)
    cpu = pods["cpu-pod"]["spec"]["containers"][0]["resources"]
    assert cpu["requests"] == {"cpu": "2000m", "memory": "4096Mi"}
    gpu = pods["gpu-pod"]["spec"]["containers"][0]["resources"]
    assert gpu["requests"] == {"cpu": "12000m", "memory": "16384Mi", "nvidia.com/gpu": "2"}
    assert gpu["limits"] == {"nvidia.com/gpu": "2"}
    assert pods["empty-milli"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "1"
    for pod in pods.values():
        assert pod["spec"]["schedulerName"] == "phalanx"
        assert pod["metadata"]["namespace"] == "default"
        assert "affinity" not in pod["spec"]


def test_creation_timestamps_and_durations(tmp_path: Path) -> None:
    docs = import_docs(
        tmp_path,
        [
            "late,1000,1024,0,0,,BE,Running,3725,4000,3730",  # created 1h2m5s in: runs 4000 - 3730
            "first,1000,1024,0,0,,BE,Running,5,35,5",
            "pending,1000,1024,0,0,,BE,Pending,10,70,",  # never scheduled: deletion - creation
            "no-deletion,1000,1024,0,0,,BE,Running,11,,11",
            "backwards,1000,1024,0,0,,BE,Running,12,8,12",
            "half,1000,1024,0,0,,BE,Running,12.25,13.75,12.25",
        ],
    )
    pods = pods_of(docs)
    stamps = {name: pod["metadata"]["creationTimestamp"] for name, pod in pods.items()}
    assert stamps["first"] == "2026-01-01T00:00:05Z"
    assert stamps["late"] == "2026-01-01T01:02:05Z"
    assert stamps["half"] == "2026-01-01T00:00:12.250Z"
    durations = {name: pod["metadata"].get("annotations", {}).get(keys.SIM_DURATION) for name, pod in pods.items()}
    assert durations == {
        "late": "270s",
        "first": "30s",
        "pending": "60s",
        "no-deletion": None,
        "backwards": None,
        "half": "1.5s",
    }
    # Written in arrival order, not row order.
    assert list(pods) == ["first", "pending", "no-deletion", "backwards", "half", "late"]


def test_gpu_spec_becomes_required_affinity(tmp_path: Path) -> None:
    docs = import_docs(
        tmp_path,
        [
            "spec-pod,1000,1024,1,1000,V100M16|V100M32|V100M32,LS,Running,0,10,0",
            "any-pod,1000,1024,1,1000,,LS,Running,0,10,0",
        ],
    )
    pods = pods_of(docs)
    affinity = pods["spec-pod"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert affinity == {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": "phalanx.dev/gpu-model", "operator": "In", "values": ["V100M16", "V100M32"]},
                ]
            }
        ]
    }
    assert "affinity" not in pods["any-pod"]["spec"]


def test_namespace_option(tmp_path: Path) -> None:
    docs = import_docs(tmp_path, ["p-0,1000,1024,0,0,,BE,Running,0,10,0"], "--namespace", "team-a")
    assert pods_of(docs)["p-0"]["metadata"]["namespace"] == "team-a"


# ---------------------------------------------------------------- fractional GPUs


FRACTIONAL_ROWS = [
    "whole,1000,1024,1,1000,,LS,Running,0,10,0",
    "shared,1000,1024,1,460,,LS,Running,1,10,1",
    "shared-2,1000,1024,1,250,,LS,Running,2,10,2",
]


def test_a_share_of_one_gpu_is_kept_exactly_as_a_gpu_share(tmp_path: Path) -> None:
    docs = import_docs(tmp_path, FRACTIONAL_ROWS)
    pods = pods_of(docs)
    assert list(pods) == ["whole", "shared", "shared-2"]
    whole = pods["whole"]["spec"]["containers"][0]["resources"]
    assert whole["requests"]["nvidia.com/gpu"] == "1" and "phalanx.dev/gpu-share" not in whole["requests"]
    for name, share in (("shared", "460m"), ("shared-2", "250m")):
        res = pods[name]["spec"]["containers"][0]["resources"]
        assert res["requests"]["phalanx.dev/gpu-share"] == share  # 0.46 of one GPU: not rounded
        assert res["limits"]["phalanx.dev/gpu-share"] == share
        assert "nvidia.com/gpu" not in res["requests"]


def test_a_fractional_share_of_several_gpus_is_refused_naming_row_and_pod(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = FRACTIONAL_ROWS + ["multi,1000,1024,2,500,,LS,Running,3,10,3"]
    pods = write(tmp_path, "pods.csv", POD_HEADER, rows)
    out = tmp_path / "out.yaml"
    code = run_cli(
        ["trace", "import", "openb", "--nodes", str(default_nodes(tmp_path)), "--pods", str(pods), "-o", str(out)]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("phalanx trace: ")
    assert "line 5" in err and "'multi'" in err and "--skip-fractional" in err and "500/1000 of each of 2" in err
    assert "Traceback" not in err
    assert not out.exists()


def test_skip_fractional_reports_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = import_docs(tmp_path, FRACTIONAL_ROWS, "--skip-fractional")
    assert list(pods_of(docs)) == ["whole"]
    assert "2 fractional-GPU pods skipped" in capsys.readouterr().err
    header = (tmp_path / "out.yaml").read_text().split("---", 1)[0]
    assert header.startswith("#") and "2 fractional-GPU pods skipped" in header


# ---------------------------------------------------------------- arrivals


NO_TIME_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli"


def test_no_time_columns_need_rate_or_fgd(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pods = write(tmp_path, "pods.csv", NO_TIME_HEADER, ["a,1000,1024,1,1000", "b,1000,1024,0,0", "c,1000,1024,8,1000"])
    base = ["trace", "import", "openb", "--nodes", str(default_nodes(tmp_path)), "--pods", str(pods)]
    assert run_cli([*base, "-o", str(tmp_path / "x.yaml")]) == 2
    assert "--arrival rate:R" in capsys.readouterr().err
    assert run_cli([*base, "--arrival", "rate:4", "-o", str(tmp_path / "x.yaml")]) == 0
    pods_out = pods_of(list(yaml.safe_load_all((tmp_path / "x.yaml").read_text())))
    assert [p["metadata"]["creationTimestamp"] for p in pods_out.values()] == [
        "2026-01-01T00:00:00Z",
        "2026-01-01T00:00:00.250Z",
        "2026-01-01T00:00:00.500Z",
    ]
    assert all(keys.SIM_DURATION not in p["metadata"].get("annotations", {}) for p in pods_out.values())


def test_rate_arrival_follows_creation_order_and_keeps_durations(tmp_path: Path) -> None:
    docs = import_docs(
        tmp_path,
        [
            "b,1000,1024,0,0,,BE,Running,50,80,60",
            "a,1000,1024,0,0,,BE,Running,10,40,10",
        ],
        "--arrival",
        "rate:0.5",
    )
    pods = pods_of(docs)
    assert list(pods) == ["a", "b"]
    assert pods["b"]["metadata"]["creationTimestamp"] == "2026-01-01T00:00:02Z"
    assert pods["b"]["metadata"]["annotations"][keys.SIM_DURATION] == "20s"


def fgd_rows() -> list[str]:
    return [f"p-{i},{1000 + i},1024,{1 + i % 2},1000,,LS,Running,{i},{i + 100},{i}" for i in range(6)] + [
        "cpu-only,1000,1024,0,0,,BE,Running,7,100,7",
    ]


def test_fgd_arrival_samples_until_factor_of_cluster_gpus(tmp_path: Path) -> None:
    docs = import_docs(tmp_path, fgd_rows(), "--arrival", "fgd:7:2")
    pods = list(pods_of(docs).values())
    requested = sum(int(p["spec"]["containers"][0]["resources"]["requests"].get("nvidia.com/gpu", 0)) for p in pods)
    cluster = 2 + 8  # n-0 and n-1
    assert requested >= 2 * cluster
    assert requested < 2 * cluster + 2  # stops as soon as the target is reached (a pod asks for at most 2)
    assert len(pods) > 7  # the 9 trace GPUs are not enough: sampled with replacement
    assert len({p["metadata"]["name"] for p in pods}) == len(pods)
    assert [p["metadata"]["creationTimestamp"] for p in pods[:3]] == [
        "2026-01-01T00:00:00Z",
        "2026-01-01T00:00:01Z",
        "2026-01-01T00:00:02Z",
    ]
    assert all(keys.SIM_DURATION not in p["metadata"].get("annotations", {}) for p in pods)


def test_fgd_arrival_is_deterministic_per_seed(tmp_path: Path) -> None:
    nodes, pods = default_nodes(tmp_path), write(tmp_path, "pods.csv", POD_HEADER, fgd_rows())

    def names(seed: int) -> list[str]:
        options = openb.ImportOptions(arrival=openb.parse_arrival(f"fgd:{seed}:1.3"))
        return [p.name for p in openb.import_openb(nodes, pods, options).workload.pods]

    assert names(1) == names(1)
    assert names(1) != names(2)


def test_bad_arrival_and_rule_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pods = write(tmp_path, "pods.csv", POD_HEADER, ["a,1000,1024,0,0,,BE,Running,0,1,0"])
    base = ["trace", "import", "openb", "--nodes", str(default_nodes(tmp_path)), "--pods", str(pods), "-o", "-"]
    for extra in (
        ["--arrival", "rate:0"],
        ["--arrival", "fgd:x"],
        ["--arrival", "poisson"],
        ["--gang-rule", "window:abc"],
        ["--gang-rule", "size:0"],
        ["--gang-rule", "bogus"],
    ):
        assert run_cli([*base, *extra]) == 2, extra
        err = capsys.readouterr().err
        assert err.startswith("phalanx trace: ") and "Traceback" not in err


# ---------------------------------------------------------------- gang rules


def test_no_gangs_by_default(tmp_path: Path) -> None:
    docs = import_docs(tmp_path, ["a,1000,1024,8,1000,,LS,Running,0,1,0", "b,1000,1024,8,1000,,LS,Running,0,1,0"])
    assert all(gang_of(p) is None for p in pods_of(docs).values())


def test_gang_size_groups_consecutive_pods_of_one_shape(tmp_path: Path) -> None:
    rows = [
        "a1,8000,1024,1,1000,,LS,Running,0,9,0",
        "b1,4000,1024,2,1000,,LS,Running,1,9,1",
        "cpu,1000,1024,0,0,,BE,Running,2,9,2",
        "a2,8000,1024,1,1000,,LS,Running,3,9,3",
        "a3,8000,1024,1,1000,,LS,Running,4,9,4",
        "b2,4000,1024,2,1000,,LS,Running,5,9,5",
        "a4,8000,1024,1,1000,,LS,Running,6,9,6",
        "a5,8000,1024,1,1000,,LS,Running,7,9,7",
    ]
    pods = pods_of(import_docs(tmp_path, rows, "--gang-size", "2"))
    gangs = {name: gang_of(pod) for name, pod in pods.items()}
    assert gangs == {
        "a1": ("gang-00001", "2"),
        "a2": ("gang-00001", "2"),
        "b1": ("gang-00002", "2"),
        "b2": ("gang-00002", "2"),
        "cpu": None,
        "a3": ("gang-00003", "2"),
        "a4": ("gang-00003", "2"),
        "a5": ("gang-00004", "1"),  # trailing incomplete group: a smaller gang
    }
    assert pods["a1"]["metadata"]["annotations"][keys.KOORD_TOTAL_NUMBER] == "2"
    # Members keep their own arrival times.
    assert pods["a2"]["metadata"]["creationTimestamp"] == "2026-01-01T00:00:03Z"
    assert pods["a1"]["metadata"]["creationTimestamp"] == "2026-01-01T00:00:00Z"


def test_gang_rule_size_equals_gang_size(tmp_path: Path) -> None:
    rows = [f"p{i},1000,1024,1,1000,,LS,Running,{i},99,{i}" for i in range(3)]
    nodes = default_nodes(tmp_path)
    pods = write(tmp_path, "pods.csv", POD_HEADER, rows)
    out = tmp_path / "a.yaml"
    assert (
        run_cli(
            [
                "trace",
                "import",
                "openb",
                "--nodes",
                str(nodes),
                "--pods",
                str(pods),
                "--gang-rule",
                "size:3",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    assert {gang_of(p) for p in pods_of(list(yaml.safe_load_all(out.read_text()))).values()} == {("gang-00001", "3")}


def test_gang_window_groups_multi_gpu_pods_of_one_shape(tmp_path: Path) -> None:
    rows = [
        "w1,16000,1024,4,1000,,LS,Running,0,999,0",
        "w2,16000,1024,4,1000,,LS,Running,50,999,50",
        "single-gpu,16000,1024,1,1000,,LS,Running,51,999,51",
        "other-shape,16000,2048,4,1000,,LS,Running,52,999,52",
        "w3,16000,1024,4,1000,,LS,Running,60,999,60",
        "late,16000,1024,4,1000,,LS,Running,61,999,61",  # 61 s after w1: starts a new group
        "late2,16000,1024,4,1000,,LS,Running,100,999,100",
        "spec,16000,1024,4,1000,G2,LS,Running,101,999,101",
    ]
    pods = pods_of(import_docs(tmp_path, rows, "--gang-rule", "window:60"))
    gangs = {name: gang_of(pod) for name, pod in pods.items()}
    assert gangs == {
        "w1": ("gang-00001", "3"),
        "w2": ("gang-00001", "3"),
        "w3": ("gang-00001", "3"),
        "single-gpu": None,
        "other-shape": None,
        "spec": None,  # groups of one stay plain pods
        "late": ("gang-00002", "2"),
        "late2": ("gang-00002", "2"),
    }


def test_gang_window_respects_max_gang_size(tmp_path: Path) -> None:
    rows = [f"p{i},8000,1024,2,1000,,LS,Running,{i},999,{i}" for i in range(5)]
    pods = pods_of(import_docs(tmp_path, rows, "--gang-rule", "window:3600", "--max-gang-size", "2"))
    assert [gang_of(p) for p in pods.values()] == [
        ("gang-00001", "2"),
        ("gang-00001", "2"),
        ("gang-00002", "2"),
        ("gang-00002", "2"),
        None,
    ]


def test_gang_size_and_rule_are_exclusive(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        run_cli(
            ["trace", "import", "openb", "--nodes", "n", "--pods", "p", "--gang-size", "2", "--gang-rule", "window:5"]
        )


# ---------------------------------------------------------------- malformed input


def expect_error(tmp_path: Path, header: str, rows: list[str], *fragments: str) -> None:
    pods = write(tmp_path, "bad.csv", header, rows)
    with pytest.raises(TraceError) as caught:
        openb.import_openb(default_nodes(tmp_path), pods)
    message = str(caught.value)
    assert "bad.csv" in message
    for fragment in fragments:
        assert fragment in message, message


def test_missing_column_is_named(tmp_path: Path) -> None:
    expect_error(tmp_path, "name,cpu_milli,num_gpu,gpu_milli", ["a,1,1,1000"], "line 1", "'memory_mib'")


def test_non_numeric_value_names_line_and_column(tmp_path: Path) -> None:
    rows = ["a,1000,1024,0,0,,BE,Running,0,1,0", "b,1000,lots,0,0,,BE,Running,0,1,0"]
    expect_error(tmp_path, POD_HEADER, rows, "line 3", "'memory_mib'", "'lots'")


def test_bad_time_names_line_and_column(tmp_path: Path) -> None:
    expect_error(tmp_path, POD_HEADER, ["a,1000,1024,0,0,,BE,Running,soon,1,0"], "line 2", "'creation_time'")


def test_short_row_and_bad_gpu_milli(tmp_path: Path) -> None:
    expect_error(tmp_path, POD_HEADER, ["a,1000,1024"], "line 2", "expected 11 columns")
    expect_error(tmp_path, POD_HEADER, ["a,1000,1024,1,1500,,LS,Running,0,1,0"], "line 2", "'gpu_milli'")
    expect_error(tmp_path, POD_HEADER, ["a,-5,1024,0,0,,LS,Running,0,1,0"], "line 2", "'cpu_milli'")


def test_duplicate_pod_name(tmp_path: Path) -> None:
    rows = ["a,1000,1024,0,0,,BE,Running,0,1,0", "a,1000,1024,0,0,,BE,Running,0,1,0"]
    expect_error(tmp_path, POD_HEADER, rows, "line 3", "duplicate", "line 2")


def test_bad_node_csv_via_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = write(tmp_path, "nodes.csv", NODE_HEADER, ["n-0,64000,262144,two,P100"])
    pods = write(tmp_path, "pods.csv", POD_HEADER, ["a,1000,1024,0,0,,BE,Running,0,1,0"])
    assert run_cli(["trace", "import", "openb", "--nodes", str(nodes), "--pods", str(pods), "-o", "-"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("phalanx trace: ") and "nodes.csv: line 2, column 'gpu'" in err


def test_missing_file_via_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_cli(["trace", "import", "openb", "--nodes", str(tmp_path / "nope.csv"), "--pods", "x", "-o", "-"])
    assert code == 2
    assert "cannot read" in capsys.readouterr().err


# ---------------------------------------------------------------- the real trace


def test_real_default_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes, pods = TRACES / "openb_node_list_gpu_node.csv", TRACES / "openb_pod_list_default.csv"
    if not (nodes.exists() and pods.exists()):
        pytest.skip(f"the openb trace is not at {TRACES} (it lives in /work/shared/traces next to the repo)")
    out = tmp_path / "openb.yaml"
    started = time.perf_counter()
    code = run_cli(
        ["trace", "import", "openb", "--nodes", str(nodes), "--pods", str(pods), "--skip-fractional", "-o", str(out)]
    )
    elapsed = time.perf_counter() - started
    assert code == 0
    assert elapsed < 5.0
    result = openb.import_openb(nodes, pods, openb.ImportOptions(skip_fractional=True))
    assert len(result.workload.nodes) == 1213
    assert sum(n.gpus for n in result.workload.nodes) == 6212
    assert result.rows == 8152
    assert len(result.workload.pods) == 8152 - result.skipped_fractional
    assert result.skipped_fractional == 3078
    docs = list(yaml.load_all(out.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
    assert sum(1 for d in docs if d["kind"] == "Node") == 1213
    assert sum(1 for d in docs if d["kind"] == "Pod") == 8152 - 3078
    assert "3078 fractional-GPU pods skipped" in capsys.readouterr().err
    # Without --skip-fractional every pod is kept; the shares are exact.
    full = openb.import_openb(nodes, pods, openb.ImportOptions())
    assert len(full.workload.pods) == 8152 and full.skipped_fractional == 0
    shares = [p.gpu_share_milli for p in full.workload.pods if p.gpu_share_milli]
    assert len(shares) == 3078 and all(0 < s < 1000 for s in shares)
