"""Writing a simulation's report files (JSON, HTML, PNG), with errors a CLI can print in one line.

No import here needs the `report` extra: the renderers are imported when a page or PNG is asked for."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable


class OutputError(Exception):
    """A report file could not be written (the message names the path), or cannot be drawn here."""


def extra_missing(kind: str, module: str) -> OutputError:
    """HTML and PNG reports draw with libraries of the `report` extra, which the container image leaves out."""
    return OutputError(
        f"{kind} reports need {module}, which is not installed; it comes with the 'report' extra: "
        "pip install 'phalanx[report]'"
    )


def check_can_render(html: bool = False, png: bool = False) -> None:
    """Raises OutputError when a library the asked-for reports need is missing: `simulate` says so before the
    run, not after it."""
    needed: dict[str, str] = {}  # module -> the report that needs it
    if html:
        needed.update(jinja2="HTML", matplotlib="HTML")
    elif png:
        needed["matplotlib"] = "PNG"
    for module, kind in needed.items():
        try:
            __import__(module)
        except ModuleNotFoundError as exc:
            if (exc.name or "").partition(".")[0] != module:
                raise  # installed but broken: its own message says more
            raise extra_missing(kind, module) from None


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


def write_report_files(
    report: dict[str, Any],
    title: str,
    json_path: str | None = None,
    html_path: str | None = None,
    png_path: str | None = None,
) -> None:
    if json_path:
        write_json(report, json_path)
    if html_path:
        check_can_render(html=True)
        from phalanx.report.html_report import render_html

        write_html(render_html(report, title), html_path)
    if png_path:
        from phalanx.report.png_report import render_png

        _write(png_path, lambda p: render_png(report, p, title))
