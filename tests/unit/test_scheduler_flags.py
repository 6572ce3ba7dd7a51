"""phalanx-scheduler's flags whose values are checked before the service starts."""

from __future__ import annotations

import pytest

from phalanx_scheduler import flags


@pytest.mark.parametrize("raw", ["-0.1", "2", "abc", "nan", ""])
def test_a_bad_feed_linger_is_refused_naming_the_flag(raw: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        flags.linger_of(raw)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--feed-linger (env PHALANX_FEED_LINGER)" in err and repr(raw) in err


def test_the_feed_linger_comes_from_the_flag_or_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert flags.parser("").parse_args([]).feed_linger == 0.0
    assert flags.parser("").parse_args(["--feed-linger", "0.008"]).feed_linger == 0.008
    monkeypatch.setenv("PHALANX_FEED_LINGER", "0.02")
    assert flags.parser("").parse_args([]).feed_linger == 0.02
