"""Every `phalanx ... --help` prints percent signs as written: argparse %-formats help= strings but prints a
description as it is, so a doubled "%%" in a description showed up doubled (replay-bench's 25%%/50%%)."""

from __future__ import annotations

import argparse

import pytest

from phalanx.cli.main import build_parser, main


def _subcommands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [prefix]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _subcommands(sub, (*prefix, name))
    return out


def _help(capsys: pytest.CaptureFixture[str], *words: str) -> str:
    with pytest.raises(SystemExit):
        main([*words, "--help"])
    return capsys.readouterr().out


def test_replay_bench_help_shows_single_percent_signs(capsys: pytest.CaptureFixture[str]) -> None:
    text = " ".join(_help(capsys, "replay-bench").split())  # argparse wraps lines
    assert "first 25%/50%, for speed" in text
    assert "at 90-130% arrived demand" in text


@pytest.mark.parametrize("words", _subcommands(build_parser()), ids=lambda w: " ".join(w) or "phalanx")
def test_no_help_prints_a_doubled_percent(capsys: pytest.CaptureFixture[str], words: tuple[str, ...]) -> None:
    assert "%%" not in _help(capsys, *words)
