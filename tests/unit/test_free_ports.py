"""The harnesses' port picks stay out of the range outgoing connections take their local ports from."""

from __future__ import annotations

import socket

import pytest

from phalanx.testing import ports
from phalanx.testing.ports import ephemeral_start, free_ports


def test_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    picked = free_ports(50)
    assert len(set(picked)) == 50
    assert all(20000 <= p < ephemeral_start() for p in picked)
    held = []
    try:
        for p in picked:  # free once returned
            s = socket.socket()
            held.append(s)
            s.bind(("127.0.0.1", p))
    finally:
        for s in held:
            s.close()


def test_without_room_below_the_range_the_kernel_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "ephemeral_start", lambda: 1024)
    picked = free_ports(3)
    assert len(set(picked)) == 3 and all(p >= 1024 for p in picked)
