"""PhalanxJobs (seed 001's Arranger jobs) on the real kube-apiserver: phalanx-controller creates each job's
pods, Phalanx (queue, scheduler, binder, in this process) places them as one gang, and kwok
(phalanx.testing.job_controllers) plays the kubelet of fake GPU nodes: a bound pod becomes Running and
Ready, and one annotated SUCCEED_AFTER turns Succeeded that long after. A crash is a pod's phase set to
Failed through the API, as a kubelet reports a container that exited non-zero.

The controller runs in this process (JobController, as the service's build() makes it), except in the crash
tests, which run `python -m phalanx_controller` and have it SIGKILL itself at a fault point. Pods are polled
every POLL seconds and a job whose live pods are partly bound (fewer than its gang) at any poll while it is
not finished fails the test where it is seen.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from waiting import wait_for

from phalanx import faults
from phalanx.cli.main import main
from phalanx.jobs import api
from phalanx.jobs.controller import BETWEEN_PODS, MID_RESTART, JobController
from phalanx.jobs.objects import ENV_LEADER_ADDRESS, JOB_LABEL, RESTARTS_ANNOTATION
from phalanx.kube.watch import Collection, Watcher
from phalanx.lifecycle import PARENT_PID_ENV
from phalanx.metrics import catalog
from phalanx.testing.apiserver import APISERVER_MISSING_REASON, LocalApiServer, apiserver_available
from phalanx.testing.job_controllers import JOB_CONTROLLERS_MISSING_REASON, Kwok, job_controllers_available
from phalanx.testing.job_objects import GPU, SUCCEED_AFTER, fake_node

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not apiserver_available(), reason=APISERVER_MISSING_REASON),
    pytest.mark.skipif(not job_controllers_available(), reason=JOB_CONTROLLERS_MISSING_REASON),
]

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 40.0
POLL = 0.1
BIND_SPREAD = 1.0
# A pod holding capacity that no job may preempt (jobs get classes 1-10), so it frees it only when it finishes.
UNPREEMPTIBLE = {"priorityClassName": f"phalanx-job-priority-{api.MAX_PRIORITY}"}
JOBS = (api.GROUP, api.VERSION)


@pytest.fixture(scope="module")
def kwok(apiserver: LocalApiServer) -> Iterator[Kwok]:
    """kwok, the PhalanxJob CRD and the job PriorityClasses as deploy/ ships them."""
    from kubernetes import client

    api_client = apiserver.api_client()
    crd = yaml.safe_load((REPO / "deploy" / "crds" / "phalanx.dev_phalanxjobs.yaml").read_text())
    client.ApiextensionsV1Api(api_client).create_custom_resource_definition(crd)
    scheduling = client.SchedulingV1Api(api_client)
    for doc in yaml.safe_load_all((REPO / "deploy" / "manifests" / "15-job-priorityclasses.yaml").read_text()):
        scheduling.create_priority_class(doc)
    core: Any = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    wait_for(lambda: _listable(custom), 30, "the PhalanxJob CRD served")
    wait_for(lambda: _admitted(core, f"phalanx-job-priority-{api.MAX_PRIORITY}"), 30, "job PriorityClasses known")
    with Kwok(apiserver) as k:
        yield k


def _listable(custom: Any) -> bool:
    from kubernetes.client.rest import ApiException

    try:
        custom.list_cluster_custom_object(*JOBS, api.PLURAL, _preload_content=False)
        return True
    except ApiException:
        return False


def _admitted(core: Any, priority_class: str) -> bool:
    """The Priority admission plugin knows the class (its informer lags the create: commit 111906e)."""
    from kubernetes.client.rest import ApiException

    probe = {
        "metadata": {"name": "priority-probe"},
        "spec": {"priorityClassName": priority_class, "containers": [{"name": "c", "image": "pause"}]},
    }
    try:
        core.create_namespaced_pod("default", probe, dry_run="All", _preload_content=False)
    except ApiException as exc:
        if exc.status == 403 and "no PriorityClass" in str(exc.body):
            return False
        raise
    return True


def container(gpus: int = 1) -> dict[str, Any]:
    requests = {"cpu": "100m", "memory": "64Mi", GPU: str(gpus)}
    resources = {"requests": requests, "limits": {GPU: str(gpus)}}
    return {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": resources}


def template(gpus: int = 1, succeed_after: str | None = None) -> dict[str, Any]:
    annotations = {SUCCEED_AFTER: succeed_after} if succeed_after else {}
    return {"metadata": {"annotations": annotations}, "spec": {"containers": [container(gpus)]}}


def job_body(
    name: str,
    sets: dict[str, int],
    *,
    gpus: int = 1,
    leader_after: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A PhalanxJob as a user writes one: the leader succeeds `leader_after` after it runs (None: never);
    workers run until deleted."""
    body = {
        "leader": {"name": "learner", "template": template(gpus, leader_after)},
        "workerSets": [{"name": s, "counts": n, "template": template(gpus)} for s, n in sets.items()],
        **spec,
    }
    return {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": name}, "spec": body}


class Jobs:
    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.core = cluster.core
        self.custom = cluster.custom
        self.stops: list[tuple[threading.Event, Watcher]] = []

    def node(self, suffix: str, gpus: int) -> str:
        name = f"{self.cluster.tid}-{suffix}"
        self.core.create_node(fake_node(name, gpus=gpus))
        self.cluster.nodes.append(name)
        return name

    def create(self, ns: str, body: dict[str, Any]) -> str:
        self.custom.create_namespaced_custom_object(*JOBS, ns, api.PLURAL, body)
        return str(body["metadata"]["name"])

    def get(self, ns: str, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(*JOBS, ns, api.PLURAL, name)  # type: ignore[no-any-return]

    def status(self, ns: str, name: str) -> dict[str, Any]:
        return self.get(ns, name).get("status") or {}

    def stage(self, ns: str, name: str) -> str:
        return str(self.status(ns, name).get("stage") or "")

    def pods(self, ns: str, job: str | None = None) -> list[dict[str, Any]]:
        selector = f"{JOB_LABEL}={job}" if job else JOB_LABEL
        resp = self.core.list_namespaced_pod(ns, label_selector=selector, _preload_content=False)
        return json.loads(resp.data)["items"]  # type: ignore[no-any-return]

    def added_order(self, ns: str) -> list[str]:
        """The names of the pods created in `ns` from now on, in the order the API server created them."""
        added: list[str] = []
        stop = threading.Event()

        def sink(_: str, kind: str, obj: dict[str, Any]) -> None:
            if kind == "ADDED":
                added.append(obj["metadata"]["name"])

        watcher = Watcher(Collection("pods", self.core.list_namespaced_pod, "Pod", "v1", args=(ns,)), sink, stop)
        watcher.start()
        assert watcher.synced.wait(10)
        self.stops.append((stop, watcher))
        return added

    def close(self) -> None:
        for stop, watcher in self.stops:
            stop.set()
            watcher.interrupt()

    def fail(self, ns: str, pod: str) -> None:
        """The pod's container exited non-zero, as its kubelet would report it."""
        self.core.patch_namespaced_pod_status(
            pod, ns, {"status": {"phase": "Failed"}}, _content_type="application/merge-patch+json"
        )

    def condition(self, ns: str, name: str, kind: str) -> dict[str, Any]:
        return next((c for c in self.status(ns, name).get("conditions") or [] if c["type"] == kind), {})


def _live(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pods that hold or wait for a place: not being deleted, not finished."""
    return [
        p
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]


def _bound(pods: list[dict[str, Any]]) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods if p["spec"].get("nodeName"))


def _phases(pods: list[dict[str, Any]]) -> dict[str, str]:
    return {p["metadata"]["name"]: (p.get("status") or {}).get("phase", "") for p in pods}


class Watch:
    """Polls the jobs' pods and stages; fails at the first poll where a job that is not finished (nor
    recreating a lost pod) has fewer of its pods bound than its gang, but more than none."""

    def __init__(self, jobs: Jobs, ns: str, gangs: dict[str, int]) -> None:
        self.jobs, self.ns, self.gangs = jobs, ns, gangs
        self.stages: dict[str, list[str]] = {j: [] for j in gangs}
        self.partial: dict[str, float] = {}  # job -> when it was first seen partly bound
        self.polls = 0

    def poll(self) -> None:
        self.polls += 1
        for job, gang in self.gangs.items():
            pods = [p for p in self.jobs.pods(self.ns, job) if not p["metadata"].get("deletionTimestamp")]
            stage = self.jobs.stage(self.ns, job)  # read after the pods: a pod that finished meanwhile shows
            if not self.stages[job] or self.stages[job][-1] != stage:
                self.stages[job].append(stage)
            if stage in ("Succeeded", "Failed", "Rescheduling"):
                continue
            bound = _bound(pods)  # a pod that has finished was bound with its gang
            if not 0 < len(bound) < gang:
                self.partial.pop(job, None)
                continue
            # A gang's bindings are separate API calls, written within milliseconds: a poll may fall between
            # them. Partly bound for longer than BIND_SPREAD is a gang bound in part.
            since = self.partial.setdefault(job, time.monotonic())
            assert time.monotonic() - since < BIND_SPREAD, (
                f"job {job} partly bound for {BIND_SPREAD:g}s, at poll {self.polls}: {bound} (gang {gang})"
            )

    def until(self, check: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:g}s waiting for {what}; stages seen {self.stages}")
            time.sleep(POLL)


@pytest.fixture(scope="module")
def spans() -> InMemorySpanExporter:
    """The spans of this process (the in-process controller's among them)."""
    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


@pytest.fixture
def jobs(
    cluster: Any, phalanx: Any, kwok: Kwok, apiserver: LocalApiServer, spans: InMemorySpanExporter
) -> Iterator[Jobs]:
    controller = JobController(apiserver.api_client(), scheduler_name=cluster.scheduler_name, resync=5).start()
    assert controller.wait_synced(20)
    jobs = Jobs(cluster)
    yield jobs
    jobs.close()
    controller.close()


# --- the CRD ------------------------------------------------------------------------------------------------


def test_the_crd_fills_the_seeds_defaults_and_refuses_out_of_range_fields(cluster: Any, kwok: Kwok) -> None:
    from kubernetes.client.rest import ApiException

    ns = cluster.namespace()
    jobs = Jobs(cluster)
    body = job_body("rl", {"actor": 1})
    del body["spec"]["workerSets"][0]["counts"]
    jobs.create(ns, body)
    spec = jobs.get(ns, "rl")["spec"]
    assert (spec["restartLimit"], spec["minWorkersNum"], spec["priority"]) == (3, 1, 5)
    assert (spec["cleanPodPolicy"], spec["terminating"], spec["workerSets"][0]["counts"]) == ("All", False, 1)
    for field, value in (("priority", 11), ("priority", 0), ("cleanPodPolicy", "Some"), ("restartLimit", -1)):
        with pytest.raises(ApiException) as refused:
            jobs.create(ns, job_body(f"bad-{field.lower()}", {"actor": 1}, **{field: value}))
        assert refused.value.status == 422 and f"spec.{field}" in str(refused.value.body), refused.value.body
    with pytest.raises(ApiException) as refused:
        jobs.create(ns, job_body("bad-policy", {"actor": 1}, schedulerPolicy={"basicPolicy": "Binpak"}))
    assert "spec.schedulerPolicy.basicPolicy" in str(refused.value.body)


def test_a_missing_priority_class_is_said_on_the_job_and_nothing_is_created(
    cluster: Any, phalanx: Any, kwok: Kwok, apiserver: LocalApiServer
) -> None:
    """Admission refuses a pod naming a PriorityClass that does not exist: the job says so (PodCreateFailed,
    naming the class) and stays Pending with no pod, and is retried."""
    controller = JobController(
        apiserver.api_client(), scheduler_name=cluster.scheduler_name, priority_class_prefix="no-such-class-"
    ).start()
    try:
        ns = cluster.namespace()
        jobs = Jobs(cluster)
        jobs.create(ns, job_body("rl", {"actor": 1}, priority=4))
        refused = wait_for(
            lambda: (
                jobs.condition(ns, "rl", "PodCreateFailed").get("status") == "True"
                and jobs.condition(ns, "rl", "PodCreateFailed")
            ),
            TIMEOUT,
            "the refusal on the job",
        )
        assert "PriorityClass no-such-class-4" in refused["message"], refused
        assert jobs.stage(ns, "rl") == "Pending" and not jobs.pods(ns, "rl")
    finally:
        controller.close()


# --- a job's life ----------------------------------------------------------------------------------------


def test_a_job_of_a_leader_and_two_worker_sets_runs_whole_and_succeeds(
    cluster: Any, jobs: Jobs, spans: InMemorySpanExporter
) -> None:
    ns = cluster.namespace()
    jobs.node("n0", gpus=4)
    jobs.node("n1", gpus=4)
    added = jobs.added_order(ns)
    name = jobs.create(ns, job_body("rl", {"actor": 2, "eval": 1}, minWorkersNum=3, leader_after="4s"))
    watch = Watch(jobs, ns, {name: 4})
    watch.until(lambda: jobs.stage(ns, name) == "Running", TIMEOUT, "the job Running")
    assert added == ["rl-learner", "rl-actor-0", "rl-actor-1", "rl-eval-0"]  # the leader first
    pods = {p["metadata"]["name"]: p for p in jobs.pods(ns, name)}
    assert sorted(pods) == ["rl-actor-0", "rl-actor-1", "rl-eval-0", "rl-learner"]
    assert all(p["spec"]["nodeName"] and p["status"]["phase"] == "Running" for p in pods.values())
    # Every pod knows the leader's address, which the headless Service resolves.
    env = {e["name"]: e["value"] for e in pods["rl-eval-0"]["spec"]["containers"][0]["env"]}
    assert env[ENV_LEADER_ADDRESS] == f"rl-learner.rl.{ns}.svc"
    service = json.loads(jobs.core.read_namespaced_service("rl", ns, _preload_content=False).data)
    assert service["spec"]["clusterIP"] == "None" and pods["rl-learner"]["spec"]["subdomain"] == "rl"
    group = cluster.custom.get_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", ns, "podgroups", "rl")
    assert group["spec"] == {"minMember": 4, "minTaskMember": {"leader": 1, "worker": 3}}
    status = jobs.status(ns, name)
    assert (
        status["scheduleState"] == "ScheduledSucceed"
        and status["leader"]["node"] == pods["rl-learner"]["spec"]["nodeName"]
    )

    watch.until(lambda: jobs.stage(ns, name) == "Succeeded", TIMEOUT, "the job Succeeded")
    watch.until(lambda: not jobs.pods(ns, name), TIMEOUT, "its pods cleaned (cleanPodPolicy All)")
    assert watch.stages[name][-1] == "Succeeded" and "Running" in watch.stages[name], watch.stages
    status = jobs.status(ns, name)
    assert status["startTime"] <= status["completionTime"] and status["restarts"] == 0
    # Each reconcile is a span naming the job and the stage it left it in.
    traced = {
        s.attributes.get("phalanx.job.stage")
        for s in spans.get_finished_spans()
        if s.name == "controller.reconcile" and s.attributes and s.attributes.get("phalanx.job") == f"{ns}/{name}"
    }
    assert {"Running", "Succeeded"} <= traced, traced


def test_two_jobs_on_capacity_for_one_run_one_after_the_other(cluster: Any, jobs: Jobs) -> None:
    ns = cluster.namespace()
    jobs.node("n0", gpus=4)
    names = [jobs.create(ns, job_body(n, {"actor": 3}, minWorkersNum=3, leader_after="3s")) for n in ("job-a", "job-b")]
    watch = Watch(jobs, ns, {n: 4 for n in names})
    watch.until(lambda: all(jobs.stage(ns, n) == "Succeeded" for n in names), 3 * TIMEOUT, "both jobs Succeeded")
    first, second = sorted(names, key=lambda n: jobs.status(ns, n)["startTime"])
    assert jobs.status(ns, second)["startTime"] >= jobs.status(ns, first)["completionTime"]
    assert all("Running" in watch.stages[n] for n in names), watch.stages


def test_a_worker_killed_while_running_is_recreated_and_counted(cluster: Any, jobs: Jobs) -> None:
    ns = cluster.namespace()
    jobs.node("n0", gpus=4)
    name = jobs.create(ns, job_body("rl", {"actor": 2}, minWorkersNum=2, restartLimit=2))
    watch = Watch(jobs, ns, {name: 3})
    watch.until(lambda: jobs.stage(ns, name) == "Running", TIMEOUT, "the job Running")
    old = {p["metadata"]["name"]: p["metadata"]["uid"] for p in jobs.pods(ns, name)}
    counted = catalog.CONTROLLER_RESTARTS._value.get()  # the controller runs in this process
    jobs.fail(ns, "rl-actor-1")

    def recreated_running() -> bool:
        pods = {p["metadata"]["name"]: p for p in jobs.pods(ns, name)}
        new = pods.get("rl-actor-1")
        return bool(new and new["metadata"]["uid"] != old["rl-actor-1"] and jobs.stage(ns, name) == "Running")

    watch.until(recreated_running, TIMEOUT, "rl-actor-1 recreated and the job Running again")
    pods = {p["metadata"]["name"]: p for p in jobs.pods(ns, name)}
    assert sorted(pods) == sorted(old)  # no pod more, none less
    assert all(pods[n]["metadata"]["uid"] == old[n] for n in ("rl-learner", "rl-actor-0"))  # the others untouched
    assert pods["rl-actor-1"]["metadata"]["annotations"][RESTARTS_ANNOTATION] == "1"
    status = jobs.status(ns, name)
    assert status["restarts"] == 1 and status["workers"][1]["restarts"] == 1
    assert catalog.CONTROLLER_RESTARTS._value.get() - counted == 1  # phalanx_controller_restarts_total
    rescheduling = jobs.condition(ns, name, "Rescheduling")
    # The job went through Rescheduling (its condition exists only once entered; a poll may miss the stage)
    # and left it for Running.
    assert (rescheduling["status"], rescheduling["reason"]) == ("False", "Ready"), rescheduling
    assert jobs.condition(ns, name, "Running")["status"] == "True"


def test_a_leader_failing_more_than_the_restart_limit_fails_the_job_and_cleans_its_pods(
    cluster: Any, jobs: Jobs
) -> None:
    ns = cluster.namespace()
    jobs.node("n0", gpus=4)
    name = jobs.create(ns, job_body("rl", {"actor": 2}, minWorkersNum=2, restartLimit=1))
    watch = Watch(jobs, ns, {name: 3})
    for attempt in (1, 2):
        watch.until(lambda: jobs.stage(ns, name) == "Running", TIMEOUT, f"the job Running (attempt {attempt})")
        jobs.fail(ns, "rl-learner")
        if attempt == 1:
            watch.until(lambda: jobs.status(ns, name).get("restarts") == 1, TIMEOUT, "the restart counted")
    watch.until(lambda: jobs.stage(ns, name) == "Failed", TIMEOUT, "the job Failed")
    watch.until(lambda: not jobs.pods(ns, name), TIMEOUT, "its pods cleaned (cleanPodPolicy All)")
    status = jobs.status(ns, name)
    assert status["leader"]["restarts"] == 2 and status["completionTime"]
    failed = jobs.condition(ns, name, "Failed")
    assert failed["reason"] == "RestartLimitExceeded" and "restartLimit 1" in failed["message"], failed


def test_min_workers_below_the_count_starts_at_the_minimum_and_adds_the_rest(cluster: Any, jobs: Jobs) -> None:
    """5 GPUs, 2 held by a pod that finishes after 6 s; the job asks 1 + 4 of 1 GPU with a minimum of 2
    workers: it runs on 3 and takes the last 2 places when the pod ends."""
    ns = cluster.namespace()
    jobs.node("n0", gpus=5)
    cluster.pod(ns, "blocker", gpus=2, annotations={SUCCEED_AFTER: "6s"}, spec=UNPREEMPTIBLE)
    wait_for(lambda: cluster.node_of(ns, "blocker"), TIMEOUT, "the blocker bound")
    name = jobs.create(ns, job_body("rl", {"actor": 4}, minWorkersNum=2))
    watch = Watch(jobs, ns, {name: 3})
    watch.until(lambda: jobs.stage(ns, name) == "Running", TIMEOUT, "the job Running at its minimum")
    status = jobs.status(ns, name)
    assert status["scheduleState"] == "ScheduledPartly", status
    assert len(_bound(jobs.pods(ns, name))) == 3 and cluster.read_pod(ns, "blocker")["status"]["phase"] == "Running"
    watch.until(lambda: len(_bound(jobs.pods(ns, name))) == 5, TIMEOUT, "the other 2 workers bound once freed")
    watch.until(lambda: jobs.status(ns, name)["scheduleState"] == "ScheduledSucceed", TIMEOUT, "ScheduledSucceed")
    assert jobs.stage(ns, name) == "Running"


# --- each policy field reaches the scheduler -------------------------------------------------------------


def test_priority_orders_waiting_jobs(cluster: Any, phalanx: Any, jobs: Jobs) -> None:
    """Capacity for one of two jobs that reach the queue together; the later one has the higher priority
    and goes first."""
    ns = cluster.namespace()
    jobs.node("n0", gpus=4)
    with together(phalanx):
        low = jobs.create(ns, job_body("low", {"actor": 3}, minWorkersNum=3, priority=2))
        wait_for(lambda: len(jobs.pods(ns, low)) == 4, TIMEOUT, "the low job's pods created")
        high = jobs.create(ns, job_body("high", {"actor": 3}, minWorkersNum=3, priority=9))
        wait_for(lambda: len(jobs.pods(ns, high)) == 4, TIMEOUT, "the high job's pods created")
    watch = Watch(jobs, ns, {low: 4, high: 4})
    watch.until(lambda: jobs.stage(ns, high) == "Running", TIMEOUT, "the priority-9 job Running")
    assert watch.stages[low] == ["Pending"] and not _bound(jobs.pods(ns, low))
    assert {p["spec"].get("priority") for p in jobs.pods(ns, high)} == {9}  # admission filled it from the class


@pytest.mark.parametrize(("policy", "nodes_used"), [("JobAffinity", 1), ("JobAntiAffinity", 3)])
def test_basic_policy_places_the_job(cluster: Any, jobs: Jobs, policy: str, nodes_used: int) -> None:
    ns = cluster.namespace()
    for i in range(3):
        jobs.node(f"n{i}", gpus=4)
    name = jobs.create(ns, job_body("rl", {"actor": 2}, minWorkersNum=2, schedulerPolicy={"basicPolicy": policy}))
    wait_for(lambda: len(_bound(jobs.pods(ns, name))) == 3, TIMEOUT, "the job bound")
    nodes = {p["spec"]["nodeName"] for p in jobs.pods(ns, name)}
    assert len(nodes) == nodes_used, nodes


@pytest.mark.parametrize(("policy", "first"), [("DRF", "b"), ("Priority", "a")])
def test_job_queue_policy_orders_waiting_jobs(cluster: Any, phalanx: Any, jobs: Jobs, policy: str, first: str) -> None:
    """Tenant a (its namespace) holds 2 of 4 GPUs with a running job; a's second job and then b's, 2 GPUs
    each, reach the queue together. Under DRF b, holding nothing, goes first; under Priority the older, a's."""
    ns_a, ns_b = cluster.namespace("a"), cluster.namespace("b")
    jobs.node("n0", gpus=4)
    held = jobs.create(ns_a, job_body("held", {"actor": 1}))
    wait_for(lambda: jobs.stage(ns_a, held) == "Running", TIMEOUT, "tenant a's first job Running")
    spec = {"schedulerPolicy": {"jobQueuePolicy": policy}}
    with together(phalanx):
        for ns in (ns_a, ns_b):
            jobs.create(ns, job_body("wait", {"actor": 1}, **spec))
            wait_for(lambda: len(jobs.pods(ns, "wait")) == 2, TIMEOUT, "a waiting job's pods created")
    namespaces = {"a": ns_a, "b": ns_b}
    winner = wait_for(
        lambda: next((t for t, ns in namespaces.items() if jobs.stage(ns, "wait") == "Running"), None),
        TIMEOUT,
        "one waiting job Running",
    )
    assert winner == first
    other = namespaces["a" if first == "b" else "b"]
    assert not _bound(jobs.pods(other, "wait"))


@contextmanager
def together(phalanx: Any) -> Iterator[None]:
    """The jobs created in the block reach the scheduler at once: it is stopped meanwhile, the queue emptied,
    and the restarted scheduler's feed adds every pending pod before its first pop. Otherwise the order two
    jobs are tried in also depends on their backoffs after earlier attempts."""
    phalanx.stop_scheduler()
    yield
    phalanx.restart_queue()
    phalanx.start_scheduler()


# --- phalanx explain ------------------------------------------------------------------------------------------


def test_explain_shows_a_waiting_jobs_stage_and_why(
    cluster: Any, jobs: Jobs, apiserver: LocalApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """A job of 1 + 2 pods of 2 GPUs on a node of 4 waits Pending; explain says so next to its gang's shortfall,
    and names a job the controller refused."""
    ns = cluster.namespace()
    jobs.node("n0", gpus=4)
    name = jobs.create(ns, job_body("rl", {"actor": 2}, gpus=2, minWorkersNum=2))
    bad = job_body("bad", {"learner": 1})  # a worker set named as the leader
    jobs.create(ns, bad)
    wait_for(lambda: len(jobs.pods(ns, name)) == 3, TIMEOUT, "the job's pods created")
    wait_for(lambda: cluster.judged(ns, [f"{name}-learner", f"{name}-actor-0"]), TIMEOUT, "the pods judged")
    wait_for(lambda: jobs.condition(ns, "bad", "Valid").get("status") == "False", TIMEOUT, "the bad job refused")
    args = ["explain", "--kubeconfig", str(apiserver.kubeconfig_path), "--scheduler-name", cluster.scheduler_name]
    args += ["-n", ns, "-o", "json"]
    with pytest.raises(SystemExit) as exit_:
        main(args)
    out, err = capsys.readouterr()
    assert exit_.value.code == 0, err
    doc = json.loads(out)
    [gang] = [g for g in doc["gangs"] if g["name"] == name]
    assert gang["job"] == {"stage": "Pending", "scheduleState": "Unscheduled", "restarts": 0, "message": ""}
    assert gang["minMember"] == 3 and gang["capacity"]["short"], gang
    assert any("PhalanxJob " + f"{ns}/bad is not run: spec.workerSets[0].name" in n for n in doc["notes"]), doc["notes"]
    with pytest.raises(SystemExit):
        main(args[:-2])
    text = capsys.readouterr().out
    assert "job         PhalanxJob Pending (Unscheduled, 0 restarts)" in text, text


# --- the controller SIGKILLed --------------------------------------------------------------------------------


class ControllerProcess:
    """`python -m phalanx_controller` against the test API server."""

    def __init__(self, server: LocalApiServer, scheduler_name: str, tmp: Path) -> None:
        self.server, self.scheduler_name, self.tmp = server, scheduler_name, tmp
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0

    def start(self, fault: str = "") -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
        env |= {PARENT_PID_ENV: str(os.getpid()), "OTEL_SDK_DISABLED": "true"}
        if fault:
            env[faults.FAULT_ENV] = fault
        self.runs += 1
        self.log = self.tmp / f"controller-{self.runs}.log"
        argv = [
            sys.executable, "-m", "phalanx_controller", "--kubeconfig", str(self.server.kubeconfig_path),
            "--scheduler-name", self.scheduler_name, "--metrics-listen", "off", "--resync", "2",
        ]  # fmt: skip
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)

    def exited_at_fault(self, timeout: float) -> None:
        assert self.proc is not None
        code = self.proc.wait(timeout)
        assert code == faults.EXIT_CODE, f"exit {code}:\n{self.log.read_text()[-3000:]}"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture
def controller_process(
    cluster: Any, phalanx: Any, kwok: Kwok, apiserver: LocalApiServer, tmp_path: Path
) -> Iterator[ControllerProcess]:
    proc = ControllerProcess(apiserver, cluster.scheduler_name, tmp_path)
    yield proc
    proc.stop()


def test_killed_while_creating_a_jobs_pods(cluster: Any, controller_process: ControllerProcess) -> None:
    """Killed after its 2nd pod (the leader and one worker): the next controller creates the other two, and
    neither touches the first two."""
    jobs = Jobs(cluster)
    ns = cluster.namespace()
    jobs.node("n0", gpus=4)
    controller_process.start(fault=f"{BETWEEN_PODS}:2")
    name = jobs.create(ns, job_body("rl", {"actor": 3}, minWorkersNum=3))
    controller_process.exited_at_fault(TIMEOUT)
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in jobs.pods(ns, name)}
    assert sorted(before) == ["rl-actor-0", "rl-learner"]
    assert not _bound(jobs.pods(ns, name))  # half a gang waits: nothing bound
    controller_process.start()
    watch = Watch(jobs, ns, {name: 4})
    watch.until(lambda: jobs.stage(ns, name) == "Running", TIMEOUT, "the job Running after the restart")
    after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in jobs.pods(ns, name)}
    assert sorted(after) == ["rl-actor-0", "rl-actor-1", "rl-actor-2", "rl-learner"]
    assert {n: after[n] for n in before} == before  # the same pods, not recreated
    assert jobs.status(ns, name)["restarts"] == 0


def test_killed_in_the_middle_of_a_restart(cluster: Any, controller_process: ControllerProcess) -> None:
    """Killed after counting a failed worker's restart and deleting it, before creating its replacement: the
    next controller creates it, and counts the restart once."""
    jobs = Jobs(cluster)
    ns = cluster.namespace()
    jobs.node("n0", gpus=4)
    controller_process.start(fault=f"{MID_RESTART}:1")
    name = jobs.create(ns, job_body("rl", {"actor": 2}, minWorkersNum=2, restartLimit=3))
    watch = Watch(jobs, ns, {name: 3})
    watch.until(lambda: jobs.stage(ns, name) == "Running", TIMEOUT, "the job Running")
    old = {p["metadata"]["name"]: p["metadata"]["uid"] for p in jobs.pods(ns, name)}
    jobs.fail(ns, "rl-actor-0")
    controller_process.exited_at_fault(TIMEOUT)
    assert sorted(p["metadata"]["name"] for p in jobs.pods(ns, name)) == ["rl-actor-1", "rl-learner"]
    status = jobs.status(ns, name)
    assert (status["stage"], status["restarts"]) == ("Rescheduling", 1), status
    controller_process.start()
    watch.until(lambda: jobs.stage(ns, name) == "Running", TIMEOUT, "the job Running again")
    after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in jobs.pods(ns, name)}
    assert sorted(after) == sorted(old) and after["rl-actor-0"] != old["rl-actor-0"]
    assert {n: after[n] for n in ("rl-learner", "rl-actor-1")} == {n: old[n] for n in ("rl-learner", "rl-actor-1")}
    status = jobs.status(ns, name)
    assert status["restarts"] == 1 and status["workers"][0]["restarts"] == 1, status
