"""Shared fixtures: one real redis-server per test session, a fresh key prefix per test."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
import redis

from phalanx.state.keys import Keys
from phalanx.state.store import StateStore
from phalanx.testing.redis_server import RedisServer

_prefixes = itertools.count()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def keys() -> Keys:
    return Keys(f"t{next(_prefixes)}")


@pytest.fixture
def store(redis_client: redis.Redis, keys: Keys) -> StateStore:
    return StateStore(redis_client, keys)
