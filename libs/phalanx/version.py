"""The installed phalanx distribution's version, for --version and phalanx_build_info."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def package_version() -> str:
    """pyproject's version as installed, not a copy that could drift from it."""
    try:
        return version("phalanx")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"
