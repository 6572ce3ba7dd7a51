"""The fast test layer (`make test-fast`, `pytest --fast`): the tests that start no process, redis-server included.

A test is out of the layer (marked `starts_processes`) when a fixture it uses, directly or through others, starts
one (PROCESS_FIXTURES: so a new test on `store` is classified with no marker), when it carries the `integration`
marker, or when it is marked `starts_processes` itself (a test or module that runs a child in its own body).

Under --fast the rest run with process creation switched off: a test that starts a process anyway fails, with the
command it tried, rather than being skipped or quietly slowing the layer down. The classification cannot drift.
"""

from __future__ import annotations

import _posixsubprocess
import os
import subprocess
from collections.abc import Callable, Generator, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest

MARKER = "starts_processes"

# Fixtures that start redis-server or another process. Tests reach them through `redis_client`, `store` and
# the modules' own fixtures; the fixture closure finds them all.
PROCESS_FIXTURES = frozenset({"redis_server"})


class ProcessInFastLayer(BaseException):
    """BaseException, so that a test's `except Exception` around the start cannot swallow it (it is also
    recorded and fails the test's report, see pytest_runtest_makereport)."""


_started: dict[str, list[str]] = {}  # nodeid -> what it tried to start
_current: list[str] = []  # the nodeid running now (empty during collection)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help=f"run only the tests that start no process and need no redis-server (deselects `{MARKER}`); "
        "a test that starts one anyway fails",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--fast"):
        config.add_cleanup(_forbid_processes())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & PROCESS_FIXTURES or item.get_closest_marker("integration"):
            item.add_marker(MARKER)
    if not config.getoption("--fast"):
        return
    kept = [i for i in items if i.get_closest_marker(MARKER) is None]
    dropped = [i for i in items if i.get_closest_marker(MARKER) is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    _current.append(item.nodeid)
    try:
        return (yield)
    finally:
        _current.pop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    tried = _started.pop(item.nodeid, None)  # this phase's starts
    if tried and report.passed:
        report.outcome = "failed"
        report.longrepr = (
            f"started a process under --fast (caught and ignored by the test?): {tried}; "
            f"mark it @pytest.mark.{MARKER} or make it start none"
        )
    return report


def _refuse(what: str) -> Callable[..., Any]:
    def refused(*args: Any, **kwargs: Any) -> Any:
        command = what
        if what == "subprocess" and len(args) > 1:  # Popen._execute_child(self, args, executable, ...)
            command = f"subprocess {args[1]!r}"
        if _current:
            _started.setdefault(_current[-1], []).append(command)
        raise ProcessInFastLayer(
            f"{command}: the fast layer (--fast) starts no process; "
            f"mark the test @pytest.mark.{MARKER}, or use a fixture in fast_layer.PROCESS_FIXTURES"
        )

    return refused


@contextmanager
def _patched(targets: list[tuple[Any, str, str]]) -> Iterator[None]:
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in targets if hasattr(owner, name)]
    for owner, name, what in targets:
        if hasattr(owner, name):
            setattr(owner, name, _refuse(what))
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def _forbid_processes() -> Callable[[], None]:
    """Every way Python starts a process: subprocess (and asyncio's, built on it), multiprocessing's spawn and
    forkserver (_posixsubprocess) and fork (os.fork), os.system, os.posix_spawn. Returns the undo."""
    stack = ExitStack()
    stack.enter_context(
        _patched(
            [
                (subprocess.Popen, "_execute_child", "subprocess"),
                (_posixsubprocess, "fork_exec", "_posixsubprocess.fork_exec"),
                (os, "fork", "os.fork"),
                (os, "forkpty", "os.forkpty"),
                (os, "system", "os.system"),
                (os, "posix_spawn", "os.posix_spawn"),
                (os, "posix_spawnp", "os.posix_spawnp"),
            ]
        )
    )
    return stack.close
