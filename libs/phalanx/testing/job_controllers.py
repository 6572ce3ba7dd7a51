"""Real job controllers next to a LocalApiServer: kwok plays the kubelet of fake nodes, and Kubeflow's
training-operator runs PyTorchJobs.

    with LocalApiServer() as server, Kwok(server), TrainingOperator(server, gang_scheduler_name="phalanx"):
        install_pytorchjob_crd(server)                      # before the operator starts
        # fake_node, pytorchjob, PYTORCHJOB: phalanx.testing.job_objects
        core.create_node(fake_node("n1", gpus=8))           # a node kwok runs pods on
        custom.create_namespaced_custom_object(*PYTORCHJOB, ns, "pytorchjobs", pytorchjob("train", ...))

kwok (sigs.k8s.io/kwok) manages the nodes annotated KWOK_NODE_ANNOTATION: it marks them Ready, a pod bound
to one becomes Running at once (kwok's own "fast" pod-ready Stage), a pod being deleted goes at once
(pod-delete: an eviction completes as a kubelet would finish it), and a Running pod annotated
SUCCEED_AFTER (a Go duration, "5s") turns Succeeded that long after (kwok's pod-complete Stage, whose
selector upstream only takes pods owned by a batch Job, narrowed to pods carrying the annotation instead).

training-operator (github.com/kubeflow/training-operator, cmd/training-operator.v1) runs only its PyTorchJob
controller here. With --gang-scheduler-name set to anything but "volcano" it writes, per job, a
scheduler-plugins PodGroup (scheduling.x-k8s.io/v1alpha1, minMember and minResources, and
scheduleTimeoutSeconds from runPolicy.schedulingPolicy) and gives its pods that schedulerName (unless the
replica's template names one) and the label scheduling.x-k8s.io/pod-group. The PodGroup CRD must be
installed before it starts (it checks and exits otherwise); the PyTorchJob CRD too (install_pytorchjob_crd,
from the operator's own module source).

Binaries and the module files: hack/build-job-controllers.sh builds them into
${PHALANX_JOB_CONTROLLERS_CACHE:-~/.cache/phalanx/job-controllers}/<versions pinned in
hack/job-controllers/*/go.mod>/, or $PHALANX_JOB_CONTROLLERS_DIR names a directory laid out the same way.
"""

from __future__ import annotations

import atexit
import copy
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import yaml

from phalanx.testing.apiserver import LocalApiServer
from phalanx.testing.children import exit_with_parent_argv, stop_child
from phalanx.testing.job_objects import KWOK_NODE_ANNOTATION, PYTORCHJOB, SUCCEED_AFTER, fake_node
from phalanx.testing.ports import free_ports

if TYPE_CHECKING:
    import kubernetes.client

JOB_CONTROLLERS_MISSING_REASON = (
    "training-operator/kwok binaries not found: run hack/build-job-controllers.sh (takes ~5 min) "
    "or set PHALANX_JOB_CONTROLLERS_DIR"
)
BINARIES = ("training-operator", "kwok")
PYTORCHJOB_CRD = Path("crds") / "kubeflow.org_pytorchjobs.yaml"
KWOK_STAGES = ("node-initialize", "pod-ready", "pod-complete", "pod-delete")

_REPO_ROOT = Path(__file__).resolve().parents[3]
_GO_MODS = {
    "training-operator": (_REPO_ROOT / "hack" / "job-controllers" / "training-operator" / "go.mod", "github.com/kubeflow/training-operator"),
    "kwok": (_REPO_ROOT / "hack" / "job-controllers" / "kwok" / "go.mod", "sigs.k8s.io/kwok"),
}  # fmt: skip


# --- finding the binaries --------------------------------------------------------------------------------


def pinned_versions() -> dict[str, str] | None:
    """name -> version pinned in hack/job-controllers/<name>/go.mod; None outside a source checkout."""
    out: dict[str, str] = {}
    for name, (path, module) in _GO_MODS.items():
        try:
            text = path.read_text()
        except OSError:
            return None
        match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\d\S*)", text, re.MULTILINE)
        if match is None:
            return None
        out[name] = match.group(1)
    return out


def cache_root() -> Path:
    return Path(
        os.environ.get("PHALANX_JOB_CONTROLLERS_CACHE") or Path.home() / ".cache" / "phalanx" / "job-controllers"
    )


def _complete(d: Path) -> bool:
    return (
        all(os.access(d / name, os.X_OK) and (d / name).is_file() for name in BINARIES)
        and (d / PYTORCHJOB_CRD).is_file()
        and all((d / "kwok-stages" / f"{stage}.yaml").is_file() for stage in KWOK_STAGES)
    )


def find_job_controllers_dir() -> Path | None:
    """$PHALANX_JOB_CONTROLLERS_DIR, else the cache directory of the pinned versions (what
    hack/build-job-controllers.sh prints); None when it lacks anything the harness needs."""
    explicit = os.environ.get("PHALANX_JOB_CONTROLLERS_DIR")
    if explicit:
        return Path(explicit) if _complete(Path(explicit)) else None
    versions = pinned_versions()
    if versions is None:
        return None
    d = cache_root() / f"training-operator-{versions['training-operator']}-kwok-{versions['kwok']}"
    return d if _complete(d) else None


