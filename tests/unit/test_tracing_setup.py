"""Tracing's SDK is imported only when tracing is on: a service with OTEL_SDK_DISABLED=true starts without
it (about 60 ms of CPU a service on 2 shared cores), and with tracing on it installs the SDK's provider."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CODE = """
import sys
from phalanx.telemetry.tracing import setup_tracing
setup_tracing("phalanx-test")
from opentelemetry import trace
print("opentelemetry.sdk.trace" in sys.modules, type(trace.get_tracer_provider()).__module__)
"""


def _run(disabled: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_SDK_DISABLED"] = disabled
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.starts_processes
def test_the_sdk_is_imported_only_when_tracing_is_on() -> None:
    assert _run("true") == "False opentelemetry.trace"
    assert _run("false") == "True opentelemetry.sdk.trace"
