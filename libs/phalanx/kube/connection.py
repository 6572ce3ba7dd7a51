"""Where the API server is and how to talk to it: a kubeconfig or the pod's service account, read without the
kubernetes client, and a urllib3 pool for the services' reads, lists and watches.

Why not the client's loader and ApiClient: importing anything of the `kubernetes` package loads the whole
client (kube/errors.py), which in each of the binder and the scheduler cost 19 MiB and 0.2-0.3 s of CPU at
every start. The services need little of it: the server's URL, its CA, a bearer token or a client
certificate, and a pool of keep-alive connections; the requests themselves are built in kube/api.py.

Read here (as the client reads them): the current context's cluster (`server`, `certificate-authority` or
`-data`, `insecure-skip-tls-verify`, `tls-server-name`) and user (`token` or `tokenFile`, re-read every
minute as client-go does; `client-certificate`/`client-key` or their `-data`; relative paths are relative to
the kubeconfig's directory). A kubeconfig asking for more (an `exec` credential plugin, an `auth-provider`,
basic auth, a `proxy-url`) is loaded by the kubernetes client's own loader instead, and used through the same
`KubeConnection` (`from_configuration`), its token asked of the client's refresh hook.

In a pod (no kubeconfig): KUBERNETES_SERVICE_HOST/PORT, the service account's token (re-read every minute:
the kubelet rotates it) and CA.
"""

from __future__ import annotations

import atexit
import base64
import binascii
import logging
import os
import shutil
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

log = logging.getLogger(__name__)

CONNECTION_POOL = 32  # the binder's threads that read (its view's misses, the status lanes) share it
TOKEN_FILE_RECHECK_S = 60.0  # client-go re-reads a token file every minute
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
USER_AGENT = "phalanx"

# A user section with any of these needs the kubernetes client's loader.
_DELEGATED_USER_KEYS = ("exec", "auth-provider", "username", "password")


class KubeconfigError(ValueError):
    """A kubeconfig (or the in-cluster environment) that names no usable API server; the message names the
    file and the field."""


class KubeConnection:
    """One API server: its URL and TLS settings (under the kubernetes client Configuration's attribute names),
    the Authorization header to send, and the pool of connections the reads go through; kube/pipeline.py
    reads the same for the writes."""

    def __init__(
        self,
        host: str,
        *,
        ssl_ca_cert: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        verify_ssl: bool = True,
        tls_server_name: str | None = None,
        authorization: Callable[[], str] | None = None,
        proxy: str | None = None,
        pool_size: int = CONNECTION_POOL,
    ) -> None:
        self.host = host.rstrip("/")
        self.ssl_ca_cert = ssl_ca_cert
        self.cert_file = cert_file
        self.key_file = key_file
        self.verify_ssl = verify_ssl
        self.assert_hostname: bool | None = None
        self.tls_server_name = tls_server_name
        self.proxy = proxy
        self._authorization = authorization or (lambda: "")
        self._pool_size = pool_size
        self._pool: Any = None
        self._lock = threading.Lock()

    def authorization(self) -> str:
        """The Authorization header's value ("" for none): a token, refreshed as its source says."""
        return self._authorization()

    # -- requests --------------------------------------------------------------------------------------------
    @property
    def pool(self) -> Any:
        """The urllib3 pool, made at the first request (its import is then needed, not before)."""
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    self._pool = self._make_pool()
        return self._pool

    def _make_pool(self) -> Any:
        import urllib3

        args: dict[str, Any] = {
            "maxsize": self._pool_size,
            "cert_reqs": ssl.CERT_REQUIRED if self.verify_ssl else ssl.CERT_NONE,
            "ca_certs": self.ssl_ca_cert,
            "cert_file": self.cert_file,
            "key_file": self.key_file,
        }
        if self.tls_server_name:
            args["server_hostname"] = self.tls_server_name
        if self.proxy:
            return urllib3.ProxyManager(proxy_url=self.proxy, **args)
        return urllib3.PoolManager(**args)

    def request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
        timeout: Any = None,
    ) -> Any:
        """One request; the urllib3 response, its body not read (as the client's `_preload_content=False`)."""
        url = self.host + path
        if query:
            url += "?" + "&".join(f"{quote(name)}={quote(_query_value(value), safe='')}" for name, value in query)
        sent = {"User-Agent": USER_AGENT, **(headers or {})}
        auth = self.authorization()
        if auth:
            sent["Authorization"] = auth
        return self.pool.request(method, url, body=body, headers=sent, timeout=_timeout(timeout), preload_content=False)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.clear()

    # -- sources ---------------------------------------------------------------------------------------------
    @classmethod
    def from_configuration(cls, configuration: Any) -> KubeConnection:
        """A kubernetes client Configuration (its loader's result, or a test's), its token asked of it."""
        recheck = _Recheck(lambda: _bearer(configuration), 1.0)
        conn = cls(
            str(configuration.host),
            ssl_ca_cert=configuration.ssl_ca_cert,
            cert_file=configuration.cert_file,
            key_file=configuration.key_file,
            verify_ssl=bool(configuration.verify_ssl),
            tls_server_name=getattr(configuration, "tls_server_name", None),
            authorization=recheck,
            proxy=getattr(configuration, "proxy", None),
        )
        conn.assert_hostname = getattr(configuration, "assert_hostname", None)
        return conn

    @classmethod
    def of(cls, client: Any) -> KubeConnection:
        """`client` as a KubeConnection: itself, or a kubernetes ApiClient's configuration (tests, tools)."""
        if isinstance(client, KubeConnection):
            return client
        if client is None:  # the kubernetes client's default configuration, as its generated classes take
            from kubernetes.client import Configuration

            return cls.from_configuration(Configuration.get_default_copy())
        return cls.from_configuration(client.configuration)