def job_controllers_available() -> bool:
    return find_job_controllers_dir() is not None


def _bin_dir(bin_dir: str | os.PathLike[str] | None) -> Path:
    found = Path(bin_dir) if bin_dir is not None else find_job_controllers_dir()
    if found is None or not _complete(found):
        raise RuntimeError(f"{JOB_CONTROLLERS_MISSING_REASON} (looked in {found or cache_root()})")
    return found


# --- the PyTorchJob CRD -----------------------------------------------------------------------------------------------


def install_pytorchjob_crd(server: LocalApiServer, bin_dir: str | os.PathLike[str] | None = None) -> None:
    """The PyTorchJob CRD as training-operator's module ships it (manifests/base/crds/), served when this returns."""
    from kubernetes import client

    crd = yaml.safe_load((_bin_dir(bin_dir) / PYTORCHJOB_CRD).read_text())
    api = server.api_client()
    client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
    custom = client.CustomObjectsApi(api)
    _wait(lambda: _listable(custom, *PYTORCHJOB, "pytorchjobs"), 30, "the PyTorchJob CRD served")


def _listable(custom: kubernetes.client.CustomObjectsApi, group: str, version: str, plural: str) -> bool:
    from kubernetes.client.rest import ApiException

    try:
        custom.list_cluster_custom_object(group, version, plural, _preload_content=False)
        return True
    except ApiException:
        return False


# --- the processes ---------------------------------------------------------------------------------------


def _wait(cond: Any, timeout: float, what: str, proc: _Child | None = None, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if proc is not None and proc.exited():
            raise RuntimeError(f"{proc.name} exited ({proc.returncode()}) before {what}:\n{proc.tail()}")
        if time.monotonic() > deadline:
            tail = f"\n{proc.name} log:\n{proc.tail()}" if proc is not None else ""
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}{tail}")
        time.sleep(interval)


