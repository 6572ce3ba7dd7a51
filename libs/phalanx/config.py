"""Service settings from flags, with environment variables (PHALANX_*) as defaults."""

from __future__ import annotations

import argparse
import logging
import os

DEFAULT_PORTS = {"queue": 50051, "scheduler": 50052, "binder": 50053}


def env(name: str, default: str) -> str:
    return os.environ.get(f"PHALANX_{name}", default)


def common_parser(service: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"phalanx-{service}", description=description)
    p.add_argument("--listen", default=env("LISTEN", f"0.0.0.0:{DEFAULT_PORTS[service]}"),
                   help="address to serve gRPC on (env PHALANX_LISTEN)")
    p.add_argument("--clock", choices=["real", "virtual"], default=env("CLOCK", "real"),
                   help="real: wall clock; virtual: the `now` each request carries is the time "
                        "(simulation; env PHALANX_CLOCK)")
    p.add_argument("--log-level", default=env("LOG_LEVEL", "INFO"))
    return p


def redis_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--redis-url", default=env("REDIS_URL", "redis://127.0.0.1:6379/0"),
                   help="Redis holding Phalanx's state (env PHALANX_REDIS_URL)")
    p.add_argument("--redis-prefix", default=env("REDIS_PREFIX", "phalanx"),
                   help="prefix of every Redis key (env PHALANX_REDIS_PREFIX)")


def setup_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
