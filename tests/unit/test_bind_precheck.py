"""The binder's cluster-side checks: how the batch binder treats the backend's refusals (against a real
redis-server), the verdict on each assignment, the report allow-lists, and the watch-fed view's cache."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from builders import model_node, model_pod

from phalanx.backends.base import BindFailure
from phalanx.backends.cluster_view import OWNER_WAIT_S, ClusterView
from phalanx.backends.kube_guard import NodeFacts, PodFacts, report_annotations, unreserved, verdict
from phalanx.backends.simulated import SimulatedBackend
from phalanx.binding.batch_binder import BOUND, FAILED, GONE, PENDING, ROLLED_BACK, BatchBinder
from phalanx.binding.lock import FencedLock
from phalanx.kube.errors import ApiError
from phalanx.model.binding import Assignment
from phalanx.model.keys import GROUP_VOLCANO, GROUP_X_K8S, KOORD_TIMEOUT, LABEL_X_K8S_PODGROUP, VOLCANO_GROUP_NAME
from phalanx.state.keys import Keys
from phalanx.state.pod_state import PodState
from phalanx.state.store import StateStore
from phalanx.state.txn import Txn

GANG = "default/train"
NAMES = ["w0", "w1", "w2", "w3"]


class RefusingBackend(SimulatedBackend):
    """The simulated cluster whose precheck refuses the pods it is told to; records what reached bind()."""

    def __init__(
        self, client: redis.Redis, keys: Keys, refusals: dict[str, BindFailure], transactional: bool = False
    ) -> None:
        super().__init__(client, keys)
        self.refusals = refusals
        self.transactional = transactional  # False: writes outside Redis, like the Kubernetes backend
        self.written: list[str] = []

    def precheck(self, assignments: list[Assignment]) -> dict[str, BindFailure]:
        return {a.pod_key: self.refusals[a.pod_key] for a in assignments if a.pod_key in self.refusals}

    def bind(self, assignments: list[Assignment], now: float, commit: Txn) -> dict[str, BindFailure]:
        self.written += [a.pod_key for a in assignments]
        return super().bind(assignments, now, commit)


@pytest.fixture
def nodes(store: StateStore) -> StateStore:
    store.put_nodes([model_node("n1", cpu=8)])
    return store


def reserve(store: StateStore, names: list[str], gang: str = GANG) -> list[Assignment]:
    pods = [model_pod(n, gang.removeprefix("default/"), cpu=0.5) for n in names]
    store.must_apply(Txn(reserve=[store.reserve_entry(p, "n1") for p in pods]))
    return [Assignment(pod_key=p.key, uid=p.uid, node="n1", gang=gang) for p in pods]


def run(
    store: StateStore, backend: RefusingBackend, assignments: list[Assignment], all_or_nothing: bool
) -> dict[str, tuple[int, str]]:
    results, _ = BatchBinder(store, backend, FencedLock(store.redis, store.keys)).bind(assignments, all_or_nothing, 1.0)
    return {r.pod_key.split("/")[1]: (r.status, r.message) for r in results}


def states(store: StateStore) -> dict[str, str]:
    return {k.split("/")[1]: r.state for k, r in store.load_pods().items()}


REFUSED = BindFailure('pod default/w1 names scheduler "default-scheduler", not "phalanx": not Phalanx\'s to bind')


@pytest.mark.parametrize("transactional", [False, True], ids=["locked-commit", "one-script"])
def test_one_refusal_fails_an_all_or_nothing_gang_before_anything_is_bound(
    nodes: StateStore, transactional: bool
) -> None:
    backend = RefusingBackend(nodes.redis, nodes.keys, {"default/w1": REFUSED}, transactional)
    results = run(nodes, backend, reserve(nodes, NAMES), True)
    assert results["w1"] == (FAILED, REFUSED.message)
    assert {n: s for n, (s, _) in results.items() if n != "w1"} == dict.fromkeys(["w0", "w2", "w3"], ROLLED_BACK)
    assert backend.written == []  # nothing reached the cluster
    assert states(nodes) == {}  # every reservation given back, no intent left behind
    assert not nodes.load_used().get(("n1", "cpu"))


def test_a_refused_ordinary_pod_fails_alone(nodes: StateStore) -> None:
    backend = RefusingBackend(nodes.redis, nodes.keys, {"default/w1": REFUSED})
    results = run(nodes, backend, reserve(nodes, NAMES, gang=""), False)
    assert results["w1"] == (FAILED, REFUSED.message)
    assert {n: s for n, (s, _) in results.items() if n != "w1"} == dict.fromkeys(["w0", "w2", "w3"], BOUND)
    assert "default/w1" not in backend.written
    assert states(nodes) == dict.fromkeys(["w0", "w2", "w3"], "bound")


def test_a_pod_that_no_longer_exists_does_not_hold_its_gang_back(nodes: StateStore) -> None:
    gone = BindFailure("pod default/w2 does not exist", gone=True)
    backend = RefusingBackend(nodes.redis, nodes.keys, {"default/w2": gone})
    results = run(nodes, backend, reserve(nodes, NAMES), True)
    assert results["w2"] == (GONE, gone.message)
    assert {n: s for n, (s, _) in results.items() if n != "w2"} == dict.fromkeys(["w0", "w1", "w3"], BOUND)
    assert states(nodes) == dict.fromkeys(["w0", "w1", "w3"], "bound")


def test_a_pod_that_could_not_be_checked_leaves_its_gang_reserved_and_unbound(nodes: StateStore) -> None:
    unchecked = BindFailure("could not check pod default/w3: timed out", retryable=True)
    backend = RefusingBackend(nodes.redis, nodes.keys, {"default/w3": unchecked})
    results = run(nodes, backend, reserve(nodes, NAMES), True)
    assert {s for s, _ in results.values()} == {PENDING}  # sent again later by the scheduler
    assert results["w3"][1] == unchecked.message
    assert backend.written == [] and states(nodes) == dict.fromkeys(NAMES, "assumed")
    # Checked on the next attempt: the gang binds whole.
    backend.refusals.clear()
    assert {s for s, _ in run(nodes, backend, reserve_again(nodes), True).values()} == {BOUND}


def reserve_again(store: StateStore) -> list[Assignment]:
    return [Assignment(pod_key=f"default/{n}", uid=n, node="n1", gang=GANG) for n in NAMES]


def test_a_started_binding_refused_on_roll_forward_is_released_alone(nodes: StateStore) -> None:
    """A binder crashed after recording the intent; meanwhile w1's node was deleted: the roll-forward binds the
    others and gives w1 back, as it would after an API server refusal."""
    reserve(nodes, NAMES)
    keys = [f"default/{n}" for n in NAMES]
    nodes.must_apply(Txn(expect=[[k, "assumed", "n1"] for k in keys], set_state=[[k, PodState.BINDING] for k in keys]))
    failure = BindFailure("node n1 does not exist (pod default/w1 not bound)")
    backend = RefusingBackend(nodes.redis, nodes.keys, {"default/w1": failure})
    results = BatchBinder(nodes, backend, FencedLock(nodes.redis, nodes.keys)).finish_interrupted(1.0)
    assert {r.pod_key.split("/")[1]: r.status for r in results} == {"w0": BOUND, "w1": FAILED, "w2": BOUND, "w3": BOUND}
    assert "default/w1" not in backend.written
    assert states(nodes) == dict.fromkeys(["w0", "w2", "w3"], "bound")


# -- the verdict on one assignment -------------------------------------------------------------------------


def facts(**kw: Any) -> PodFacts:
    return PodFacts(**{"uid": "u1", "scheduler": "phalanx", "node": "", "deleting": False, "podgroups": (), **kw})


ASSIGN = Assignment(pod_key="ns/p", uid="u1", node="n1")
NODE = NodeFacts(deleting=False)


@pytest.mark.parametrize(
    "pod, node, expected",
    [
        (facts(), NODE, None),
        (facts(node="n1"), None, None),  # bound where asked already: the backend confirms it
        (None, NODE, BindFailure("pod ns/p does not exist", gone=True)),
        (facts(uid="u2"), NODE, BindFailure("pod ns/p no longer exists (recreated: uid u2, not u1)", gone=True)),
        (
            facts(scheduler="default-scheduler"),
            NODE,
            BindFailure('pod ns/p names scheduler "default-scheduler", not "phalanx": not Phalanx\'s to bind'),
        ),
        (facts(deleting=True), NODE, BindFailure("pod ns/p is being deleted", gone=True)),
        (facts(node="n2"), NODE, BindFailure("pod ns/p is already bound to n2")),
        (facts(), None, BindFailure("node n1 does not exist (pod ns/p not bound)")),
        (facts(), NodeFacts(deleting=True), BindFailure("node n1 is being deleted (pod ns/p not bound)")),
        (
            ApiError(status=503, reason="unavailable"),
            NODE,
            BindFailure("could not check pod ns/p: ApiError: (503)\nReason: unavailable\n", retryable=True),
        ),
        (
            facts(),
            ApiError(status=403, reason="Forbidden"),
            BindFailure("could not check node n1 (for pod ns/p): ApiError: (403)\nReason: Forbidden\n"),
        ),
    ],
)
def test_verdict(pod: Any, node: Any, expected: BindFailure | None) -> None:
    assert verdict(ASSIGN, pod, node, "phalanx") == expected


def test_report_annotations_keep_only_the_timeout_flag(caplog: pytest.LogCaptureFixture) -> None:
    assert report_annotations("ns/p", {KOORD_TIMEOUT: "true", "owner": "mallory"}) == {KOORD_TIMEOUT: "true"}
    assert report_annotations("ns/p", {KOORD_TIMEOUT: "false"}) == {}
    assert "ns/p" in caplog.text and "owner" in caplog.text


# -- the view's cache ----------------------------------------------------------------------------------------


class Resp:
    def __init__(self, body: dict[str, Any]) -> None:
        self.data = json.dumps(body).encode()


class FakeCore:
    """The reads the view makes on a cache miss, counted."""

    pipeline = None  # writes one by one (the pipeline has its own tests)

    def __init__(self, pods: dict[str, dict[str, Any]], nodes: set[str]) -> None:
        self.pods, self.nodes = pods, nodes
        self.gets: list[str] = []

    def read_namespaced_pod(self, name: str, namespace: str, **kw: Any) -> Resp:
        self.gets.append(f"pod {namespace}/{name}")
        if f"{namespace}/{name}" not in self.pods:
            raise ApiError(status=404, reason="Not Found")
        return Resp(self.pods[f"{namespace}/{name}"])

    def read_node(self, name: str, **kw: Any) -> Resp:
        self.gets.append(f"node {name}")
        if name not in self.nodes:
            raise ApiError(status=404, reason="Not Found")
        return Resp({"metadata": {"name": name}})

    def list_namespaced_pod(self, namespace: str, field_selector: str = "", **kw: Any) -> Resp:
        self.gets.append(f"list {namespace} {field_selector}")
        return Resp(
            {
                "items": [
                    p
                    for k, p in self.pods.items()
                    if k.startswith(f"{namespace}/")
                    and field_selector == f"spec.schedulerName={p['spec']['schedulerName']}"
                ]
            }
        )


def pod_obj(
    key: str,
    uid: str,
    scheduler: str = "phalanx",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    namespace, name = key.split("/")
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": {"schedulerName": scheduler},
    }


def test_the_view_answers_from_its_cache_and_asks_on_a_miss() -> None:
    core = FakeCore({"ns/late": pod_obj("ns/late", "u9"), "ns/theirs": pod_obj("ns/theirs", "u8", "other")}, {"n1"})
    view = ClusterView(core, "phalanx")
    view._sink("binder-nodes", "ADDED", {"metadata": {"name": "n1"}})
    view._sink("binder-pods", "ADDED", pod_obj("ns/a", "u1"))
    assign = [Assignment(pod_key="ns/a", uid="u1", node="n1")]
    assert view.check(assign) == {} and core.gets == []  # the hot path: no API call
    ghost = [Assignment(pod_key="ns/a", uid="u1", node="ghost")]
    assert view.check(ghost)["ns/a"].message == "node ghost does not exist (pod ns/a not bound)"
    late = [Assignment(pod_key="ns/late", uid="u9", node="n1"), Assignment(pod_key="ns/theirs", uid="u8", node="n1")]
    failures = view.check(late)
    assert set(failures) == {"ns/theirs"} and "not Phalanx's to bind" in failures["ns/theirs"].message
    assert core.gets == ["node ghost", "pod ns/late", "pod ns/theirs"]
    # A stale entry (the pod was recreated) is looked up again, not refused as gone on the cache's word.
    core.pods["ns/a"] = pod_obj("ns/a", "u2")
    assert view.check([Assignment(pod_key="ns/a", uid="u2", node="n1")]) == {}
    view._sink("binder-pods", "DELETED", {"metadata": {"name": "a", "namespace": "ns"}})
    assert not view.cached("ns/a")


def test_a_podgroup_is_ours_while_one_of_our_pods_names_it() -> None:
    core = FakeCore({}, set())
    view = ClusterView(core, "phalanx")
    view._sink("binder-pods", "ADDED", pod_obj("ns/a", "u1", labels={LABEL_X_K8S_PODGROUP: "train"}))
    view._sink("binder-pods", "ADDED", pod_obj("ns/b", "u2", labels={LABEL_X_K8S_PODGROUP: "train"}))
    view._sink("binder-pods", "ADDED", pod_obj("ns/v", "u3", annotations={VOLCANO_GROUP_NAME: "vc"}))
    assert view.owns_podgroup(GROUP_X_K8S, "ns", "train") and view.owns_podgroup(GROUP_VOLCANO, "ns", "vc")
    assert core.gets == []
    # A re-list's DELETED is a stub without labels: what the pod named comes from the cache.
    view._sink("binder-pods", "DELETED", {"metadata": {"name": "a", "namespace": "ns"}})
    assert view.owns_podgroup(GROUP_X_K8S, "ns", "train")
    view._sink("binder-pods", "DELETED", {"metadata": {"name": "b", "namespace": "ns"}})
    assert not view.owns_podgroup(GROUP_X_K8S, "ns", "train")  # asked the API server: none of our pods
    assert not view.owns_podgroup(GROUP_X_K8S, "other", "vc")
    assert core.gets == ["list ns spec.schedulerName=phalanx", "list other spec.schedulerName=phalanx"]


def test_a_synced_view_waits_for_its_watch_before_listing_a_namespace_for_a_podgroup() -> None:
    """The scheduler reports a gang once its own watch has the pods; the binder's view may see them a moment
    later. A synced view waits for its watch (no list of the namespace's pods); a PodGroup that no pod of
    ours names is still listed for, once the wait is over."""
    core = FakeCore({}, set())
    view = ClusterView(core, "phalanx")
    synced = threading.Event()
    synced.set()
    view._watchers = [SimpleNamespace(synced=synced)]  # type: ignore[list-item]  # both first lists are in
    late = pod_obj("ns/a", "u1", labels={LABEL_X_K8S_PODGROUP: "train"})
    timer = threading.Timer(0.1, view._sink, args=("binder-pods", "ADDED", late))
    timer.start()
    started = time.monotonic()
    assert view.owns_podgroup(GROUP_X_K8S, "ns", "train")
    assert 0.05 < time.monotonic() - started < OWNER_WAIT_S and core.gets == []
    started = time.monotonic()
    assert not view.owns_podgroup(GROUP_X_K8S, "ns", "nobodys")
    assert time.monotonic() - started >= OWNER_WAIT_S and core.gets == ["list ns spec.schedulerName=phalanx"]


def test_a_binding_without_a_uid_is_made_for_the_incarnation_checked_as_ours() -> None:
    """An assignment without a uid gets the uid of the pod as checked, as the binding's precondition: a
    binding never lands on a pod (or a recreation of it) that was not checked as ours."""
    from phalanx.backends.kubernetes import KubernetesBackend

    class Core(FakeCore):
        def __init__(self, pods: dict[str, dict[str, Any]]) -> None:
            super().__init__(pods, {"n1"})
            self.bindings: list[dict[str, Any]] = []

        def create_namespaced_pod_binding(self, name: str, namespace: str, body: dict[str, Any], **kw: Any) -> Resp:
            self.bindings.append(body)
            return Resp({"status": "Success"})

        def create_namespaced_event(self, namespace: str, body: dict[str, Any], **kw: Any) -> Resp:
            return Resp(body)

    core = Core({"ns/mine": pod_obj("ns/mine", "u1"), "ns/theirs": pod_obj("ns/theirs", "u2", "other")})
    backend = KubernetesBackend(None, component="phalanx")
    backend.core = backend.bind_api = core  # type: ignore[assignment]
    backend.view.core = core
    try:
        failures = backend.bind(
            [Assignment(pod_key="ns/mine", uid="", node="n1"), Assignment(pod_key="ns/theirs", uid="", node="n1")],
            0.0,
            Txn(),
        )
    finally:
        backend.close()
    assert set(failures) == {"ns/theirs"} and "not Phalanx's to bind" in failures["ns/theirs"].message
    assert [b["metadata"] for b in core.bindings] == [{"name": "mine", "namespace": "ns", "uid": "u1"}]


# -- a reservation smaller than the pod's spec (issue 23: a forged copy placed) is never bound -------------


class SpecBackend(RefusingBackend):
    """A cluster whose pods' specs ask `specs` (by pod key); the reservation is compared with them as the
    Kubernetes backend compares it with its watch cache."""

    def __init__(self, client: redis.Redis, keys: Keys, specs: dict[str, dict[str, int]]) -> None:
        super().__init__(client, keys, {})
        self.specs = specs

    def unreserved(self, a: Assignment, held: Mapping[str, int]) -> BindFailure | None:
        spec = self.specs.get(a.pod_key)
        why = unreserved(a.pod_key, spec, held) if spec is not None else ""
        return BindFailure(why) if why else None


GPU = "nvidia.com/gpu"


def test_a_gang_pod_reserved_for_less_than_its_spec_asks_binds_nothing_of_its_gang(nodes: StateStore) -> None:
    # w1's spec asks a GPU; the scheduler reserved it as the forged copy said: half a core, no GPU.
    backend = SpecBackend(nodes.redis, nodes.keys, {"default/w1": {"cpu": 500, "pods": 1000, GPU: 1000}})
    results = run(nodes, backend, reserve(nodes, NAMES), False)  # even past the gang's first bind
    assert results["w1"][0] == FAILED
    assert "asks for more than the scheduler reserved: nvidia.com/gpu 1000 (reserved 0)" in results["w1"][1]
    assert {n: s for n, (s, _) in results.items() if n != "w1"} == dict.fromkeys(["w0", "w2", "w3"], ROLLED_BACK)
    assert backend.written == [] and states(nodes) == {}
    assert not nodes.load_used().get(("n1", "cpu"))


def test_an_ordinary_pod_reserved_for_less_than_its_spec_fails_alone(nodes: StateStore) -> None:
    backend = SpecBackend(nodes.redis, nodes.keys, {"default/w2": {"cpu": 4000}})
    results = run(nodes, backend, reserve(nodes, NAMES, gang=""), False)
    assert results["w2"][0] == FAILED and "cpu 4000 (reserved 500)" in results["w2"][1]
    assert {n: s for n, (s, _) in results.items() if n != "w2"} == dict.fromkeys(["w0", "w1", "w3"], BOUND)
    assert "default/w2" not in backend.written


def test_a_reservation_covering_the_spec_binds(nodes: StateStore) -> None:
    backend = SpecBackend(nodes.redis, nodes.keys, {f"default/{n}": {"cpu": 500, "pods": 1000} for n in NAMES})
    assert {s for s, _ in run(nodes, backend, reserve(nodes, NAMES), True).values()} == {BOUND}


def test_unreserved_allows_what_placement_adds_and_names_what_is_short() -> None:
    spec = {"cpu": 1000, GPU: 2000}
    # The devices chosen for the pod are added to its own requests: never a shortfall.
    assert unreserved("ns/p", spec, {"cpu": 1000, GPU: 2000, "nvidia.com/gpu-0": 1000}) == ""
    assert unreserved("ns/p", spec, {"cpu": 1000}) == (
        "pod ns/p asks for more than the scheduler reserved: nvidia.com/gpu 2000 (reserved 0); not bound"
    )
    assert "cannot be read" in unreserved("ns/p", "Pod ns/p: spec.containers: not a list", {})


def test_pod_facts_read_the_spec_requests_as_the_scheduler_does() -> None:
    obj = pod_obj("ns/w", "u1")
    obj["spec"]["containers"] = [{"name": "c", "resources": {"limits": {GPU: "2"}, "requests": {"cpu": "1"}}}]
    assert PodFacts.of(obj).requests == {"cpu": 1000, GPU: 2000, "pods": 1000}
    obj["spec"]["containers"] = "nope"
    bad = PodFacts.of(obj).requests
    assert isinstance(bad, str) and "Pod ns/w: spec.containers" in bad
