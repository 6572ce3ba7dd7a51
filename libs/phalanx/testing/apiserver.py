"""A real etcd + kube-apiserver on loopback ports, for integration tests (like controller-runtime's envtest).

    from phalanx.testing.apiserver import LocalApiServer, apiserver_available

    @pytest.mark.skipif(not apiserver_available(), reason=APISERVER_MISSING_REASON)
    def test_something():
        with LocalApiServer() as server:
            api = server.api_client()                    # kubernetes.client.ApiClient, admin token
            core = kubernetes.client.CoreV1Api(api)
            ...
            # or hand server.kubeconfig_path to anything that takes a kubeconfig

There is no kubelet, controller-manager or scheduler: objects are stored and validated, nothing acts on
them. Pods stay Pending until something binds them (pods/binding), namespaces are never finalised, no
ServiceAccount controller creates `default` accounts. What the server is configured to do:

* Authentication: a static token file. `token` belongs to user `phalanx-admin` in `system:masters`
  (bypasses RBAC); `LocalApiServer(users={"alice": ["team-a"]})` adds more token users, reachable via
  `api_client(user="alice")` / `kubeconfig_for("alice")`. Service-account tokens (TokenRequest) work too:
  the server has a generated signing key pair.
* Authorization: RBAC only, so Roles/ClusterRoles/bindings are enforced for every user but the admin.
* Admission: the defaults minus `ServiceAccount` (needs a `default` account in each namespace, which only
  the absent controller-manager would create) and `TaintNodesByCondition` (would put a
  `node.kubernetes.io/not-ready` taint on every new Node that nothing would ever lift).
* TLS: kube-apiserver makes a self-signed serving certificate for 127.0.0.1; the kubeconfig carries that
  certificate as its CA, so clients verify the server without warnings.
* Alpha APIs: Kubernetes' own gang API (KEP-4671: scheduling.k8s.io/v1alpha2 Workloads and PodGroups, and
  the Pod field spec.schedulingGroup) is served, with `--feature-gates=GenericWorkload=true
  --runtime-config=scheduling.k8s.io/v1alpha2=true` (WORKLOAD_API_ARGS), when the binary is 1.36 or later
  (`workload_api=False` leaves it off). It only adds resources: nothing else changes. Without the gate the
  API server silently drops spec.schedulingGroup from the pods it stores.

Binaries: found by phalanx.testing.k8s_binaries ($PHALANX_K8S_BIN_DIR, else what hack/build-k8s-binaries.sh
built). The tools needed are `etcd`, `kube-apiserver` and `openssl` (for the service-account key pair).
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.testing.k8s_binaries import apiserver_version, find_k8s_bin_dir, has_binaries, k8s_cache_root
from phalanx.testing.ports import free_port, free_ports

if TYPE_CHECKING:
    import kubernetes.client

ADMIN_USER = "phalanx-admin"
DEFAULT_DISABLED_ADMISSION_PLUGINS = ("ServiceAccount", "TaintNodesByCondition")
DEFAULT_SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
# Kubernetes' Workload API (alpha): the feature gate (which also keeps Pod spec.schedulingGroup) and the API
# version, off by default. v1alpha2 (PodGroup objects, spec.schedulingGroup) is the 1.36 shape.
WORKLOAD_API_ARGS = ("--feature-gates=GenericWorkload=true", "--runtime-config=scheduling.k8s.io/v1alpha2=true")
WORKLOAD_API_SINCE = (1, 36)
APISERVER_MISSING_REASON = (
    "kube-apiserver/etcd binaries not found: run hack/build-k8s-binaries.sh (takes ~5 min) or set PHALANX_K8S_BIN_DIR"
)

# --- whether it can run here ------------------------------------------------------------------------------


def apiserver_available() -> bool:
    """Whether LocalApiServer can start here: binaries built, openssl on PATH, kubernetes client importable."""
    if find_k8s_bin_dir() is None or shutil.which("openssl") is None:
        return False
    try:
        import kubernetes  # noqa: F401
    except ImportError:
        return False
    return True


# --- the server ------------------------------------------------------------------------------------------


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class LocalApiServerError(RuntimeError):
    pass


class _AddressInUse(LocalApiServerError):
    pass


class LocalApiServer:
    """etcd + kube-apiserver on free loopback ports, in a temporary directory. Use as a context manager."""

    def __init__(
        self,
        bin_dir: str | os.PathLike[str] | None = None,
        *,
        users: Mapping[str, Sequence[str]] | None = None,
        disable_admission_plugins: Sequence[str] = DEFAULT_DISABLED_ADMISSION_PLUGINS,
        extra_apiserver_args: Sequence[str] = (),
        service_cluster_ip_range: str = DEFAULT_SERVICE_CLUSTER_IP_RANGE,
        startup_timeout: float = 120.0,
        keep_dir: bool | None = None,
        workload_api: bool | None = None,
    ) -> None:
        """
        bin_dir: where etcd and kube-apiserver are (default: find_k8s_bin_dir()).
        users: extra static-token users, name -> groups. The admin user is always there.
        extra_apiserver_args: appended to kube-apiserver's command line (later flags win).
        workload_api: serve scheduling.k8s.io/v1alpha2 (WORKLOAD_API_ARGS); default: when the binary is
            1.36 or later (older ones refuse the flags).
        keep_dir: keep the temp dir (logs, certs, etcd data) after stop; default from
            $PHALANX_KEEP_APISERVER_DIR. On a failed start the log tails are in the exception either way.
        """
        found = Path(bin_dir) if bin_dir is not None else find_k8s_bin_dir()
        if found is None or not has_binaries(found):
            raise LocalApiServerError(f"{APISERVER_MISSING_REASON} (looked in {found or k8s_cache_root()})")
        self.bin_dir = found
        self._users: dict[str, list[str]] = {ADMIN_USER: ["system:masters"]}
        for name, groups in (users or {}).items():
            if name == ADMIN_USER:
                raise ValueError(f"user name {ADMIN_USER!r} is reserved")
            self._users[name] = list(groups)
        self._tokens = {name: secrets.token_hex(16) for name in self._users}
        self.disable_admission_plugins = list(disable_admission_plugins)
        self.extra_apiserver_args = list(extra_apiserver_args)
        self.service_cluster_ip_range = service_cluster_ip_range
        self.startup_timeout = startup_timeout
        self.keep_dir = bool(os.environ.get("PHALANX_KEEP_APISERVER_DIR")) if keep_dir is None else keep_dir
        if workload_api is None:
            version = apiserver_version(self.bin_dir)
            workload_api = version is not None and version >= WORKLOAD_API_SINCE
        self.workload_api = workload_api

        self.dir: Path | None = None
        self.etcd_port = 0
        self.port = 0
        self._etcd: subprocess.Popen[bytes] | None = None
        self._apiserver: subprocess.Popen[bytes] | None = None
        self._clients: list[kubernetes.client.ApiClient] = []
        self._kubeconfigs: dict[str, Path] = {}
        self._ca_pem: bytes = b""
        self.startup_seconds = 0.0

    # -- public surface ------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    @property
    def token(self) -> str:
        """The admin (system:masters) bearer token."""
        return self._tokens[ADMIN_USER]

    def token_for(self, user: str) -> str:
        return self._tokens[user]

    @property
    def kubeconfig_path(self) -> Path:
        """A kubeconfig for the admin user (token auth, the server's self-signed certificate as CA)."""
        return self.kubeconfig_for(ADMIN_USER)

    def kubeconfig_for(self, user: str) -> Path:
        self._require_started()
        if user not in self._kubeconfigs:
            path = self._path(f"kubeconfig-{user}.yaml")
            path.write_text(json.dumps(self._kubeconfig(user), indent=2))
            path.chmod(0o600)
            self._kubeconfigs[user] = path
        return self._kubeconfigs[user]

    @property
    def ca_cert_path(self) -> Path:
        return self._path("certs", "apiserver.crt")

    @property
    def log_dir(self) -> Path:
        return self._path()

    def api_client(self, user: str = ADMIN_USER) -> kubernetes.client.ApiClient:
        """A fresh kubernetes.client.ApiClient for `user`, loaded from its kubeconfig. Closed by stop()."""
        import kubernetes.config

        client = kubernetes.config.new_client_from_config(config_file=str(self.kubeconfig_for(user)))
        self._clients.append(client)
        return client

    # -- lifecycle -----------------------------------------------------------------------------------------

    def __enter__(self) -> LocalApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> LocalApiServer:
        if self._apiserver is not None:
            raise LocalApiServerError("already started")
        began = time.monotonic()
        self.dir = Path(tempfile.mkdtemp(prefix="phalanx-apiserver-"))
        atexit.register(self.stop)
        try:
            self._write_auth_files()
            for attempt in range(3):  # free ports can be taken between choosing and binding them
                try:
                    self._start_etcd()
                    self._start_apiserver()
                    break
                except _AddressInUse:
                    self._kill_processes()
                    if attempt == 2:
                        raise
            self._ca_pem = self.ca_cert_path.read_bytes()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def stop(self) -> None:
        for client in self._clients:
            try:
                client.close()
            except Exception:
                pass
        self._clients.clear()
        self._kill_processes()
        if self.dir is not None and not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None
        self._kubeconfigs.clear()
        atexit.unregister(self.stop)

    # -- internals -----------------------------------------------------------------------------------------

    def _require_started(self) -> None:
        if self.dir is None or self._apiserver is None:
            raise LocalApiServerError("LocalApiServer is not running (use `with LocalApiServer() as s:`)")

    def _path(self, *parts: str) -> Path:
        if self.dir is None:
            raise LocalApiServerError("LocalApiServer is not running")
        return self.dir.joinpath(*parts)

    def _write_auth_files(self) -> None:
        key, pub = self._path("sa.key"), self._path("sa.pub")
        for cmd in (
            ["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(key)],
            ["openssl", "pkey", "-in", str(key), "-pubout", "-out", str(pub)],
        ):
            try:
                subprocess.run(cmd, check=True, capture_output=True)
            except FileNotFoundError:
                raise LocalApiServerError("openssl is not on PATH (Debian: apt-get install openssl)") from None
            except subprocess.CalledProcessError as e:
                raise LocalApiServerError(f"{' '.join(cmd)} failed: {e.stderr.decode(errors='replace')}") from None
        # token,user,uid,"group1,group2"
        lines = [f'{self._tokens[u]},{u},{u},"{",".join(g)}"' for u, g in self._users.items()]
        tokens = self._path("tokens.csv")
        tokens.write_text("\n".join(lines) + "\n")
        tokens.chmod(0o600)

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = open(self._path(f"{name}.log"), "ab")
        try:
            return subprocess.Popen(
                [str(self.bin_dir / name), *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                start_new_session=True,
            )
        finally:
            log.close()

    def _start_etcd(self) -> None:
        self.etcd_port, peer = free_ports(2)
        data = self._path("etcd")
        shutil.rmtree(data, ignore_errors=True)
        peer_url = f"http://127.0.0.1:{peer}"
        self._etcd = self._spawn(
            "etcd",
            [
                "--name=phalanx",
                f"--data-dir={data}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=phalanx={peer_url}",
                "--initial-cluster-state=new",
                "--unsafe-no-fsync=true",  # throwaway data: skip fsyncs, much faster on a busy disk
                "--log-level=warn",
            ],
        )
        self._wait("etcd", self._etcd, lambda: self._http_ok(f"{self.etcd_url}/health"))

    def _start_apiserver(self) -> None:
        self.port = free_port()
        args = [
            f"--etcd-servers={self.etcd_url}",
            f"--cert-dir={self._path('certs')}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--service-cluster-ip-range={self.service_cluster_ip_range}",
            f"--token-auth-file={self._path('tokens.csv')}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={self.url}",
            f"--service-account-key-file={self._path('sa.pub')}",
            f"--service-account-signing-key-file={self._path('sa.key')}",
            "--allow-privileged=true",
            # The "kubernetes" Service's endpoints would be 127.0.0.1, which Endpoints validation rejects
            # (loopback) and logs about forever; nothing in-cluster needs them here.
            "--endpoint-reconciler-type=none",
            "--profiling=false",
        ]
        if self.disable_admission_plugins:
            args.append(f"--disable-admission-plugins={','.join(self.disable_admission_plugins)}")
        if self.workload_api:
            args += WORKLOAD_API_ARGS
        args += self.extra_apiserver_args
        self._apiserver = self._spawn("kube-apiserver", args)
        self._wait("kube-apiserver", self._apiserver, lambda: self._http_ok(f"{self.url}/readyz", token=self.token))

    def _http_ok(self, url: str, token: str | None = None) -> bool:
        request = urllib.request.Request(url)
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        context = None
        if url.startswith("https:"):
            # Only a readiness probe of our own child process; clients verify against the generated CA.
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        try:
            with urllib.request.urlopen(request, timeout=2, context=context) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def _wait(self, name: str, proc: subprocess.Popen[bytes], ready: Any) -> None:
        deadline = time.monotonic() + self.startup_timeout
        log = self._path(f"{name}.log")
        while True:
            if proc.poll() is not None:
                tail = _tail(log)
                error = _AddressInUse if "address already in use" in tail else LocalApiServerError
                raise error(
                    f"{name} exited with code {proc.returncode} before becoming ready; last lines of {log}:\n{tail}"
                )
            if ready():
                return
            if time.monotonic() > deadline:
                raise LocalApiServerError(
                    f"{name} not ready after {self.startup_timeout:.0f}s; last lines of {log}:\n{_tail(log)}"
                )
            time.sleep(0.1)

    def _kill_processes(self) -> None:
        # API server first, so it does not spend its last seconds complaining about a vanished etcd.
        for attr in ("_apiserver", "_etcd"):
            proc: subprocess.Popen[bytes] | None = getattr(self, attr)
            if proc is None:
                continue
            setattr(self, attr, None)
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    proc.wait()

    def _kubeconfig(self, user: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "phalanx-local",
                    "cluster": {
                        "server": self.url,
                        "certificate-authority-data": base64.b64encode(self._ca_pem).decode(),
                    },
                }
            ],
            "users": [{"name": user, "user": {"token": self._tokens[user]}}],
            "contexts": [{"name": "phalanx-local", "context": {"cluster": "phalanx-local", "user": user}}],
            "current-context": "phalanx-local",
        }
