"""Every package under libs/ and services/ is listed in pyproject.toml's setuptools packages: a package left
out installs fine in the editable checkout the tests use, and is missing from the wheel the image runs."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_package_is_in_the_wheel() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {
        ".".join(path.parent.relative_to(REPO / "libs").parts)
        for path in (REPO / "libs").rglob("__init__.py")
        if "__pycache__" not in path.parts
    }
    found |= set(config["package-dir"]) - {""}
    assert found - listed == set(), "packages missing from [tool.setuptools] packages in pyproject.toml"
