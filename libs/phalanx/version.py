"""Phalanx's version: the one place it is written (pyproject.toml reads it from here, `[tool.setuptools.dynamic]`),
for --version and phalanx_build_info. A constant rather than importlib.metadata: looking the installed
distribution up cost each service some 20 ms of CPU at every start (importlib.metadata and a scan of the
path's dist-info directories)."""

from __future__ import annotations

VERSION = "0.1.0"


def package_version() -> str:
    return VERSION
