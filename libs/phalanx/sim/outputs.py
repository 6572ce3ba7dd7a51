"""Writing a simulation's report files (JSON, HTML, PNG), with errors a CLI can print in one line."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable


class OutputError(Exception):
    """A report file could not be written; the message names the path."""


def check_writable(*paths: str | None) -> None:
    """Fails before a long simulation rather than after it, when an output path cannot work."""
    for p in paths:
        if not p:
            continue
        path = Path(p)
        parent = path.parent if str(path.parent) else Path(".")
        if path.is_dir():
            raise OutputError(f"{p}: is a directory")
        if not parent.is_dir():
            raise OutputError(f"{p}: directory {parent} does not exist")
        if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            raise OutputError(f"{p}: not writable")


def _write(path: str, writer: Callable[[str], object]) -> None:
    try:
        writer(path)
    except OSError as exc:
        raise OutputError(f"{path}: {exc.strerror or exc}") from None


def write_json(report: dict[str, Any], path: str) -> None:
    _write(path, lambda p: Path(p).write_text(json.dumps(report, indent=2) + "\n"))


def write_html(page: str, path: str) -> None:
    _write(path, lambda p: Path(p).write_text(page, encoding="utf-8"))


def write_report_files(report: dict[str, Any], title: str, json_path: str | None = None,
                       html_path: str | None = None, png_path: str | None = None) -> None:
    if json_path:
        write_json(report, json_path)
    if html_path:
        from phalanx.sim.html_report import render_html

        write_html(render_html(report, title), html_path)
    if png_path:
        from phalanx.sim.png_report import render_png

        _write(png_path, lambda p: render_png(report, p, title))
