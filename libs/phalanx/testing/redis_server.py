"""Starts a real redis-server on a free loopback port (tests, `phalanx simulate`, `phalanx chaos`).

By default nothing is persisted: a test or simulation server lives as long as its run. With
`appendonly=True` it persists as the Helm chart's bundled Redis does (an append-only file, no RDB
snapshots), and `kill()` + `start()` is a container crash and restart: same port, same data dir, so it
comes back with what it had written (`restart(keep_data=False)` is a restart on a fresh, empty volume).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from phalanx.testing.children import exit_with_parent_argv, stop_child
from phalanx.testing.ports import free_port


class RedisServer:
    def __init__(
        self,
        port: int | None = None,
        *,
        appendonly: bool = False,
        log_path: str | os.PathLike[str] | None = None,
        password: str = "",
    ) -> None:
        """appendonly: persist like the Helm chart (`--appendonly yes --save ""`).
        log_path: append redis-server's output there (default: discarded).
        password: require AUTH, as the chart's Redis does (given in a config file, not on the command line)."""
        self.port = port or free_port()
        self.password = password
        self.appendonly = appendonly
        self.log_path = Path(log_path) if log_path is not None else None
        self.dir = tempfile.mkdtemp(prefix="phalanx-redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """With the password in it, for test code; services get `address_url` and a password file."""
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    @property
    def address_url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def password_file(self) -> Path:
        path = Path(self.dir) / "password"
        path.touch(mode=0o600)
        path.write_text(self.password + "\n")
        return path

    def argv(self) -> list[str]:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (Debian: apt-get install redis-server)")
        persistence = (
            ["--appendonly", "yes", "--appendfsync", "everysec"] if self.appendonly else ["--appendonly", "no"]
        )
        config: list[str] = []
        if self.password:
            conf = Path(self.dir) / "redis.conf"
            conf.touch(mode=0o600)
            conf.write_text(f"requirepass {self.password}\n")
            config = [str(conf)]
        return [
            binary,
            *config,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            self.dir,
            "--save",
            "",
            *persistence,
            "--protected-mode",
            "yes" if self.password else "no",
        ]

    def start(self, timeout: float = 10.0) -> "RedisServer":
        out = open(self.log_path, "ab") if self.log_path is not None else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(exit_with_parent_argv(self.argv()), stdout=out, stderr=subprocess.STDOUT)
        finally:
            if self.log_path is not None:
                out.close()  # type: ignore[union-attr]
        client = redis.Redis(port=self.port, password=self.password or None)
        deadline = time.monotonic() + timeout
        while True:
            try:
                client.ping()
                break
            except (redis.ConnectionError, redis.BusyLoadingError):  # loading the append-only file answers LOADING
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start on port {self.port}") from None
                time.sleep(0.02)
        client.close()
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crashed container: no shutdown save, the data dir is kept."""
        if self.proc is None:
            return
        try:
            self.proc.send_signal(signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.proc = None

    def restart(self, keep_data: bool = True) -> "RedisServer":
        """Starts again on the same port; keep_data=False empties the data dir first (a new volume)."""
        self.kill()
        if not keep_data:
            shutil.rmtree(self.dir, ignore_errors=True)
            os.makedirs(self.dir)
        return self.start()

    def stop(self) -> None:
        if self.proc is not None:
            stop_child(self.proc)
            self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
