"""`phalanx --version` prints the version the project declares (pyproject.toml), as installed."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from phalanx.cli.main import main

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_version_is_the_declared_one(capsys: pytest.CaptureFixture[str]) -> None:
    declared = tomllib.loads(PYPROJECT.read_text())["project"]["version"]
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"phalanx {declared}\n"
