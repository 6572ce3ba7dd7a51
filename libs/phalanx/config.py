"""Service settings from flags, with environment variables (PHALANX_*) as defaults.

Every such flag is declared with `env_flag`, whose --help line names the variable and the default, so
--help lists every setting a service reads from its environment.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from phalanx.security.tls import PLAINTEXT, Security, TlsError, is_loopback
from phalanx.version import package_version

if TYPE_CHECKING:
    import redis
    from prometheus_client.registry import Collector

    from phalanx.metrics.endpoint import MetricsEndpoint

DEFAULT_PORTS = {"queue": 50051, "scheduler": 50052, "binder": 50053}
# Plaintext, health only (grpc.health.v1), for kubelet's gRPC probes, which cannot present a certificate.
DEFAULT_HEALTH_PORTS = {"queue": 50061, "scheduler": 50062, "binder": 50063}
# Plain HTTP, read-only: Prometheus' /metrics.
DEFAULT_METRICS_PORTS = {"queue": 9091, "scheduler": 9092, "binder": 9093}
DEFAULT_TLS_DIR = "/etc/phalanx/tls"
ENV_PREFIX = "PHALANX_"


def env(name: str, default: str) -> str:
    return os.environ.get(f"{ENV_PREFIX}{name}", default)


class _Flags(Protocol):
    """An ArgumentParser or one of its argument groups."""

    def add_argument(self, *names: str, **options: Any) -> argparse.Action: ...


def env_flag(
    flags: _Flags,
    flag: str,
    variable: str,
    default: str,
    help: str = "",
    *,
    parse: Callable[[str], Any] = str,
    shown: str | None = None,
    **options: Any,
) -> argparse.Action:
    """A flag whose default is the environment variable `variable` (PHALANX_...) if set, else `default`; its
    --help line ends with "(env VARIABLE; default: ...)". `parse` turns the variable's text (or `default`)
    into the default value, as `type=` does a flag's value (a bad value fails when the parser is built, as
    before); `shown` describes the default where its text does not say it (empty meaning "computed")."""
    if not variable.startswith(ENV_PREFIX):
        raise ValueError(f"{variable}: the services' environment variables start with {ENV_PREFIX}")
    described = shown if shown is not None else (default if default else "empty")
    note = f"env {variable}; default: {described.replace('%', '%%')}"  # argparse %-formats help
    return flags.add_argument(
        flag, default=parse(os.environ.get(variable, default)), help=f"{help} ({note})" if help else note, **options
    )


def common_parser(service: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"phalanx-{service}", description=description)
    p.add_argument("--version", action="version", version=f"phalanx-{service} {package_version()}")
    env_flag(p, "--listen", "PHALANX_LISTEN", f"0.0.0.0:{DEFAULT_PORTS[service]}", "address to serve gRPC on")
    env_flag(
        p,
        "--clock",
        "PHALANX_CLOCK",
        "real",
        "real: wall clock; virtual: the `now` each request carries is the time (simulation)",
        choices=["real", "virtual"],
    )
    env_flag(p, "--log-level", "PHALANX_LOG_LEVEL", "INFO", "DEBUG, INFO, WARNING or ERROR")
    env_flag(
        p,
        "--tls-dir",
        "PHALANX_TLS_DIR",
        DEFAULT_TLS_DIR,
        "directory holding this service's ca.crt, tls.crt and tls.key (a kubernetes.io/tls Secret with ca.crt, "
        "as cert-manager writes it); re-read when the files change",
    )
    env_flag(
        p,
        "--plaintext",
        "PHALANX_PLAINTEXT",
        "",
        "no TLS and no caller authorization: only for loopback addresses (the embedded simulator, tests); "
        "refused for any other --listen",
        parse=lambda raw: bool(opt_bool(raw)),
        shown="false; the variable: true or false",
        action="store_true",
    )
    env_flag(
        p,
        "--health-listen",
        "PHALANX_HEALTH_LISTEN",
        "",
        "plaintext address serving only the gRPC health service, for kubelet probes",
        shown=f"with TLS, the --listen host, port {DEFAULT_HEALTH_PORTS[service]}; with --plaintext, none: "
        "health is on --listen",
    )
    env_flag(
        p,
        "--metrics-listen",
        "PHALANX_METRICS_LISTEN",
        f"0.0.0.0:{DEFAULT_METRICS_PORTS[service]}",
        "address of the Prometheus /metrics endpoint: plain HTTP, read-only (it serves counters and gauges, "
        "and accepts no change); empty or 'off' turns it off",
    )
    return p


def usage_error(service: str, message: str) -> NoReturn:
    """A setting the service cannot run with: one line on stderr, exit status 2 (as argparse's)."""
    print(f"phalanx-{service}: {message}", file=sys.stderr)
    raise SystemExit(2)


def check_kubeconfig(service: str, args: argparse.Namespace) -> None:
    """A service that will talk to the API server reads its kubeconfig (or the pod's service account) at
    start: one that names no usable server ends it with one line naming the file and the field."""
    if getattr(args, "backend", "") != "kubernetes" or getattr(args, "clock", "real") != "real":
        return
    from phalanx.kube.connection import KubeconfigError, connection_of

    try:
        connection_of(args)  # kept on args for the service's own use (kube.connection.connection_of)
    except KubeconfigError as exc:
        usage_error(service, str(exc))


def serve_metrics_of(args: argparse.Namespace, service: str, *collectors: "Collector") -> "MetricsEndpoint | None":
    """Starts the service's /metrics endpoint on --metrics-listen (None when it is off); a bad or busy
    address ends the service with one line naming it."""
    from phalanx.metrics.catalog import registry_for
    from phalanx.metrics.endpoint import MetricsListenError, serve_metrics

    try:
        return serve_metrics(args.metrics_listen, registry_for(service, *collectors))
    except MetricsListenError as exc:
        usage_error(service, f"--metrics-listen {args.metrics_listen}: {exc}")


def opt_bool(raw: str) -> bool | None:
    """A yes/no setting (an environment default): None when `raw` is empty or says neither."""
    low = raw.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    return None


def bool_arg(raw: str) -> bool:
    """argparse type of a yes/no flag value."""
    value = opt_bool(raw)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected true or false, got {raw!r}")
    return value


def security_of(args: argparse.Namespace) -> Security:
    """The service's transport security from its flags; exits with a message naming the flag if the
    certificates cannot be read."""
    if args.plaintext:
        if not is_loopback(args.listen):
            raise SystemExit(
                f"--listen {args.listen}: --plaintext is allowed on loopback addresses only "
                "(127.0.0.1, ::1); give certificates with --tls-dir for any other address"
            )
        return PLAINTEXT
    try:
        return Security.tls(args.tls_dir)
    except TlsError as exc:
        raise SystemExit(f"--tls-dir: {exc}") from None


def health_listen_of(args: argparse.Namespace, service: str) -> str:
    if args.health_listen or args.plaintext:
        return str(args.health_listen)
    host = args.listen.rsplit(":", 1)[0]
    return f"{host}:{DEFAULT_HEALTH_PORTS[service]}"


def kubeconfig_arg(p: argparse.ArgumentParser) -> None:
    """--kubeconfig, for the services that talk to the API server (scheduler and binder)."""
    env_flag(
        p,
        "--kubeconfig",
        "PHALANX_KUBECONFIG",
        "",
        "kubeconfig file of the API server",
        shown="empty: in-cluster configuration",
    )


def redis_args(p: argparse.ArgumentParser) -> None:
    env_flag(p, "--redis-url", "PHALANX_REDIS_URL", "redis://127.0.0.1:6379/0", "Redis holding Phalanx's state")
    env_flag(p, "--redis-prefix", "PHALANX_REDIS_PREFIX", "phalanx", "prefix of every Redis key")
    env_flag(
        p,
        "--redis-password-file",
        "PHALANX_REDIS_PASSWORD_FILE",
        "",
        "file holding Redis' password (AUTH); the password is never taken from a flag or logged",
    )
    env_flag(
        p,
        "--redis-ca-file",
        "PHALANX_REDIS_CA_FILE",
        "",
        "CA certificate to verify Redis with, for a rediss:// (TLS) URL, or for the Sentinels and the data "
        "nodes with --redis-sentinels (TLS is on for them when this is given)",
    )
    env_flag(
        p,
        "--redis-sentinels",
        "PHALANX_REDIS_SENTINELS",
        "",
        "find the Redis primary through these Sentinels (host:port,host:port,...) and follow its failovers; "
        "--redis-url is then not used, --redis-password-file authenticates to the Sentinels and the data nodes",
        shown="empty: one Redis at --redis-url",
    )
    env_flag(
        p,
        "--redis-master-name",
        "PHALANX_REDIS_MASTER_NAME",
        "",
        "the primary's name as the Sentinels monitor it (with --redis-sentinels)",
    )
    env_flag(
        p,
        "--redis-socket-timeout",
        "PHALANX_REDIS_SOCKET_TIMEOUT",
        "5",
        "with --redis-sentinels: seconds a Redis command may go unanswered before the connection is dropped and "
        "the Sentinels asked again (a frozen or partitioned primary)",
        parse=float,
        type=float,
    )


def redis_client(args: argparse.Namespace) -> "redis.Redis":
    from phalanx.state.connection import RedisConfigError, connect, parse_sentinels

    try:
        sentinel = parse_sentinels(
            getattr(args, "redis_sentinels", ""),
            getattr(args, "redis_master_name", ""),
            getattr(args, "redis_socket_timeout", 5.0),
        )
        return connect(
            args.redis_url, password_file=args.redis_password_file, ca_file=args.redis_ca_file, sentinel=sentinel
        )
    except RedisConfigError as exc:
        raise SystemExit(str(exc)) from None


def bind_wait_args(p: argparse.ArgumentParser) -> None:
    """The binder's durability setting: the bind intent on a replica before any binding is sent."""
    env_flag(
        p,
        "--bind-wait-replicas",
        "PHALANX_BIND_WAIT_REPLICAS",
        "auto",
        "replicas that must hold a gang's bind intent (Redis WAIT) before its bindings are sent; fewer within "
        "--bind-wait-timeout and nothing is bound yet (the pods stay 'binding' and are retried)",
        shown="auto: 1 with --redis-sentinels, else 0 (no WAIT)",
    )
    env_flag(
        p,
        "--bind-wait-timeout",
        "PHALANX_BIND_WAIT_TIMEOUT",
        "1",
        "seconds the binder waits for --bind-wait-replicas",
        parse=float,
        type=float,
    )


def bind_wait(args: argparse.Namespace) -> tuple[int, float]:
    """(replicas, timeout in seconds) from --bind-wait-replicas and --bind-wait-timeout; exits naming the flag."""
    raw = str(args.bind_wait_replicas).strip().lower()
    if raw in ("", "auto"):
        replicas = 1 if getattr(args, "redis_sentinels", "") else 0
    elif raw.isdigit():
        replicas = int(raw)
    else:
        raise SystemExit(f"--bind-wait-replicas: {args.bind_wait_replicas!r} is not a number of replicas or 'auto'")
    if not args.bind_wait_timeout > 0:
        raise SystemExit(f"--bind-wait-timeout must be positive, not {args.bind_wait_timeout:g}")
    return replicas, float(args.bind_wait_timeout)


def redis_address(client: "redis.Redis") -> str:
    """host:port (or the socket path) a client connects to; never its password. Through Sentinel: the
    master name and the primary last handed out."""
    from phalanx.state.connection import sentinel_of

    found = sentinel_of(client)
    if found is not None:
        manager, name = found
        now = manager.current.get(name)
        return f"primary {name!r}" + (f" (last at {now[0]}:{now[1]})" if now else "") + " via Sentinel"
    kwargs = client.connection_pool.connection_kwargs
    if kwargs.get("path"):
        return str(kwargs["path"])
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"


def redis_unreachable(exc: BaseException, client: "redis.Redis") -> str:
    """One line naming Redis when `exc` is a failure to reach it, else ""."""
    import redis

    if not isinstance(exc, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)):
        return ""
    text = str(exc).splitlines()
    return f"Redis at {redis_address(client)} is unreachable: {text[0] if text else type(exc).__name__}"


def setup_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
