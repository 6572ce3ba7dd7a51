"""The services run without the report- and benchmark-only dependencies, which the container image leaves out.

matplotlib and jinja2 (and what they pull in) are the `report` extra in pyproject.toml: only `phalanx simulate
--html/--png` draw; psutil and tabulate are the `bench` extra. These checks run in a fresh interpreter each, so nothing another test imported can hide an import.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from podman_env import REPO

# matplotlib and the packages only it needs: none may be loaded by a service.
REPORT_ONLY = (
    "matplotlib",
    "PIL",
    "fontTools",
    "kiwisolver",
    "contourpy",
    "cycler",
    "pyparsing",
    "jinja2",
    "markupsafe",
)
# psutil is left out: opentelemetry-sdk imports it when it is installed (for process resource attributes) and
# does without it otherwise, as in the image.
BENCH_ONLY = ("tabulate",)
SERVICE_MAINS = (
    "phalanx_queue.__main__",
    "phalanx_scheduler.__main__",
    "phalanx_binder.__main__",
    "phalanx_controller.__main__",
    "phalanx_combined.__main__",
)


def loaded_after_import(module: str, run_main_help: bool = False) -> set[str]:
    """Top-level module names loaded by importing `module` (and, with run_main_help, by `main(['--help'])`)."""
    code = (
        "import importlib, json, sys\n"
        f"m = importlib.import_module({module!r})\n"
        + ("try:\n    m.main(['--help'])\nexcept SystemExit:\n    pass\n" if run_main_help else "")
        + "print(json.dumps(sorted({n.split('.')[0] for n in sys.modules})))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("module", SERVICE_MAINS)
def test_services_do_not_import_report_dependencies(module: str) -> None:
    loaded = loaded_after_import(module, run_main_help=True)
    assert "phalanx" in loaded  # the import did happen
    assert not loaded & set(REPORT_ONLY), f"{module} loads report-only modules: {sorted(loaded & set(REPORT_ONLY))}"
    assert not loaded & set(BENCH_ONLY), f"{module} loads benchmark-only modules: {sorted(loaded & set(BENCH_ONLY))}"


def test_cli_start_does_not_import_matplotlib() -> None:
    # `phalanx` runs in the image too (e.g. `phalanx certs`); only --png may need the extra.
    loaded = loaded_after_import("phalanx.cli.main", run_main_help=True)
    assert not loaded & {"matplotlib", "jinja2", "tabulate"}


def test_report_dependencies_are_an_extra() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = {
        dep.split("=")[0].split("<")[0].split(">")[0].split("[")[0].strip().lower() for dep in project["dependencies"]
    }
    assert "matplotlib" not in names, "matplotlib is report-only: it belongs in the `report` extra"
    assert any(dep.startswith("matplotlib") for dep in project["optional-dependencies"]["report"])
    # `make setup` installs .[dev]: the tests and `make demo` draw PNGs, so dev must bring the report extra.
    assert any(
        dep.replace(" ", "").startswith("phalanx[") and "report" in dep
        for dep in project["optional-dependencies"]["dev"]
    )


def test_png_report_without_matplotlib_names_the_extra(tmp_path: object) -> None:
    # As if matplotlib were not installed (a None entry makes its import fail with ModuleNotFoundError).
    code = (
        "import sys\n"
        "sys.modules['matplotlib'] = None\n"
        "from phalanx.report.outputs import OutputError\n"
        "from phalanx.report.png_report import render_png\n"
        "try:\n"
        f"    render_png({{}}, {str(tmp_path)!r} + '/r.png', 't')\n"
        "except OutputError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    print('no error')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "phalanx[report]" in proc.stdout and "matplotlib" in proc.stdout, proc.stdout


def test_simulate_png_without_matplotlib_fails_before_the_run(tmp_path: object) -> None:
    report = f"{tmp_path}/r.json"
    code = (
        "import sys\n"
        "sys.modules['matplotlib'] = None\n"
        "from phalanx.cli.main import main\n"
        f"main(['simulate', '-f', 'examples/demo-two-jobs.yaml', '-o', {report!r}, '--png', {str(tmp_path)!r} + '/r.png'])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    assert "phalanx[report]" in proc.stderr
    assert not Path(report).exists()  # refused before the simulation ran, not after


@pytest.mark.parametrize("missing", ["matplotlib", "jinja2"])
def test_simulate_html_without_the_report_extra_fails_before_the_run(tmp_path: object, missing: str) -> None:
    report = f"{tmp_path}/r.json"
    code = (
        "import sys\n"
        f"sys.modules[{missing!r}] = None\n"
        "from phalanx.cli.main import main\n"
        f"main(['simulate', '-f', 'examples/demo-two-jobs.yaml', '-o', {report!r}, '--html', {str(tmp_path)!r} + '/r.html'])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and missing in proc.stderr and "phalanx[report]" in proc.stderr, proc.stderr
    assert not Path(report).exists()  # refused before the simulation ran, not after


@pytest.mark.parametrize("command", [["bench", "--quick"], ["replay-bench", "--quick"]])
def test_benchmarks_without_the_bench_extra_name_it(command: list[str]) -> None:
    code = f"import sys\nsys.modules['psutil'] = None\nfrom phalanx.cli.main import main\nmain({command!r})\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"phalanx {command[0]}: psutil") and "phalanx[bench]" in proc.stderr, proc.stderr