class _Child:
    """One binary with its output in a log file; SIGTERMed when the test process dies (exit_with_parent_argv)."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], workdir: Path) -> None:
        self.name = name
        self.log_path = workdir / f"{name}.log"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                exit_with_parent_argv(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=workdir,
                env=env,
                start_new_session=True,
            )

    def exited(self) -> bool:
        return self.proc.poll() is not None

    def returncode(self) -> int | None:
        return self.proc.poll()

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 10.0) -> None:
        stop_child(self.proc, grace=timeout)


class _Controller:
    name = ""

    def __init__(self, server: LocalApiServer, bin_dir: str | os.PathLike[str] | None, keep_dir: bool | None) -> None:
        self.server = server
        self.bin_dir = _bin_dir(bin_dir)
        self.keep_dir = bool(os.environ.get("PHALANX_KEEP_APISERVER_DIR")) if keep_dir is None else keep_dir
        self.dir: Path | None = None
        self.child: _Child | None = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Self:
        raise NotImplementedError

    def _workdir(self) -> Path:
        if self.dir is None:
            self.dir = Path(tempfile.mkdtemp(prefix=f"phalanx-{self.name}-"))
            atexit.register(self.stop)
        return self.dir

    def _spawn(self, argv: list[str], env: dict[str, str] | None = None) -> _Child:
        workdir = self._workdir()
        full_env = {**os.environ, "KUBECONFIG": str(self.server.kubeconfig_path), **(env or {})}
        self.child = _Child(self.name, [str(self.bin_dir / self.name), *argv], full_env, workdir)
        return self.child

    @property
    def log_path(self) -> Path | None:
        return self.child.log_path if self.child is not None else None

    def tail(self, lines: int = 30) -> str:
        return self.child.tail(lines) if self.child is not None else "(not started)"

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop()
            self.child = None
        if self.dir is not None and not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None
        atexit.unregister(self.stop)


class Kwok(_Controller):
    """kwok managing the nodes annotated KWOK_NODE_ANNOTATION, with kwok's fast Stages and pod-complete for
    pods annotated SUCCEED_AFTER. start() returns once kwok has made a probe node Ready."""

    name = "kwok"

    def __init__(
        self, server: LocalApiServer, bin_dir: str | os.PathLike[str] | None = None, *, keep_dir: bool | None = None
    ) -> None:
        super().__init__(server, bin_dir, keep_dir)

    def stages(self) -> list[dict[str, Any]]:
        stages = {s: yaml.safe_load((self.bin_dir / "kwok-stages" / f"{s}.yaml").read_text()) for s in KWOK_STAGES}
        complete = copy.deepcopy(stages["pod-complete"])
        complete["metadata"]["name"] = "pod-complete-after"
        expressions = [
            e for e in complete["spec"]["selector"]["matchExpressions"] if "ownerReferences" not in e["key"]
        ]  # upstream: pods of a batch Job only
        annotation = f'.metadata.annotations["{SUCCEED_AFTER}"]'
        expressions.append({"key": annotation, "operator": "Exists"})
        complete["spec"]["selector"]["matchExpressions"] = expressions
        complete["spec"]["delay"] = {"durationMilliseconds": 0, "durationFrom": {"expressionFrom": annotation}}
        stages["pod-complete"] = complete
        return list(stages.values())

    def start(self) -> Self:
        workdir = self._workdir()
        config = workdir / "stages.yaml"
        config.write_text(yaml.safe_dump_all(self.stages(), sort_keys=False))
        selector = "=".join(KWOK_NODE_ANNOTATION)
        child = self._spawn(
            [
                f"--config={config}",
                f"--kubeconfig={self.server.kubeconfig_path}",
                f"--manage-nodes-with-annotation-selector={selector}",
                "--node-lease-duration-seconds=0",  # no Lease per node: nothing here reads them
            ],
            # kwok also loads ~/.kwok/kwok.yaml when it exists: a work dir of its own keeps a user's out.
            env={"KWOK_WORKDIR": str(workdir)},
        )
        self._probe(child)
        return self

    def _probe(self, child: _Child) -> None:
        from kubernetes import client

        core: Any = client.CoreV1Api(self.server.api_client())  # raw dicts in and out (Any: its stubs want models)
        name = f"kwok-probe-{os.getpid()}-{time.monotonic_ns()}"
        core.create_node(fake_node(name))

        def ready() -> bool:
            node = json.loads(core.read_node(name, _preload_content=False).data)
            conditions = (node.get("status") or {}).get("conditions") or []
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        try:
            _wait(ready, 60, "kwok to make a node Ready", child)
        finally:
            core.delete_node(name)


class TrainingOperator(_Controller):
    """training-operator with only its PyTorchJob controller, gang scheduling through `gang_scheduler_name`.
    start() returns once its /readyz answers (webhook certificates made, controllers being registered).

    Its webhook server's certificates go to /tmp/k8s-webhook-server/serving-certs (a constant in the
    operator): no webhook configuration is registered with the API server, so nothing calls it; the
    operator's namespace gets the empty Secret its certificate rotator fills in."""

    name = "training-operator"

    def __init__(
        self,
        server: LocalApiServer,
        bin_dir: str | os.PathLike[str] | None = None,
        *,
        gang_scheduler_name: str = "phalanx",
        namespace: str = "kubeflow",
        keep_dir: bool | None = None,
    ) -> None:
        super().__init__(server, bin_dir, keep_dir)
        self.gang_scheduler_name = gang_scheduler_name
        self.namespace = namespace

    def start(self) -> Self:
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        core: Any = client.CoreV1Api(self.server.api_client())
        for create in (
            lambda: core.create_namespace({"metadata": {"name": self.namespace}}),
            lambda: core.create_namespaced_secret(
                self.namespace, {"metadata": {"name": "training-operator-webhook-cert"}}
            ),
        ):
            try:
                create()
            except ApiException as exc:
                if exc.status != 409:  # already there: a second operator on the same server
                    raise
        tmp = self._workdir() / "tmp"
        _webhook_certs(tmp / _WEBHOOK_CERTS)
        health, webhook = free_ports(2)
        child = self._spawn(
            [
                "--enable-scheme=pytorchjob",
                f"--gang-scheduler-name={self.gang_scheduler_name}",
                "--metrics-bind-address=0",  # off
                f"--health-probe-bind-address=127.0.0.1:{health}",
                f"--webhook-server-port={webhook}",
                "--controller-threads=2",
            ],
            # TMPDIR: where its webhook server reads its certificate (os.TempDir()/k8s-webhook-server/...).
            env={"MY_POD_NAMESPACE": self.namespace, "TMPDIR": str(tmp)},
        )
        _wait(lambda: _http_ok(f"http://127.0.0.1:{health}/readyz"), 60, "training-operator ready", child, 0.5)
        return self


_WEBHOOK_CERTS = Path("k8s-webhook-server") / "serving-certs"
_ROTATOR_CERT = Path("/tmp") / _WEBHOOK_CERTS / "tls.crt"


def _webhook_certs(certs: Path) -> None:
    """The operator's readiness waits for two things a pod's Secret volume would provide: its webhook
    server's certificate in its TMPDIR (made here: self-signed, as nothing calls the webhook), and a
    tls.crt in /tmp/k8s-webhook-server/serving-certs, a path its certificate rotator only checks exists
    (a constant in the operator; made once per machine, and left for the next run)."""
    certs.mkdir(parents=True, exist_ok=True)
    cmd = [
        "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=training-operator",
        "-keyout", str(certs / "tls.key"), "-out", str(certs / "tls.crt"),
    ]  # fmt: skip
    try:
        subprocess.run(cmd, check=True, capture_output=True)
    except FileNotFoundError:
        raise RuntimeError("openssl is not on PATH (Debian: apt-get install openssl)") from None
    if not _ROTATOR_CERT.exists():
        _ROTATOR_CERT.parent.mkdir(parents=True, exist_ok=True)
        partial = _ROTATOR_CERT.with_name(f".tls.crt.{os.getpid()}")
        shutil.copyfile(certs / "tls.crt", partial)
        partial.replace(_ROTATOR_CERT)  # atomic: another run may be doing the same


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False
