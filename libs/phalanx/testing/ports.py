"""Free loopback ports for the servers the tests and harnesses start."""

from __future__ import annotations

import socket


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports free now: the sockets are held open together, so two picks cannot
    return the same port (picked one at a time they could, and a process then failed to bind)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def free_port() -> int:
    return free_ports(1)[0]
