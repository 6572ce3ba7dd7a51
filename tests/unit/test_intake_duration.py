import pytest

from phalanx.model.duration import parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30.0),
        ("1h30m", 5400.0),
        ("1.5s", 1.5),
        ("500ms", 0.5),
        ("2h", 7200.0),
        ("90m", 5400.0),
        ("1m30s", 90.0),
        ("0s", 0.0),
        ("0", 0.0),
        ("20", 20.0),
        ("2.5", 2.5),
        ("3600s", 3600.0),
        ("1h0m0s", 3600.0),
        ("250us", 0.00025),
        ("100ns", 1e-7),
        ("+5s", 5.0),
        (" 45s ", 45.0),
        (20, 20.0),
        (1.5, 1.5),
    ],
)
def test_parse_duration_accepts_go_syntax_and_bare_seconds(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("abc", "not a duration"),
        ("-5s", "negative"),
        ("-1", "negative"),
        ("5d", "not a duration"),
        ("5 s", "not a duration"),
        ("s", "not a duration"),
        ("1h30", "not a duration"),
        ("1.2.3s", "not a duration"),
        (-3, "non-negative"),
        (True, "not a duration"),
        (None, "not a duration"),
    ],
)
def test_parse_duration_rejects_with_a_clear_message(text, fragment):
    with pytest.raises(ValueError, match=fragment):
        parse_duration(text)
