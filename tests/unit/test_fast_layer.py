"""tests/fast_layer.py itself: `pytest --fast` deselects what starts processes and fails what starts one anyway.

Runs pytest in this process (pytester), so the check belongs to the fast layer it checks."""

from __future__ import annotations

import pytest

CONFTEST = """
import pytest

pytest_plugins = ["fast_layer"]


@pytest.fixture
def redis_server():  # stands for the real one: its name is what classifies
    return "redis"


@pytest.fixture
def store(redis_server):
    return redis_server
"""

TESTS = """
import multiprocessing
import os
import subprocess

import pytest


def test_pure():
    assert 1 + 1 == 2


def test_on_store(store):
    assert store


@pytest.mark.starts_processes
def test_marked():
    subprocess.run(["true"], check=True)


@pytest.mark.integration
def test_integration():
    pass


def test_unmarked_subprocess():
    subprocess.run(["true"], check=True)


def test_unmarked_swallowed():
    try:
        subprocess.run(["true"], check=True)
    except BaseException:
        pass


def test_unmarked_multiprocessing():
    p = multiprocessing.get_context("spawn").Process(target=print)
    p.start()
    p.join()


def test_unmarked_system():
    os.system("true")
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=TESTS)
    return pytester


def test_fast_deselects_the_classified_and_fails_every_other_start(suite: pytest.Pytester) -> None:
    result = suite.runpytest_inprocess("--fast", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=4, deselected=3)
    failed = {r.nodeid.split("::")[1] for r in result.reprec.getreports("pytest_runtest_logreport") if r.failed}
    assert failed == {
        "test_unmarked_subprocess",
        "test_unmarked_swallowed",
        "test_unmarked_multiprocessing",
        "test_unmarked_system",
    }
    result.stdout.fnmatch_lines(["*started a process under --fast*"])  # the swallowed one still fails


def test_without_fast_nothing_is_deselected_or_refused(suite: pytest.Pytester) -> None:
    result = suite.runpytest_inprocess("-p", "no:cacheprovider", "-k", "not unmarked and not marked")
    result.assert_outcomes(passed=3)
