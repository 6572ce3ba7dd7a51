"""docs/architecture.md stays true: every module path it names exists, and its layer table is the import-linter
layers contract's order."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "architecture.md").read_text()
# Where a path in the doc may be rooted: the repository, the library, the services.
BASES = (ROOT, ROOT / "libs" / "phalanx", ROOT / "libs")


def _paths() -> set[str]:
    """Backticked tokens that look like files or directories of the tree (a.py, pkg/, pkg/a.py, a.lua)."""
    tokens = re.findall(r"`([A-Za-z0-9_./-]+)`", DOC)
    return {t for t in tokens if "/" in t and not t.startswith(("http", "-")) or t.endswith((".py", ".lua"))}


def test_the_doc_names_paths_at_all() -> None:
    assert len(_paths()) > 30  # the scan would pass vacuously if its pattern stopped matching


def test_every_path_the_doc_names_exists() -> None:
    missing = sorted(p for p in _paths() if not any((base / p.rstrip("/")).exists() for base in BASES))
    assert missing == [], f"docs/architecture.md names paths that do not exist: {missing}"


def _contract_layers() -> list[set[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (layers,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    return [{m.strip().removeprefix("phalanx.") for m in line.split("|")} for line in layers["layers"]]


def _doc_layers() -> list[set[str]]:
    section = DOC.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| layer")]
    out = []
    for row in rows:
        cell = row.split("|")[2]
        for group in cell.split(";"):
            out.append({name for name in re.findall(r"`([a-z_0-9]+)`", group)})
    return out


def test_the_layer_table_is_the_contracts_order() -> None:
    assert _doc_layers() == _contract_layers()
