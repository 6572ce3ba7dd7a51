"""Free loopback ports for the servers the tests and harnesses start.

A port is picked now and bound later, by a process that is still starting. Picked by the kernel (bind to
port 0) it comes from the ephemeral range, the range every outgoing connection takes its local port from:
between the pick and the bind, a connection of any process on the machine (a service to Redis or to the API
server, the API server to etcd) can take it, and the server then fails to bind. So ports are picked below
the ephemeral range, where the kernel never puts an outgoing connection, and checked free by binding them.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 20000  # clear of the well-known and registered ports services on a developer's machine use
_ATTEMPTS = 200


def ephemeral_start() -> int:
    """The lowest port the kernel gives outgoing connections (Linux; 32768, its default, elsewhere)."""
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports free now, below the ephemeral range (see above) when it leaves room:
    the sockets are held open together, so two picks cannot return the same port."""
    sockets: list[socket.socket] = []
    try:
        top = ephemeral_start()
        candidates = range(_LOWEST, top) if top - _LOWEST >= 1000 else range(0)
        picker = random.SystemRandom()
        for _ in range(_ATTEMPTS if candidates else 0):
            if len(sockets) == count:
                break
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", picker.choice(candidates)))
            except OSError:  # taken (or lingering in TIME_WAIT): another pick
                s.close()
                continue
            sockets.append(s)
        while len(sockets) < count:  # no room below the range, or unlucky: the kernel's pick
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def free_port() -> int:
    return free_ports(1)[0]
