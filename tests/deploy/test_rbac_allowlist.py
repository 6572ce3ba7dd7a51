"""The Kubernetes rights of Phalanx, held to an explicit allow-list.

Every right the rendered chart (default values and the other value sets) and deploy/manifests/20-rbac.yaml
grant is expanded into (role, apiGroup, resource, verb) tuples, which must equal ALLOWLIST exactly: a right
added anywhere fails here until it is added below, with the code that needs it.

Where each right comes from:
- scheduler (libs/phalanx/cluster/feed.py, watch.py): list+watch of nodes, pods, configmaps and the PodGroups
  of the three CRD groups and of Kubernetes' Workload API (scheduling.k8s.io: its podgroups, which pods name
  in spec.schedulingGroup; not its workloads, which nothing reads); get as well (a reader's usual set; it
  shows nothing list does not); list+watch of PodDisruptionBudgets (policy), which preemption keeps within.
- binder (libs/phalanx/backends/kubernetes.py and its kube_*.py, podgroup_status.py): create pods/binding
  (bind), create pods/eviction (preemption's victims, through the Eviction API), patch pods/status (PodScheduled=
  False), create events (core v1 only), patch podgroups/status (the CRD groups: scheduling.k8s.io's status
  is kube-scheduler's PodGroupScheduled condition, not written), get/list/watch pods and nodes (reading a pod
  back after a conflict; watching bindings), patch pods (the gang.scheduling.koordinator.sh/timeout
  annotation; rbac.binderPatchPods=false drops it).
- scheduler, leader election (libs/phalanx/cluster/leader.py): its Lease, in its own namespace only (a Role,
  not a ClusterRole): get and update by name (resourceNames: the Lease it is configured with), create
  (which RBAC cannot restrict by name). Its only write.
- queue: nothing (it never calls the API server).
- controller (libs/phalanx/jobs/controller.py), PhalanxJobs only: get/list/watch phalanxjobs and patch
  phalanxjobs/status (phalanx.dev); list/watch pods by the job label, create a job's pods and delete them
  (a lost pod before its replacement, and cleanPodPolicy; always with the uid as a precondition); get and
  create Services (a job's headless Service) and Volcano PodGroups (a job's gang). It never binds; it is the
  one component allowed to delete, and only pods.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_deploy_artifacts import (
    HELM_MISSING,
    MANIFESTS,
    VALUE_SETS,
    check_lease_role,
    component,
    find_helm,
    helm_template,
    load_dir,
    of_kind,
)

PODGROUP_GROUPS = ("scheduling.x-k8s.io", "scheduling.sigs.k8s.io", "scheduling.volcano.sh")
WORKLOAD_API = "scheduling.k8s.io"
READ = ("get", "list", "watch")

CONTROLLER = (
    [("controller", "phalanx.dev", "phalanxjobs", verb) for verb in READ]
    + [("controller", "phalanx.dev", "phalanxjobs/status", "patch")]
    + [("controller", "", "pods", verb) for verb in ("list", "watch", "create", "delete")]
    + [("controller", "", "services", verb) for verb in ("get", "create")]
    + [("controller", "scheduling.volcano.sh", "podgroups", verb) for verb in ("get", "create")]
)
ALLOWLIST: frozenset[tuple[str, str, str, str]] = frozenset(
    [("scheduler", "", resource, verb) for resource in ("nodes", "pods", "configmaps") for verb in READ]
    + [("scheduler", group, "podgroups", verb) for group in (*PODGROUP_GROUPS, WORKLOAD_API) for verb in READ]
    + [("scheduler", "policy", "poddisruptionbudgets", verb) for verb in READ]
    + [("binder", "", "nodes", verb) for verb in READ]
    + [("binder", "", "pods", verb) for verb in (*READ, "patch")]
    + [
        ("binder", "", "pods/binding", "create"),
        ("binder", "", "pods/eviction", "create"),
        ("binder", "", "pods/status", "patch"),
        ("binder", "", "events", "create"),
    ]
    + [("binder", group, "podgroups/status", "patch") for group in PODGROUP_GROUPS]
    + CONTROLLER
)
BINDER_PATCH_PODS = ("binder", "", "pods", "patch")
# Namespaced rights (Roles): (role, apiGroup, resource, verb, resourceName or "" for any).
LEASE = "phalanx-scheduler"
NAMESPACED_ALLOWLIST: frozenset[tuple[str, str, str, str, str]] = frozenset(
    [("scheduler", "coordination.k8s.io", "leases", "create", "")]
    + [("scheduler", "coordination.k8s.io", "leases", verb, LEASE) for verb in ("get", "update")]
)

needs_helm = pytest.mark.skipif(find_helm() is None, reason=HELM_MISSING)


def rights(docs: list[dict[str, Any]]) -> set[tuple[str, str, str, str]]:
    """The (role, apiGroup, resource, verb) tuples of every ClusterRole in `docs`, role = its component label."""
    out: set[tuple[str, str, str, str]] = set()
    for role in of_kind(docs, "ClusterRole"):
        assert "aggregationRule" not in role
        name = component(role)
        for rule in role.get("rules", []):
            # Rights not expressible as tuples are not allowed at all.
            assert set(rule) <= {"apiGroups", "resources", "verbs"}, f"{name}: {rule}"
            out |= {(name, g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    return out


def namespaced_rights(docs: list[dict[str, Any]]) -> set[tuple[str, str, str, str, str]]:
    """The (role, apiGroup, resource, verb, resourceName) tuples of every Role, each bound to its component's
    ServiceAccount in its own namespace, the namespace of that component's Deployment."""
    deployments = {component(d): d for d in of_kind(docs, "Deployment")}
    roles = {(r["metadata"]["namespace"], r["metadata"]["name"]): r for r in of_kind(docs, "Role")}
    bound = set()
    for b in of_kind(docs, "RoleBinding"):
        namespace = b["metadata"]["namespace"]
        assert b["roleRef"]["kind"] == "Role", "namespaced rights come from Roles, never a ClusterRole bound locally"
        role = roles[(namespace, b["roleRef"]["name"])]
        name = component(role)
        [subject] = b["subjects"]
        pod = deployments[name]
        assert pod["metadata"]["namespace"] == namespace
        assert subject == {
            "kind": "ServiceAccount",
            "namespace": namespace,
            "name": pod["spec"]["template"]["spec"]["serviceAccountName"],
        }
        bound.add((namespace, b["roleRef"]["name"]))
    assert bound == set(roles), "every Role is bound, once"
    out: set[tuple[str, str, str, str, str]] = set()
    for role in roles.values():
        name = component(role)
        for rule in role.get("rules", []):
            assert set(rule) <= {"apiGroups", "resources", "verbs", "resourceNames"}, f"{name}: {rule}"
            out |= {
                (name, g, r, v, n)
                for g in rule["apiGroups"]
                for r in rule["resources"]
                for v in rule["verbs"]
                for n in rule.get("resourceNames", [""])
            }
    return out


