"""phalanx-combined's command line: three sections, each the service's own flags, and a clear refusal of a
malformed one (naming what is wrong) before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.testing.stack import SERVICES, ChaosStack, StackConfig
from phalanx_combined.__main__ import UsageError, most_verbose, parse, shares_cluster_view, split_sections


def test_sections_split_on_separators_in_any_order() -> None:
    argv = ["scheduler", "--queue", "127.0.0.1:1", "--", "queue", "--", "binder", "--lock-lease", "5"]
    assert split_sections(argv) == {
        "scheduler": ["--queue", "127.0.0.1:1"],
        "queue": [],
        "binder": ["--lock-lease", "5"],
    }


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["queue", "--", "binder"], "no scheduler section"),
        ([], "an empty section"),
        (["queue", "--", "--", "binder", "--", "scheduler"], "an empty section"),
        (["queue", "--", "binder", "--", "scheduler", "--"], "an empty section"),
        (["queue", "--", "queue", "--", "binder", "--", "scheduler"], "the queue section is given twice"),
        (["--listen", "0.0.0.0:1", "--", "binder", "--", "scheduler"], "a section starts with '--listen'"),
        (["controller", "--", "queue", "--", "binder", "--", "scheduler"], "a section starts with 'controller'"),
    ],
)
def test_a_malformed_command_line_is_refused_naming_the_problem(argv: list[str], said: str) -> None:
    with pytest.raises(UsageError, match=said):
        split_sections(argv)


def test_a_bad_flag_is_refused_by_its_own_service(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(["queue", "--", "binder", "--lock-lease", "soon", "--", "scheduler"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "phalanx-binder" in err and "--lock-lease" in err


def test_each_section_parses_as_its_service_would() -> None:
    args = parse(["queue", "--listen", "127.0.0.1:7001", "--", "binder", "--lock-lease", "7", "--", "scheduler"])
    assert args["queue"].listen == "127.0.0.1:7001"
    assert args["binder"].lock_lease == 7.0
    assert not hasattr(args["queue"], "lock_lease")  # the binder's flag, not given to the others


@pytest.mark.parametrize(
    ("binder", "scheduler", "shared"),
    [
        (["--backend", "kubernetes"], ["--backend", "kubernetes", "--clock", "real"], True),
        (["--backend", "kubernetes", "--kubeconfig", "/a"], ["--backend", "kubernetes", "--kubeconfig", "/a"], True),
        # Two API servers: each keeps its own view of its own.
        (["--backend", "kubernetes", "--kubeconfig", "/a"], ["--backend", "kubernetes", "--kubeconfig", "/b"], False),
        # A scheduler on the virtual clock runs no feed to follow.
        (["--backend", "kubernetes"], ["--backend", "kubernetes", "--clock", "virtual"], False),
        (["--backend", "simulated"], ["--backend", "simulated"], False),
    ],
)
def test_the_binders_view_follows_the_schedulers_feed_only_on_the_same_api_server(
    binder: list[str], scheduler: list[str], shared: bool
) -> None:
    args = parse(["queue", "--", "binder", *binder, "--", "scheduler", *scheduler])
    assert shares_cluster_view(args["binder"], args["scheduler"]) is shared


def test_one_root_logger_takes_the_most_verbose_level() -> None:
    assert most_verbose(["INFO", "debug", "WARNING"]) == "debug"
    assert most_verbose(["WARNING", "ERROR", "WARNING"]) == "WARNING"


def test_the_combined_process_runs_each_services_own_command_line(tmp_path: Path) -> None:
    """The test stack's combined process: its sections are exactly the three processes' command lines
    (same ports, TLS directories, Redis and API server flags), so both layouts run the same settings."""
    made = ChaosStack.create(StackConfig("/nonexistent/kubeconfig", "sched", "p", tmp_path / "c", layout="combined"))
    separate = ChaosStack.create(StackConfig("/nonexistent/kubeconfig", "sched", "p", tmp_path / "s"))
    assert made.combined is not None and set(made.processes()) == {"combined"}
    argv = made.combined.argv()
    assert argv[1:3] == ["-m", "phalanx_combined"]
    sections = split_sections(argv[3:])
    for name in SERVICES:
        # Each part's own argv less `python -m phalanx_<name>`; the ports were picked for this stack.
        assert sections[name] == made.services[name].argv()[3:]
    assert made.process_of("binder") == "combined" and made.process_of("redis") == "redis"
    assert separate.process_of("binder") == "binder" and set(separate.processes()) == set(SERVICES)


def test_an_unknown_layout_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="layout 'single'"):
        ChaosStack.create(StackConfig("/k", "s", "p", tmp_path, layout="single"))


def test_an_unknown_level_name_does_not_break_the_choice() -> None:
    assert most_verbose(["LOUD", "WARNING"]) == "LOUD"  # INFO for the choice; setup_logging refuses it after
    assert most_verbose(["LOUD", "DEBUG"]) == "DEBUG"
