"""`phalanx explain` refuses what it cannot read with one line naming the file, context or flag, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phalanx.cli.main import main


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_:
        main(["explain", *args])
    out, err = capsys.readouterr()
    assert out == ""
    return int(exit_.value.code or 0), err


def test_a_missing_kubeconfig_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.yaml"
    code, err = _run(capsys, "--kubeconfig", str(missing))
    assert code == 2 and err == f"phalanx explain: kubeconfig {missing}: no such file\n"


def test_an_unknown_context_names_the_ones_there_are(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "dev",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": name, "context": {"cluster": "c", "user": "u"}} for name in ("dev", "prod")],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    code, err = _run(capsys, "--kubeconfig", str(path), "--context", "staging")
    assert code == 2 and "no context 'staging'" in err and "dev, prod" in err


def test_a_file_that_is_not_a_report_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"pods": []}))
    code, err = _run(capsys, "--report", str(path))
    assert code == 2 and f"{path}: not a simulation report (no summary, podGroups" in err


def test_a_workload_needs_a_report(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, err = _run(capsys, "-f", str(tmp_path / "w.yaml"))
    assert code == 2 and "-f/--workload goes with --report" in err