def bindings(docs: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """role component -> the ServiceAccount (namespace, name) it is bound to."""
    roles = {r["metadata"]["name"]: component(r) for r in of_kind(docs, "ClusterRole")}
    out = {}
    for b in of_kind(docs, "ClusterRoleBinding"):
        assert b["roleRef"]["kind"] == "ClusterRole" and b["roleRef"]["name"] in roles
        [subject] = b["subjects"]
        assert subject["kind"] == "ServiceAccount"
        out[roles[b["roleRef"]["name"]]] = (subject["namespace"], subject["name"])
    return out


def check(
    docs: list[dict[str, Any]],
    allowed: frozenset[tuple[str, str, str, str]] = ALLOWLIST,
    namespaced: frozenset[tuple[str, str, str, str, str]] = NAMESPACED_ALLOWLIST,
) -> None:
    got = rights(docs)
    assert not got - allowed, f"rights beyond the allow-list: {sorted(got - allowed)}"
    assert not allowed - got, f"allow-listed rights missing: {sorted(allowed - got)}"
    got_ns = namespaced_rights(docs)
    assert got_ns == namespaced, (
        f"namespaced rights: beyond {sorted(got_ns - namespaced)}, missing {sorted(namespaced - got_ns)}"
    )
    check_lease_role(docs)  # the Lease named is the one the scheduler uses, in its namespace
    accounts = bindings(docs)
    assert set(accounts) == {"scheduler", "binder", "controller"}, "the queue has no binding"
    pods = {component(d): d["spec"]["template"]["spec"] for d in of_kind(docs, "Deployment")}
    for role, (namespace, account) in accounts.items():
        assert pods[role]["serviceAccountName"] == account
    assert pods["queue"]["serviceAccountName"] not in {a for _, a in accounts.values()}
    assert pods["queue"]["automountServiceAccountToken"] is False


def test_allowlist_itself() -> None:
    # Never any of these, whatever the allow-list grows into.
    for role, group, resource, verb in ALLOWLIST:
        assert "*" not in (group, resource, verb)
        assert verb not in {"escalate", "bind", "impersonate", "deletecollection", "update"}
        assert verb != "delete" or (role, group, resource) == ("controller", "", "pods"), "only job pods are deleted"
        assert resource not in {"secrets", "serviceaccounts/token", "clusterroles", "clusterrolebindings"}
        assert role in ("binder", "controller") or verb in READ, "the binder and the job controller write"
    assert {r for r in ALLOWLIST if r[2] == "pods/binding"} == {("binder", "", "pods/binding", "create")}
    # The scheduler's one write: its own Lease, in its namespace; existing Leases only by name.
    for role, group, resource, verb, name in NAMESPACED_ALLOWLIST:
        assert (role, group, resource) == ("scheduler", "coordination.k8s.io", "leases")
        assert verb in ("get", "update", "create")
        assert name == LEASE or verb == "create", "get and update name the Lease; create cannot"


def test_manifests_rbac_allowlist() -> None:
    check(load_dir(MANIFESTS))


@needs_helm
@pytest.mark.parametrize("values", list(VALUE_SETS))
def test_helm_rbac_allowlist(values: str, tmp_path: Path) -> None:
    check(helm_template(tmp_path, VALUE_SETS[values]))


@needs_helm
def test_helm_binder_without_pod_patch(tmp_path: Path) -> None:
    check(helm_template(tmp_path, {"rbac": {"binderPatchPods": False}}), ALLOWLIST - {BINDER_PATCH_PODS})


@needs_helm
def test_helm_rbac_off(tmp_path: Path) -> None:
    docs = helm_template(tmp_path, {"rbac": {"create": False}})
    assert not rights(docs) and not of_kind(docs, "ClusterRoleBinding")
    assert not of_kind(docs, "Role") and not of_kind(docs, "RoleBinding")


@needs_helm
def test_helm_without_leader_election(tmp_path: Path) -> None:
    check(helm_template(tmp_path, {"scheduler": {"leaderElection": {"enabled": False}}}), namespaced=frozenset())


@needs_helm
def test_helm_lease_name_follows_the_release(tmp_path: Path) -> None:
    """The Role names the Lease the scheduler is told to use, whatever the release or leaseName."""
    docs = helm_template(tmp_path, None, "--set", "fullnameOverride=acme")
    want = frozenset((r, g, res, v, "acme-scheduler" if n else "") for r, g, res, v, n in NAMESPACED_ALLOWLIST)
    check(docs, namespaced=want)
    docs = helm_template(tmp_path, {"scheduler": {"leaderElection": {"leaseName": "sched-lock"}}})
    check(
        docs,
        namespaced=frozenset((r, g, res, v, "sched-lock" if n else "") for r, g, res, v, n in NAMESPACED_ALLOWLIST),
    )
