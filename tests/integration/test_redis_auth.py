"""The services' Redis connection against a real redis-server: AUTH with a password read from a file,
TLS for rediss:// URLs, and the password kept out of error messages."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
import redis

from phalanx.security import certs
from phalanx.state.connection import RedisConfigError, connect, redacted
from phalanx.testing.ports import free_port
from phalanx.testing.redis_server import RedisServer

pytestmark = pytest.mark.integration


def test_a_password_protected_redis_needs_the_password_file(tmp_path: Path) -> None:
    server = RedisServer(password="s3cret-pw").start()
    try:
        with pytest.raises(redis.AuthenticationError):
            connect(server.address_url).ping()
        assert connect(server.address_url, password_file=str(server.password_file())).ping()
        wrong = tmp_path / "wrong"
        wrong.write_text("nope\n")
        with pytest.raises(redis.AuthenticationError):
            connect(server.address_url, password_file=str(wrong)).ping()
    finally:
        server.stop()


def test_a_bad_password_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(RedisConfigError, match=r"--redis-password-file .*absent: No such file"):
        connect("redis://127.0.0.1:1/0", password_file=str(tmp_path / "absent"))
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(RedisConfigError, match="the file is empty"):
        connect("redis://127.0.0.1:1/0", password_file=str(empty))
    with pytest.raises(RedisConfigError, match="must start with rediss://, not redis://"):
        connect("redis://:pw@127.0.0.1:1/0", ca_file=str(empty))


def test_urls_are_redacted() -> None:
    assert redacted("redis://:hunter2@redis:6379/0") == "redis://:***@redis:6379/0"
    assert redacted("redis://redis:6379/0") == "redis://redis:6379/0"


def test_redis_over_tls(tmp_path: Path) -> None:
    binary = shutil.which("redis-server")
    assert binary is not None
    ca = certs.new_ca()
    pair = certs.issue(ca, "redis", ["localhost"], ["127.0.0.1"])
    certs.write(tmp_path, ca.cert_pem, pair)
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            "0",
            "--tls-port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--tls-cert-file",
            str(tmp_path / "tls.crt"),
            "--tls-key-file",
            str(tmp_path / "tls.key"),
            "--tls-ca-cert-file",
            str(tmp_path / "ca.crt"),
            "--tls-auth-clients",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        client = connect(f"rediss://127.0.0.1:{port}/0", ca_file=str(tmp_path / "ca.crt"))
        deadline = time.monotonic() + 10
        while True:
            try:
                assert client.set("k", "v") and client.get("k") == "v"
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        other = certs.new_ca()
        (tmp_path / "other.crt").write_bytes(other.cert_pem)
        with pytest.raises(redis.ConnectionError):  # a server the CA did not sign is not trusted
            connect(f"rediss://127.0.0.1:{port}/0", ca_file=str(tmp_path / "other.crt")).ping()
    finally:
        proc.kill()
        proc.wait()
