"""Argument types shared by the `phalanx` subcommands."""

from __future__ import annotations

import argparse

from phalanx.model.duration import parse_duration


def duration_arg(text: str) -> float:
    """A duration flag ("90s", "30m", "1h30m"): argparse reports a bad one with the parser's message."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
