"""The chaos suite's Redis: append-only like the Helm chart, so a SIGKILL and a restart on the same port keep
what was acknowledged; a restart on an empty volume keeps nothing."""

from __future__ import annotations

import pytest
import redis

from phalanx.testing.redis_server import RedisServer

pytestmark = pytest.mark.starts_processes  # its own redis-server, killed and restarted


def test_a_killed_append_only_redis_comes_back_with_its_data_or_empty_on_a_new_volume() -> None:
    server = RedisServer(appendonly=True).start()
    try:
        port = server.port
        client = redis.Redis(port=port)
        client.set("k", "v")
        client.close()
        server.kill()
        assert not server.alive()
        server.start()
        client = redis.Redis(port=server.port)
        assert server.port == port and client.get("k") == b"v"
        client.close()
        server.restart(keep_data=False)
        client = redis.Redis(port=server.port)
        assert client.get("k") is None
        client.close()
    finally:
        server.stop()
