"""Every module of the library is under 450 lines and opens with a docstring naming its job (generated
protobuf code aside): a file that grows past that is doing more than one job."""

from __future__ import annotations

import ast
from pathlib import Path

LIBRARY = Path(__file__).resolve().parents[2] / "libs" / "phalanx"
MAX_LINES = 450


def _modules() -> list[Path]:
    return [p for p in sorted(LIBRARY.rglob("*.py")) if "v1" not in p.relative_to(LIBRARY).parts]


def test_the_library_has_modules_to_check() -> None:
    assert len(_modules()) > 100


def test_every_module_is_under_the_line_bound() -> None:
    long = {str(p.relative_to(LIBRARY)): n for p in _modules() if (n := len(p.read_text().splitlines())) >= MAX_LINES}
    assert long == {}, f"modules of {MAX_LINES} lines or more: split them by job"


def test_every_module_names_its_job_first() -> None:
    silent = [
        str(p.relative_to(LIBRARY))
        for p in _modules()
        if p.read_text().strip() and not ast.get_docstring(ast.parse(p.read_text()))
    ]
    assert silent == []
