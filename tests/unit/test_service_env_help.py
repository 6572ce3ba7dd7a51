"""Every PHALANX_* variable a service reads shows in its --help with its default (issue 10: eight of the
variables were missing there). The variables are found by reading the service's source, and the
phalanx.config helpers it calls, so a flag added without the helper (phalanx.config.env_flag) fails here."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from phalanx import config

REPO = Path(__file__).resolve().parents[2]
SERVICES = {
    "phalanx_queue": "services/queue",
    "phalanx_scheduler": "services/scheduler",
    "phalanx_binder": "services/binder",
    "phalanx_controller": "services/controller",
}
GRPC_SERVICES = {"phalanx_queue", "phalanx_scheduler", "phalanx_binder"}  # the controller serves only /metrics
# The config helpers that declare flags for the services that call them.
FLAG_HELPERS: dict[str, Callable[..., Any]] = {
    "common_parser": config.common_parser,
    "redis_args": config.redis_args,
    "kubeconfig_arg": config.kubeconfig_arg,
}


def variables_read(service_dir: Path) -> set[str]:
    source = "\n".join(p.read_text() for p in sorted(service_dir.glob("*.py")))
    for name, helper in FLAG_HELPERS.items():
        if re.search(rf"\b{name}\(", source):
            source += inspect.getsource(helper)
    found = set(re.findall(r"\bPHALANX_[A-Z0-9_]+", source))
    found |= {f"PHALANX_{name}" for name in re.findall(r"\benv\(\s*\"([A-Z0-9_]+)\"", source)}  # config.env("NAME")
    return found


def service_help(module: str) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    out = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, "COLUMNS": "100"},
    )
    assert out.returncode == 0, out.stderr
    return " ".join(out.stdout.split())  # argparse wraps lines


@pytest.mark.starts_processes
@pytest.mark.parametrize("module", sorted(SERVICES))
def test_help_names_every_variable_the_service_reads_and_its_default(module: str) -> None:
    variables = variables_read(REPO / SERVICES[module])
    expected = {"PHALANX_LISTEN", "PHALANX_CLOCK"} if module in GRPC_SERVICES else {"PHALANX_KUBECONFIG"}
    assert expected | {"PHALANX_METRICS_LISTEN"} <= variables  # the grep found them
    text = service_help(module)
    missing = sorted(v for v in variables if f"env {v}; default: " not in text)
    assert not missing, f"{module} --help lacks the variable and default of {missing}"


def test_env_flag_reads_the_variable_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    p = argparse.ArgumentParser()
    monkeypatch.setenv("PHALANX_TEST_WAIT", "2.5")
    config.env_flag(p, "--wait", "PHALANX_TEST_WAIT", "600", "seconds to wait", parse=float, type=float)
    config.env_flag(p, "--name", "PHALANX_TEST_NAME", "", "a name", shown="the host name")
    assert p.parse_args([]).wait == 2.5 and p.parse_args(["--wait", "3"]).wait == 3.0
    assert p.parse_args([]).name == ""
    text = " ".join(p.format_help().split())
    assert "seconds to wait (env PHALANX_TEST_WAIT; default: 600)" in text
    assert "a name (env PHALANX_TEST_NAME; default: the host name)" in text
    with pytest.raises(ValueError, match="PHALANX_"):
        config.env_flag(p, "--other", "OTHER", "")
