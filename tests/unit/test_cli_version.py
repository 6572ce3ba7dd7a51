"""`phalanx --version` prints the version the project declares (phalanx/version.py, which pyproject.toml
reads), as installed: the distribution's metadata says the same."""

from __future__ import annotations

import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

from phalanx.cli.main import main
from phalanx.version import VERSION

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_pyproject_reads_the_version_from_the_one_constant() -> None:
    project = tomllib.loads(PYPROJECT.read_text())
    assert "version" in project["project"]["dynamic"] and "version" not in project["project"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "phalanx.version.VERSION"}
    assert version("phalanx") == VERSION  # as installed (make setup installs the tree in editable mode)


def test_version_is_the_declared_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"phalanx {VERSION}\n"
