"""The Sentinel and bind-WAIT settings: what they accept, and errors that name the flag."""

from __future__ import annotations

import argparse

import pytest

from phalanx.config import bind_wait, bind_wait_args, redis_args, redis_client
from phalanx.state.connection import RedisConfigError, parse_sentinels, sentinel_of


def parsed(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    redis_args(p)
    bind_wait_args(p)
    return p.parse_args(list(argv))


def test_sentinel_addresses_are_parsed() -> None:
    s = parse_sentinels(" a:26379, [::1]:1 ,b.svc:26380", "phalanx", 2.0)
    assert s is not None and s.addresses == (("a", 26379), ("::1", 1), ("b.svc", 26380))
    assert (s.master_name, s.socket_timeout) == ("phalanx", 2.0)
    assert parse_sentinels("", "") is None


@pytest.mark.parametrize(
    ("sentinels", "name", "message"),
    [
        ("a:26379", "", "--redis-sentinels needs --redis-master-name"),
        ("", "phalanx", "--redis-master-name is only used with --redis-sentinels"),
        ("a", "phalanx", "--redis-sentinels: 'a' is not host:port"),
        ("a:26379,b:99999", "phalanx", "--redis-sentinels: 'b:99999' is not host:port"),
        ("a:x", "phalanx", "--redis-sentinels: 'a:x' is not host:port"),
    ],
)
def test_bad_sentinel_settings_name_the_flag(sentinels: str, name: str, message: str) -> None:
    with pytest.raises(RedisConfigError, match=message):
        parse_sentinels(sentinels, name)


def test_the_services_exit_naming_the_flag() -> None:
    with pytest.raises(SystemExit, match="--redis-sentinels needs --redis-master-name"):
        redis_client(parsed("--redis-sentinels", "a:26379"))
    with pytest.raises(SystemExit, match="--redis-socket-timeout must be positive"):
        redis_client(parsed("--redis-sentinels", "a:1", "--redis-master-name", "m", "--redis-socket-timeout", "0"))


def test_a_sentinel_client_is_made_without_connecting() -> None:
    client = redis_client(parsed("--redis-sentinels", "127.0.0.1:1", "--redis-master-name", "m"))
    found = sentinel_of(client)
    assert found is not None and found[1] == "m"
    assert sentinel_of(redis_client(parsed())) is None  # a plain URL, as before


def test_bind_wait_defaults_to_one_replica_with_sentinel_only() -> None:
    assert bind_wait(parsed()) == (0, 1.0)
    assert bind_wait(parsed("--redis-sentinels", "a:1", "--redis-master-name", "m")) == (1, 1.0)
    assert bind_wait(parsed("--bind-wait-replicas", "2", "--bind-wait-timeout", "0.25")) == (2, 0.25)
    with pytest.raises(SystemExit, match="--bind-wait-replicas: 'some' is not a number"):
        bind_wait(parsed("--bind-wait-replicas", "some"))
    with pytest.raises(SystemExit, match="--bind-wait-timeout must be positive"):
        bind_wait(parsed("--bind-wait-timeout", "0"))
