"""Finding the etcd and kube-apiserver binaries LocalApiServer runs, and the version of a kube-apiserver.

$PHALANX_K8S_BIN_DIR if set, else the cache directory hack/build-k8s-binaries.sh builds into
(${PHALANX_K8S_CACHE:-~/.cache/phalanx/k8s}/<version pinned in hack/k8s-binaries/go.mod>/).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

BINARIES = ("etcd", "kube-apiserver")

_REPO_ROOT = Path(__file__).resolve().parents[3]
_GO_MOD = _REPO_ROOT / "hack" / "k8s-binaries" / "go.mod"


def pinned_k8s_version() -> str | None:
    """The k8s.io/kubernetes version pinned in hack/k8s-binaries/go.mod, if this is a source checkout."""
    try:
        text = _GO_MOD.read_text()
    except OSError:
        return None
    match = re.search(r"^\s*k8s\.io/kubernetes\s+(v\d\S*)", text, re.MULTILINE)
    return match.group(1) if match else None


def k8s_cache_root() -> Path:
    return Path(os.environ.get("PHALANX_K8S_CACHE") or Path.home() / ".cache" / "phalanx" / "k8s")


def has_binaries(d: Path) -> bool:
    return all(os.access(d / name, os.X_OK) and (d / name).is_file() for name in BINARIES)


def find_k8s_bin_dir() -> Path | None:
    """The directory holding etcd and kube-apiserver, or None.

    $PHALANX_K8S_BIN_DIR wins outright (None if it lacks a binary). Otherwise the cache directory of the
    version pinned in go.mod; outside a source checkout, the newest version in the cache.
    """
    explicit = os.environ.get("PHALANX_K8S_BIN_DIR")
    if explicit:
        d = Path(explicit)
        return d if has_binaries(d) else None
    root = k8s_cache_root()
    version = pinned_k8s_version()
    if version is not None:
        d = root / version
        return d if has_binaries(d) else None
    candidates = [d for d in root.glob("v*") if has_binaries(d)]
    if not candidates:
        return None

    def key(d: Path) -> tuple[int, ...]:
        return tuple(int(n) for n in re.findall(r"\d+", d.name)[:3])

    return max(candidates, key=key)


def apiserver_version(bin_dir: Path) -> tuple[int, int] | None:
    """(major, minor) of the kube-apiserver in `bin_dir` ("Kubernetes v1.36.3" from --version); None if unknown."""
    try:
        out = subprocess.run(
            [str(bin_dir / "kube-apiserver"), "--version"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"v(\d+)\.(\d+)", out)
    return (int(match.group(1)), int(match.group(2))) if match else None
