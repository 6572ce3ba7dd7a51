"""The services' Redis connection: password from a file, TLS for rediss:// URLs, nothing secret in logs.

Either one server named by a URL, or a primary found through Redis Sentinel (`sentinels` + `master_name`):
then every new connection asks the Sentinels where the primary is, a connection to a primary that was
demoted (READONLY) or that stopped answering (the socket timeout) is dropped, and the next command goes
to the promoted replica. The first command on a new primary logs one line naming it.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.sentinel import Sentinel, SentinelManagedConnection, SentinelManagedSSLConnection

log = logging.getLogger(__name__)

# With Sentinel: a command unanswered this long fails (and the next one asks the Sentinels again), so a
# frozen or partitioned primary costs a bounded wait, not a hung service. Without it a socket to a stopped
# process waits forever: the kernel keeps accepting the bytes.
DEFAULT_SENTINEL_SOCKET_TIMEOUT = 5.0


class RedisConfigError(ValueError):
    pass


@dataclass(frozen=True)
class SentinelSettings:
    """Where the Sentinels are and which primary they watch (`--redis-sentinels`, `--redis-master-name`)."""

    addresses: tuple[tuple[str, int], ...]
    master_name: str
    socket_timeout: float = DEFAULT_SENTINEL_SOCKET_TIMEOUT


def parse_sentinels(
    text: str, master_name: str, socket_timeout: float = DEFAULT_SENTINEL_SOCKET_TIMEOUT
) -> SentinelSettings | None:
    """`host:port,host:port,...` (or nothing: no Sentinel). Errors name the flag."""
    text = text.strip()
    if not text:
        if master_name:
            raise RedisConfigError("--redis-master-name is only used with --redis-sentinels (none given)")
        return None
    if not master_name:
        raise RedisConfigError("--redis-sentinels needs --redis-master-name: the name the Sentinels monitor")
    addresses: list[tuple[str, int]] = []
    for part in text.split(","):
        part = part.strip()
        host, sep, port = part.rpartition(":")
        host = host.strip("[]")  # [::1]:26379
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise RedisConfigError(f"--redis-sentinels: {part!r} is not host:port (e.g. redis-sentinel-0:26379)")
        addresses.append((host, int(port)))
    if not socket_timeout > 0:
        raise RedisConfigError(f"--redis-socket-timeout must be positive, not {socket_timeout:g}")
    return SentinelSettings(tuple(addresses), master_name, socket_timeout)


def read_password(password_file: str) -> str:
    try:
        password = Path(password_file).read_text().strip()
    except OSError as exc:
        raise RedisConfigError(f"--redis-password-file {password_file}: {exc.strerror or exc}") from None
    if not password:
        raise RedisConfigError(f"--redis-password-file {password_file}: the file is empty")
    return password


def connect(
    url: str, *, password_file: str = "", ca_file: str = "", sentinel: SentinelSettings | None = None
) -> redis.Redis:
    """A client for `url`, or for the primary `sentinel` names; the password comes from `password_file` (a
    mounted Secret) when given, so it is neither in the process's arguments nor in its environment. With
    Sentinel the same password authenticates to the Sentinels and to the data nodes (as the chart deploys
    them), TLS is on for both when `ca_file` is given, and `url` is not used."""
    kwargs: dict[str, Any] = {"decode_responses": True}
    if password_file:
        kwargs["password"] = read_password(password_file)
    if sentinel is not None:
        return _sentinel_client(sentinel, kwargs, ca_file)
    if ca_file:
        if not url.startswith("rediss://"):
            raise RedisConfigError(
                f"--redis-ca-file is for TLS: --redis-url must start with rediss://, not "
                f"{redacted(url).split('://')[0]}://"
            )
        kwargs["ssl_ca_certs"] = ca_file
    return redis.Redis.from_url(url, **kwargs)


def _sentinel_client(settings: SentinelSettings, kwargs: dict[str, Any], ca_file: str) -> redis.Redis:
    timeouts = {"socket_timeout": settings.socket_timeout, "socket_connect_timeout": settings.socket_timeout}
    tls: dict[str, Any] = {"ssl": True, "ssl_ca_certs": ca_file} if ca_file else {}
    sentinel_kwargs = {**timeouts, **tls}
    if "password" in kwargs:
        sentinel_kwargs["password"] = kwargs["password"]
    manager = FollowingSentinel(list(settings.addresses), sentinel_kwargs=sentinel_kwargs, **timeouts)
    connection_class = _FollowingSSLConnection if ca_file else _FollowingConnection
    client: redis.Redis = manager.master_for(
        settings.master_name, connection_class=connection_class, **kwargs, **timeouts, **tls
    )
    return client


def _deposed(exc: redis.exceptions.ResponseError) -> bool:
    # NOREPLICAS: the primary has fewer replicas than its min-replicas-to-write, which is what a primary that
    # was frozen or cut off while the Sentinels promoted a replica sees once it runs again (its replicas
    # follow the new primary). Sentinel demotes it only some 10 s later (READONLY from then on).
    return str(exc).startswith("NOREPLICAS")


class _FollowingConnection(SentinelManagedConnection):
    """A connection to the primary that is dropped, and the Sentinels asked again, when the server refuses
    writes for want of replicas: the command is retried on the primary they name (the same one, if its
    replicas are merely late). redis-py does this for READONLY only."""

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)
        except redis.exceptions.ResponseError as exc:
            if not _deposed(exc):
                raise
            self.disconnect()
            raise redis.exceptions.ConnectionError(f"the primary refused a write: {exc}") from None


class _FollowingSSLConnection(_FollowingConnection, SentinelManagedSSLConnection):
    pass


class FollowingSentinel(Sentinel):
    """Sentinel that says which primary it now hands out: one log line the first time, and one each time the
    Sentinels name another (a failover), on the first connection made after it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.current: dict[str, tuple[str, int]] = {}
        self._seen = threading.Lock()

    def discover_master(self, service_name: str) -> tuple[str, int]:
        address: tuple[str, int] = super().discover_master(service_name)
        address = (str(address[0]), int(address[1]))
        with self._seen:
            before = self.current.get(service_name)
            if before == address:
                return address
            self.current[service_name] = address
        if before is None:
            log.info("Redis: primary %r is %s:%d (from Sentinel)", service_name, *address)
        else:
            log.warning(
                "Redis failover: primary %r is now %s:%d (was %s:%d); using it from this command on",
                service_name,
                *address,
                *before,
            )
        return address


def sentinel_of(client: redis.Redis) -> tuple[FollowingSentinel, str] | None:
    """The Sentinel manager and master name behind `client`, or None for a plain connection."""
    pool = client.connection_pool
    manager = getattr(pool, "sentinel_manager", None)
    if isinstance(manager, FollowingSentinel):
        return manager, str(getattr(pool, "service_name", ""))
    return None


def redacted(url: str) -> str:
    """`url` with any password replaced, for log lines and error messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))
