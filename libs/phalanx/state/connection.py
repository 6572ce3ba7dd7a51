"""The services' Redis connection: password from a file, TLS for rediss:// URLs, nothing secret in logs."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import redis


class RedisConfigError(ValueError):
    pass


def connect(url: str, *, password_file: str = "", ca_file: str = "") -> redis.Redis:
    """A client for `url`; the password comes from `password_file` (a mounted Secret) when given, so it
    is neither in the process's arguments nor in its environment."""
    kwargs: dict[str, object] = {"decode_responses": True}
    if password_file:
        try:
            password = Path(password_file).read_text().strip()
        except OSError as exc:
            raise RedisConfigError(f"--redis-password-file {password_file}: {exc.strerror or exc}") from None
        if not password:
            raise RedisConfigError(f"--redis-password-file {password_file}: the file is empty")
        kwargs["password"] = password
    if ca_file:
        if not url.startswith("rediss://"):
            raise RedisConfigError(
                f"--redis-ca-file is for TLS: --redis-url must start with rediss://, not "
                f"{redacted(url).split('://')[0]}://"
            )
        kwargs["ssl_ca_certs"] = ca_file
    return redis.Redis.from_url(url, **kwargs)


def redacted(url: str) -> str:
    """`url` with any password replaced, for log lines and error messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))
