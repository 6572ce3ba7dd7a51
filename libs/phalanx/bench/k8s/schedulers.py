"""bench-k8s's schedulers under test: Phalanx as deployed, and kube-scheduler with Coscheduling (the peer).

Phalanx: phalanx.testing.stack.ChaosStack (Redis with a password and the queue, binder and scheduler as
separate processes with mutual TLS and the Kubernetes backend). The peer: kube-scheduler with
scheduler-plugins' Coscheduling, built by hack/build-peer-scheduler.sh for the versions in
hack/peer-scheduler/go.mod.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from phalanx.bench.k8s.workloads import PEER, PHALANX, REPO, SCHEDULER_NAMES
from phalanx.testing.children import stop_child
from phalanx.testing.layouts import SEPARATE

PEER_MODDIR = REPO / "hack" / "peer-scheduler"
PEER_PERMIT_WAIT_SECONDS = 10  # scheduler-plugins' example configuration (manifests/coscheduling)


class SchedulerUnderTest:
    name = ""

    def launch(self) -> None:
        raise NotImplementedError

    def pids(self) -> dict[str, int]:
        raise NotImplementedError

    def alive(self) -> bool:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def log_hint(self) -> str:
        return ""


class PhalanxUnderTest(SchedulerUnderTest):
    """Phalanx as deployed: ChaosStack (Redis with a password + three service processes, mutual TLS; or the
    combined layout's one process for the three)."""

    name = PHALANX

    def __init__(self, kubeconfig: str, run_dir: Path, layout: str = SEPARATE) -> None:
        from phalanx.testing.stack import ChaosStack, StackConfig

        self.run_dir = run_dir
        self.stack = ChaosStack.create(
            StackConfig(kubeconfig, SCHEDULER_NAMES[PHALANX], "bench-k8s", run_dir, log_level="WARNING", layout=layout)
        )

    def launch(self) -> None:
        self.stack.start(timeout=120)

    def pids(self) -> dict[str, int]:
        return self.stack.pids()

    def alive(self) -> bool:
        return all(self.stack.alive(n) for n in self.stack.names())

    def stop(self) -> None:
        self.stack.stop()

    def log_hint(self) -> str:
        return f"logs in {self.run_dir}"


def peer_config(kubeconfig: str) -> dict[str, Any]:
    """kube-scheduler configuration: one profile with Coscheduling at queueSort (replacing PrioritySort),
    preFilter, postFilter, permit and reserve, as scheduler-plugins documents it; client QPS/burst lifted
    as scheduler_perf does; no leader election."""
    plugin = [{"name": "Coscheduling"}]
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "clientConnection": {"kubeconfig": kubeconfig, "qps": 5000, "burst": 5000},
        "profiles": [
            {
                "schedulerName": SCHEDULER_NAMES[PEER],
                "plugins": {
                    "queueSort": {"enabled": plugin, "disabled": [{"name": "*"}]},
                    "preFilter": {"enabled": plugin},
                    "postFilter": {"enabled": plugin},
                    "permit": {"enabled": plugin},
                    "reserve": {"enabled": plugin},
                },
                "pluginConfig": [
                    {"name": "Coscheduling", "args": {"permitWaitingTimeSeconds": PEER_PERMIT_WAIT_SECONDS}}
                ],
            }
        ],
    }


class PeerUnderTest(SchedulerUnderTest):
    name = PEER

    def __init__(self, binary: Path, kubeconfig: str, run_dir: Path) -> None:
        from phalanx.testing.children import exit_with_parent_argv
        from phalanx.testing.ports import free_port

        run_dir.mkdir(parents=True, exist_ok=True)
        self.run_dir = run_dir
        config = run_dir / "peer-scheduler.yaml"
        config.write_text(json.dumps(peer_config(kubeconfig), indent=2))  # JSON is YAML
        self.log_path = run_dir / "peer-scheduler.log"
        self.argv = exit_with_parent_argv(
            [str(binary), f"--config={config}", "--bind-address=127.0.0.1", f"--secure-port={free_port()}"]
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def launch(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)

    def pids(self) -> dict[str, int]:
        return {"kube-scheduler": self.proc.pid} if self.proc is not None and self.proc.poll() is None else {}

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is None:
            return
        stop_child(self.proc, grace=10)
        self.proc = None

    def log_hint(self) -> str:
        return f"log: {self.log_path}"


def _gomod_version(gomod: str, module: str) -> str:
    """A module's version in go.mod: its replace directive's, else its require line's."""
    m = re.search(rf"^\s*{re.escape(module)}\s+=>\s+{re.escape(module)}\s+(v\S+)", gomod, re.MULTILINE) or re.search(
        rf"^\s*{re.escape(module)}\s+(v\d\S*)", gomod, re.MULTILINE
    )
    return m.group(1) if m else ""


def peer_binary_path() -> Path | None:
    """The peer scheduler: $PHALANX_PEER_SCHEDULER, else where hack/build-peer-scheduler.sh puts it for the
    versions in hack/peer-scheduler/go.mod. None if it is not there."""
    explicit = os.environ.get("PHALANX_PEER_SCHEDULER")
    if explicit:
        return Path(explicit) if os.access(explicit, os.X_OK) else None
    try:
        gomod = (PEER_MODDIR / "go.mod").read_text()
    except OSError:
        gomod = ""
    root = Path(os.environ.get("PHALANX_PEER_CACHE") or Path.home() / ".cache" / "phalanx" / "peer-scheduler")
    k8s, sp = _gomod_version(gomod, "k8s.io/kubernetes"), _gomod_version(gomod, "sigs.k8s.io/scheduler-plugins")
    if k8s and sp:
        path = root / f"{k8s}-sp{sp}" / "peer-scheduler"
        return path if os.access(path, os.X_OK) else None
    found = sorted(root.glob("*/peer-scheduler"))
    return found[-1] if found else None


def peer_versions() -> dict[str, str]:
    try:
        gomod = (PEER_MODDIR / "go.mod").read_text()
    except OSError:
        return {}
    out = {}
    for module, key in (
        ("k8s.io/kubernetes", "kube_scheduler"),
        ("sigs.k8s.io/scheduler-plugins", "scheduler_plugins"),
    ):
        if version := _gomod_version(gomod, module):
            out[key] = version
    return out