def connection_of(args: Any) -> KubeConnection:
    """The process's connection, from its parsed flags (`kubeconfig`; empty: the pod's service account), made
    once and kept on `args`: the scheduler's feed and Lease share its pool, and inline keys are written once."""
    conn = getattr(args, "kube_connection", None)
    if conn is None:
        conn = connect(getattr(args, "kubeconfig", "") or "")
        args.kube_connection = conn
    return conn


def connect(kubeconfig: str = "") -> KubeConnection:
    """The services' connection: from `kubeconfig`, or in a pod from its service account when empty."""
    if kubeconfig:
        return load_kubeconfig(kubeconfig)
    return in_cluster()


def load_kubeconfig(path: str, context: str | None = None) -> KubeConnection:
    import yaml

    file = Path(path).expanduser()
    where = f"kubeconfig {file}"
    try:
        # libyaml's loader when PyYAML has it: a kubeconfig's certificates are long scalars, which the pure
        # Python scanner reads at ~20 ms per file (every scheduler and binder start); same documents, same errors.
        doc = yaml.load(file.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except OSError as exc:
        raise KubeconfigError(f"{where}: cannot be read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise KubeconfigError(f"{where}: not YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise KubeconfigError(f"{where}: expected a mapping (apiVersion, clusters, users, contexts)")
    name = context or doc.get("current-context")
    if not name:
        raise KubeconfigError(f"{where}: current-context is not set")
    ctx = _named(doc, "contexts", "context", str(name), where)
    cluster = _named(doc, "clusters", "cluster", str(ctx.get("cluster") or ""), f"{where}: context {name!r}")
    user_name = ctx.get("user")
    user = _named(doc, "users", "user", str(user_name), f"{where}: context {name!r}") if user_name else {}
    delegated = [k for k in _DELEGATED_USER_KEYS if user.get(k)] + (["proxy-url"] if cluster.get("proxy-url") else [])
    if delegated:
        log.info("%s: %s read by the kubernetes client's loader", where, ", ".join(delegated))
        return _through_client(str(file), context)
    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        raise KubeconfigError(f"{where}: cluster {ctx.get('cluster')!r} has no server")
    base = file.resolve().parent
    tls = server.startswith("https")
    return KubeConnection(
        server,
        ssl_ca_cert=_file_or_data(cluster, "certificate-authority", base, where) if tls else None,
        cert_file=_file_or_data(user, "client-certificate", base, where) if tls else None,
        key_file=_file_or_data(user, "client-key", base, where) if tls else None,
        verify_ssl=not _flag(cluster, "insecure-skip-tls-verify", where),
        tls_server_name=cluster.get("tls-server-name") or None,
        authorization=_user_token(user, base, where),
    )


def in_cluster(environ: Any = None, account: Path = SERVICE_ACCOUNT) -> KubeConnection:
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise KubeconfigError(
            "no kubeconfig given (--kubeconfig) and not in a pod: KUBERNETES_SERVICE_HOST/PORT are not set"
        )
    token, ca = account / "token", account / "ca.crt"
    for f in (token, ca):
        if not f.is_file() or not f.stat().st_size:
            raise KubeconfigError(f"in-cluster configuration: {f} is missing or empty")
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return KubeConnection(
        f"https://{host}:{port}",
        ssl_ca_cert=str(ca),
        authorization=_Recheck(lambda: "Bearer " + token.read_text().strip(), TOKEN_FILE_RECHECK_S),
    )


# -- helpers ---------------------------------------------------------------------------------------------------
class _Recheck:
    """A value asked of `source` again once `every` seconds have passed (a token file, a refresh hook)."""

    def __init__(self, source: Callable[[], str], every: float) -> None:
        self.source, self.every = source, every
        self.value, self.due = "", float("-inf")

    def __call__(self) -> str:
        now = time.monotonic()
        if now >= self.due:  # two threads may both ask at the turn: harmless
            self.value, self.due = self.source(), now + self.every
        return self.value


def _bearer(configuration: Any) -> str:
    settings = configuration.auth_settings().get("BearerToken") or {}
    return str(settings.get("value") or "") if settings.get("in") == "header" else ""


def _named(doc: dict[str, Any], section: str, key: str, name: str, where: str) -> dict[str, Any]:
    for entry in doc.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(key)
            if not isinstance(body, dict):
                raise KubeconfigError(f"{where}: {section} entry {name!r} has no {key} mapping")
            return body
    raise KubeconfigError(f"{where}: {section} has no entry named {name!r}")


def _flag(section: dict[str, Any], key: str, where: str) -> bool:
    value = section.get(key, False)
    if not isinstance(value, bool):
        raise KubeconfigError(f"{where}: {key} must be true or false, not {value!r}")
    return value


def _file_or_data(section: dict[str, Any], key: str, base: Path, where: str) -> str | None:
    """The path of `key`'s file, or of a private file holding `key`-data (base64), or None."""
    data = section.get(f"{key}-data")
    if data:
        try:
            raw = base64.b64decode(str(data), validate=True)
        except (binascii.Error, ValueError):
            raise KubeconfigError(f"{where}: {key}-data is not base64") from None
        return _private_file(raw)
    path = section.get(key)
    if not path:
        return None
    full = base / Path(str(path)).expanduser()
    if not full.is_file():
        raise KubeconfigError(f"{where}: {key} {str(full)!r} does not exist")
    return str(full)


def _user_token(user: dict[str, Any], base: Path, where: str) -> Callable[[], str]:
    token = user.get("token")
    if token:
        header = f"Bearer {token}"
        return lambda: header
    token_file = user.get("tokenFile")
    if token_file:
        path = base / Path(str(token_file)).expanduser()
        if not path.is_file():
            raise KubeconfigError(f"{where}: tokenFile {str(path)!r} does not exist")
        return _Recheck(lambda: "Bearer " + path.read_text().strip(), TOKEN_FILE_RECHECK_S)
    return lambda: ""


_private_dir: str | None = None


def _private_file(data: bytes) -> str:
    """`data` in a file only this user reads, removed when the process exits (TLS loads keys from files)."""
    global _private_dir
    if _private_dir is None:
        _private_dir = tempfile.mkdtemp(prefix="phalanx-kube-")
        atexit.register(shutil.rmtree, _private_dir, True)
    fd, path = tempfile.mkstemp(dir=_private_dir)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def _through_client(path: str, context: str | None) -> KubeConnection:
    import kubernetes.client
    import kubernetes.config

    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
    return KubeConnection.from_configuration(configuration)


def _query_value(value: Any) -> str:
    if isinstance(value, bool):  # as the generated client sends them
        return "true" if value else "false"
    return str(value)


def _timeout(value: Any) -> Any:
    """The generated client's `_request_timeout`: a number (the whole request) or (connect, read)."""
    if not value:
        return None
    import urllib3

    if isinstance(value, (int, float)):
        return urllib3.Timeout(total=value)
    connect, read = value
    return urllib3.Timeout(connect=connect, read=read)
