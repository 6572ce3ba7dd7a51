"""Phalanx under real job controllers on the real kube-apiserver: Kubeflow's training-operator creates
PyTorchJobs' pods and scheduler-plugins PodGroups (minMember and minResources, as it always writes them) and
recreates evicted pods; kwok runs the pods of fake GPU nodes and finishes them (phalanx.testing.job_controllers).
The gangs are 1 master + 3 workers. Pods are polled every 0.1 s and a gang seen with 0 < bound < 4 for
longer than a whole gang's bind calls take (PARTIAL_GRACE) fails the test where it is seen.

Both controllers and the API server are started once for the module; each test has its own Phalanx (its
own schedulerName, which the jobs' pod templates name, so the operator's "phalanx" default is overridden
and a test's scheduler never sees another test's pods) and its own nodes. Each test runs twice: Phalanx as
three services, and wired as phalanx-combined wires them (the scheduler calling its queue's and binder's
handlers directly, the binder's view of pods and nodes following the scheduler's feed).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import Phalanx
from waiting import recording_calls, wait_for

from phalanx.metrics.catalog import registry_for
from phalanx.model.keys import KOORD_MIN_AVAILABLE, KOORD_NAME, KOORD_WAITING_TIME, LABEL_X_K8S_PODGROUP
from phalanx.testing.apiserver import APISERVER_MISSING_REASON, LocalApiServer, apiserver_available
from phalanx.testing.job_controllers import (
    JOB_CONTROLLERS_MISSING_REASON,
    Kwok,
    TrainingOperator,
    install_pytorchjob_crd,
    job_controllers_available,
)
from phalanx.testing.job_objects import GPU, PYTORCHJOB, SUCCEED_AFTER, fake_node, job_conditions, pytorchjob
from phalanx.testing.layouts import COMBINED, SEPARATE
from phalanx.testing.redis_server import RedisServer

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not apiserver_available(), reason=APISERVER_MISSING_REASON),
    pytest.mark.skipif(not job_controllers_available(), reason=JOB_CONTROLLERS_MISSING_REASON),
]

SIZE = 4  # 1 master + 3 workers
BIND = 30.0
POLL = 0.1
PARTIAL_GRACE = 1.5  # seconds a gang may show 0 < bound < 4: a whole gang's binding calls in flight
PODGROUPS = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")


@pytest.fixture(scope="module")
def controllers(apiserver: LocalApiServer) -> Iterator[tuple[Kwok, TrainingOperator]]:
    install_pytorchjob_crd(apiserver)  # the operator checks for its CRDs (and the PodGroup's) as it starts
    with Kwok(apiserver) as kwok, TrainingOperator(apiserver, gang_scheduler_name="phalanx") as operator:
        yield kwok, operator


class Jobs:
    """The test's PyTorchJobs, fake nodes and pods, as raw JSON dicts."""

    def __init__(self, cluster: Any, controllers: tuple[Kwok, TrainingOperator]) -> None:
        self.cluster = cluster
        self.core = cluster.core
        self.custom = cluster.custom
        self.kwok, self.operator = controllers

    def node(self, suffix: str, gpus: int) -> str:
        name = f"{self.cluster.tid}-{suffix}"
        self.core.create_node(fake_node(name, gpus=gpus))
        self.cluster.nodes.append(name)  # deleted after the test
        return name

    def priority_class(self, name: str, value: int) -> str:
        """A PriorityClass, returned once admission knows it: the operator creates the pods, and a pod it
        creates before the Priority admission plugin's informer has the class gets a 403 and a back-off
        (commit 111906e), so a dry-run pod is admitted first."""
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        full = f"{self.cluster.tid}-{name}"
        client.SchedulingV1Api(self.core.api_client).create_priority_class(
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": full}, "value": value}
        )
        probe = {
            "metadata": {"name": "priority-probe"},
            "spec": {"priorityClassName": full, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
        }

        def admitted() -> bool:
            try:
                self.core.create_namespaced_pod("default", probe, dry_run="All", _preload_content=False)
            except ApiException as exc:
                if exc.status == 403 and "no PriorityClass" in str(exc.body):
                    return False
                raise
            return True

        wait_for(admitted, BIND, f"PriorityClass {full} known to admission", interval=0.1)
        return full

    def create(self, ns: str, body: dict[str, Any]) -> str:
        self.custom.create_namespaced_custom_object(*PYTORCHJOB, ns, "pytorchjobs", body)
        return str(body["metadata"]["name"])

    def job(self, ns: str, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(*PYTORCHJOB, ns, "pytorchjobs", name)  # type: ignore[no-any-return]

    def succeeded(self, ns: str, name: str) -> bool:
        return job_conditions(self.job(ns, name)).get("Succeeded") == "True"

    def podgroup(self, ns: str, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(PODGROUPS[0], PODGROUPS[1], ns, PODGROUPS[2], name)  # type: ignore[no-any-return]

    def pods(self, ns: str) -> list[dict[str, Any]]:
        resp = self.core.list_namespaced_pod(ns, _preload_content=False)
        return json.loads(resp.data)["items"]  # type: ignore[no-any-return]

    def gang_pods(self, ns: str, gang: str) -> list[dict[str, Any]]:
        """The pods of a job (the operator's PodGroup label) or of a Koordinator gang (its annotation)."""
        return [p for p in self.pods(ns) if _gang_of(p) == gang]

    def gang(self, ns: str, name: str, *, priority_class: str, succeed_after: list[str | None], gpus: int) -> list[str]:
        """A gang of plain pods (Koordinator annotations, no controller), pod i finishing succeed_after[i]."""
        names = []
        for i, after in enumerate(succeed_after):
            annotations = {KOORD_NAME: name, KOORD_MIN_AVAILABLE: str(len(succeed_after)), KOORD_WAITING_TIME: "60s"}
            if after:
                annotations[SUCCEED_AFTER] = after
            self.cluster.pod(
                ns, f"{name}-{i}", gpus=gpus, annotations=annotations, spec={"priorityClassName": priority_class}
            )
            names.append(f"{name}-{i}")
        return names

    def diagnostics(self) -> str:
        return f"training-operator log:\n{self.operator.tail(5)}\nkwok log:\n{self.kwok.tail(5)}"


def _gang_of(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return str(
        (meta.get("labels") or {}).get(LABEL_X_K8S_PODGROUP) or (meta.get("annotations") or {}).get(KOORD_NAME) or ""
    )


def _bound(pod: dict[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def _deleting(pod: dict[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def _phase(pod: dict[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


@pytest.fixture(params=[SEPARATE, COMBINED])
def phalanx(
    request: pytest.FixtureRequest, apiserver: LocalApiServer, redis_server: RedisServer, cluster: Any, tid: str
) -> Iterator[Phalanx]:
    """conftest's in-process stack, in each layout's wiring."""
    stack = Phalanx(
        apiserver, redis_server.url, f"k8s-{tid}", cluster.scheduler_name, combined=request.param == COMBINED
    ).start()
    yield stack
    stack.stop()


@pytest.fixture
def jobs(cluster: Any, phalanx: Any, controllers: tuple[Kwok, TrainingOperator]) -> Jobs:
    return Jobs(cluster, controllers)


class Poller:
    """Lists the namespace's pods every POLL seconds and fails at the first poll where a watched gang has been
    partly bound (0 < bound < SIZE) for longer than PARTIAL_GRACE. A gang is bound by one pods/binding call
    per pod, so a poll can land in the middle of a whole gang's batch (seen here: 3 of 4 bound at one
    poll, 4 at the next); a gang left partly bound stays so for seconds (until room frees) or for good.
    Counted: the pods of the gang not being deleted (a victim gang going away is the preemptor's doing,
    not a bind) and whose uid is not excluded (an earlier incarnation: the operator recreates evicted pods
    under the same names)."""

    def __init__(self, jobs: Jobs, ns: str, gangs: list[str]) -> None:
        self.jobs = jobs
        self.ns = ns
        self.gangs = gangs
        self.excluded: set[str] = set()
        self.polls = 0
        self.seen: dict[str, set[int]] = {g: set() for g in gangs}  # bound counts seen per gang
        self.partial_since: dict[str, tuple[float, int]] = {}  # gang -> (when, poll) first seen partly bound
        self.last: list[dict[str, Any]] = []

    def exclude(self, pods: list[dict[str, Any]]) -> None:
        self.excluded |= {p["metadata"]["uid"] for p in pods}

    def poll(self) -> list[dict[str, Any]]:
        self.last = self.jobs.pods(self.ns)
        now = time.monotonic()
        self.polls += 1
        for gang in self.gangs:
            pods = self.current(gang)
            bound = sorted(p["metadata"]["name"] for p in pods if _bound(p))
            self.seen[gang].add(len(bound))
            if len(bound) in (0, SIZE):
                self.partial_since.pop(gang, None)
                continue
            since, first = self.partial_since.setdefault(gang, (now, self.polls))
            assert now - since <= PARTIAL_GRACE, (
                f"gang {gang} partly bound for {now - since:.1f}s (polls {first}-{self.polls}): "
                f"{len(bound)} of {SIZE} ({bound}); "
                f"pods: {[(p['metadata']['name'], p['spec'].get('nodeName'), _phase(p)) for p in pods]}"
            )
        return self.last

    def current(self, gang: str) -> list[dict[str, Any]]:
        return [
            p
            for p in self.last
            if _gang_of(p) == gang and not _deleting(p) and p["metadata"]["uid"] not in self.excluded
        ]

    def until(self, check: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {timeout:g}s waiting for {what} (bound counts seen: {self.seen})\n"
                    f"pods: {self.describe()}\n{self.jobs.diagnostics()}"
                )
            time.sleep(POLL)

    def describe(self) -> str:
        """Each pod at the last poll: name, node, phase, and what its PodScheduled condition says."""
        lines = []
        for p in self.last:
            scheduled = [c for c in (p.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"]
            said = f"{scheduled[0]['status']} {scheduled[0].get('message', '')}" if scheduled else ""
            lines.append(f"{p['metadata']['name']} {p['spec'].get('nodeName') or '-'} {_phase(p)} {said}".rstrip())
        return "\n  " + "\n  ".join(lines)

    def whole(self, gang: str) -> bool:
        pods = self.current(gang)
        return len(pods) == SIZE and all(_bound(p) for p in pods)


def _preemption_attempts() -> float:
    """scheduler_preemption_attempts_total in this process (the scheduler runs in it)."""
    return sum(
        s.value
        for metric in registry_for("scheduler").collect()
        for s in metric.samples
        if s.name == "scheduler_preemption_attempts_total"
    )


# --- 1-2: gangs that fit ---------------------------------------------------------------------------------------


def _one_job_bound(cluster: Any, jobs: Jobs, name: str, succeed_after: str) -> tuple[str, str, Poller]:
    """Two nodes of 4 GPUs and a PyTorchJob of 4 one-GPU pods, bound whole: (namespace, job, its poller)."""
    ns = cluster.namespace()
    jobs.node("n0", gpus=4)
    jobs.node("n1", gpus=4)
    job = jobs.create(ns, pytorchjob(name, gpus=1, succeed_after=succeed_after, scheduler_name=cluster.scheduler_name))
    poller = Poller(jobs, ns, [job])
    poller.until(lambda: poller.whole(job), BIND, f"job {job}'s 4 pods bound")
    return ns, job, poller


def test_a_pytorchjob_binds_whole_and_succeeds(cluster, jobs: Jobs) -> None:  # type: ignore[no-untyped-def]
    ns, job, poller = _one_job_bound(cluster, jobs, "train", succeed_after="2s")
    group = jobs.podgroup(ns, job)
    assert group["spec"]["minMember"] == SIZE and group["spec"]["minResources"][GPU] == str(SIZE), group["spec"]
    poller.until(lambda: jobs.succeeded(ns, job), BIND, "the PyTorchJob Succeeded")  # when its master has
    poller.until(lambda: all(_phase(p) == "Succeeded" for p in poller.current(job)), BIND, "the workers Succeeded too")


def test_two_contending_jobs_never_partly_bound_and_both_succeed(cluster, jobs: Jobs) -> None:  # type: ignore[no-untyped-def]
    """GPUs for one job at a time (2 nodes x 4, pods of 2 GPUs); both jobs created together, so the operator
    creates their pods interleaved. One runs whole, then the other."""
    ns = cluster.namespace()
    jobs.node("n0", gpus=4)
    jobs.node("n1", gpus=4)
    names = [
        jobs.create(ns, pytorchjob(name, gpus=2, succeed_after="2s", scheduler_name=cluster.scheduler_name))
        for name in ("job-a", "job-b")
    ]
    poller = Poller(jobs, ns, names)
    poller.until(lambda: all(jobs.succeeded(ns, n) for n in names), 2 * BIND, "both PyTorchJobs Succeeded")
    assert all(poller.seen[n] >= {SIZE} for n in names), poller.seen


# --- 3, 5, 6: preemption ---------------------------------------------------------------------------------------


def _low_job_running(cluster: Any, jobs: Jobs, ns: str, poller: Poller, low_class: str) -> str:
    """A low-priority job of 4 x 2 GPUs on the test's 8 GPUs, bound whole and Running; it runs until evicted."""
    low = jobs.create(
        ns,
        pytorchjob("low", gpus=2, succeed_after=None, scheduler_name=cluster.scheduler_name, priority_class=low_class),
    )
    poller.until(
        lambda: poller.whole(low) and all(_phase(p) == "Running" for p in poller.current(low)),
        BIND,
        "the low-priority job bound whole and Running",
    )
    return low


def test_a_preempted_job_recreated_by_the_operator_binds_whole_again(cluster, jobs: Jobs) -> None:  # type: ignore[no-untyped-def]
    """A high-priority gang evicts the running low-priority job; the operator recreates the low job's pods at
    once, under the same names, while the preemptor holds the GPUs; the preemptor's pods finish one after
    another (2 GPUs freed each time), and the recreated job must wait for all four places, not take them
    one at a time: the gang's earlier "satisfied" must not carry over to its new pods. The preemptor is a
    gang of plain pods, so this test does not depend on a PyTorchJob preempting (the next test)."""
    ns = cluster.namespace()
    jobs.node("n0", gpus=4)
    jobs.node("n1", gpus=4)
    low_class = jobs.priority_class("low", 10)
    high_class = jobs.priority_class("high", 1000)
    poller = Poller(jobs, ns, ["low", "high"])
    low = _low_job_running(cluster, jobs, ns, poller, low_class)
    poller.exclude(poller.current(low))  # from here on, "low" is its recreated pods

    high = jobs.gang(ns, "high", priority_class=high_class, gpus=2, succeed_after=["3s", "5s", "7s", "9s"])
    poller.until(lambda: poller.whole("high"), BIND, "the high-priority gang bound whole (after preempting)")
    poller.until(lambda: len(poller.current(low)) == SIZE, BIND, "the operator recreated the low job's 4 pods")
    poller.until(lambda: poller.whole(low), 2 * BIND, "the recreated low-priority job bound whole")
    assert all(_phase(p) == "Succeeded" for p in poller.last if p["metadata"]["name"] in high)


def test_a_job_with_min_resources_preempts_a_lower_priority_job(cluster, jobs: Jobs) -> None:  # type: ignore[no-untyped-def]
    """Both PodGroups are the operator's, with minResources: the priority-1000 job arrives behind the
    running priority-10 job on GPUs for one, and must preempt it and bind whole."""
    ns = cluster.namespace()
    jobs.node("n0", gpus=4)
    jobs.node("n1", gpus=4)
    low_class = jobs.priority_class("low", 10)
    high_class = jobs.priority_class("high", 1000)
    poller = Poller(jobs, ns, ["low", "high"])
    low = _low_job_running(cluster, jobs, ns, poller, low_class)
    poller.exclude(poller.current(low))
    attempts = _preemption_attempts()
    high = jobs.create(
        ns,
        pytorchjob(
            "high", gpus=2, succeed_after=None, scheduler_name=cluster.scheduler_name, priority_class=high_class
        ),
    )
    try:
        poller.until(lambda: poller.whole(high), BIND, "the priority-1000 job bound whole (after preempting)")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\npreemption attempts meanwhile: {_preemption_attempts() - attempts:g}") from None


def test_an_evicted_gangs_podgroup_does_not_stay_running(cluster, jobs: Jobs) -> None:  # type: ignore[no-untyped-def]
    """The low job's PodGroup shows Running while it runs; a high-priority gang evicts the whole job and
    keeps its GPUs, so the recreated pods wait: the PodGroup must not still say Running with 0 running."""
    ns = cluster.namespace()
    jobs.node("n0", gpus=8)
    low_class = jobs.priority_class("low", 10)
    high_class = jobs.priority_class("high", 1000)
    poller = Poller(jobs, ns, ["low", "high"])
    low = _low_job_running(cluster, jobs, ns, poller, low_class)
    wait_for(
        lambda: (jobs.podgroup(ns, low).get("status") or {}).get("phase") == "Running",
        BIND,
        "the low job's PodGroup Running",
    )
    evicted = {p["metadata"]["uid"] for p in poller.current(low)}
    poller.exclude(poller.current(low))
    jobs.gang(ns, "high", priority_class=high_class, gpus=2, succeed_after=[None] * SIZE)
    poller.until(
        lambda: poller.whole("high") and not evicted & {p["metadata"]["uid"] for p in poller.last},
        BIND,
        "the high-priority gang bound and the low job's pods gone",
    )
    poller.until(lambda: len(poller.current(low)) == SIZE, BIND, "the operator recreated the low job's 4 pods")

    # Running with 0 running is the stale status; Running with the 4 evicted pods counted is a status not
    # updated yet: either way the PodGroup must move off Running (the recreated pods wait behind "high").
    def status() -> dict[str, Any]:
        return jobs.podgroup(ns, low).get("status") or {}

    deadline = time.monotonic() + 10
    while (now := status()).get("phase") == "Running" and time.monotonic() < deadline:
        time.sleep(0.25)
    assert now.get("phase") != "Running", f"the evicted job's PodGroup still says Running 10s on: {now}"


# --- 4: a gang that timed out waiting ----------------------------------------------------------------------------


def test_a_job_that_timed_out_binds_whole_once_room_frees(cluster, jobs: Jobs) -> None:  # type: ignore[no-untyped-def]
    """Free GPUs split 3 + 3 + 2 for pods of 2 GPUs: the 8 GPUs the operator's minResources asks are free,
    but only 3 of the 4 pods fit, so the gang waits and times out after its PodGroup's
    scheduleTimeoutSeconds (15, from runPolicy.schedulingPolicy). (Split 1 + 1 + 2, the gang never waits:
    4 free GPUs fail its minResources before any pod is placed, so no timer starts.) Then the pods that
    held the room go, 6 more GPUs are free, and the job must bind whole: a timeout is a failed attempt,
    not the end of the gang."""
    ns = cluster.namespace()
    blocked = [jobs.node("n0", gpus=6), jobs.node("n1", gpus=6)]
    jobs.node("n2", gpus=2)
    for i, node in enumerate(blocked):  # 3 of each node's 6 GPUs held by pods of no gang, placed by hand
        cluster.pod(ns, f"blocker-{i}", gpus=3, scheduler="default-scheduler", spec={"nodeName": node})
    job = jobs.create(
        ns,
        pytorchjob(
            "train", gpus=2, succeed_after="2s", scheduler_name=cluster.scheduler_name, schedule_timeout_seconds=15
        ),
    )
    poller = Poller(jobs, ns, [job])
    poller.until(lambda: len(poller.current(job)) == SIZE, BIND, "the operator created the job's 4 pods")
    assert jobs.podgroup(ns, job)["spec"].get("scheduleTimeoutSeconds") == 15

    def timed_out() -> bool:
        return any(
            e["reason"] == "GangTimeout"
            for e in json.loads(cluster.core.list_namespaced_event(ns, _preload_content=False).data)["items"]
        )

    poller.until(timed_out, 15 + BIND, "the gang's timeout (a GangTimeout Event)")
    for i in range(len(blocked)):
        cluster.delete_pod(ns, f"blocker-{i}")
    poller.until(lambda: poller.whole(job), BIND, "the job bound whole after its timeout, once room was free")
    poller.until(lambda: jobs.succeeded(ns, job), BIND, "the PyTorchJob Succeeded")


# --- 5: the scheduler restarted under a running job ------------------------------------------------------------


def test_a_scheduler_restarted_under_a_running_pytorchjob_writes_nothing_again_and_the_jobs_go_on(  # type: ignore[no-untyped-def]
    cluster, phalanx, jobs: Jobs
) -> None:
    """The scheduler is restarted while a PyTorchJob's 4 pods run: its rebuild finds the job's PodGroup
    status (written before the restart, under the operator) already in step and does not patch it again;
    a job created after the restart binds whole, and the first job still succeeds."""
    from phalanx.cluster.feed import ClusterFeed

    ns, first, poller = _one_job_bound(cluster, jobs, "first", succeed_after="20s")

    def status() -> dict[str, Any]:
        return jobs.podgroup(ns, first).get("status") or {}

    poller.until(lambda: status().get("phase") == "Running" and status().get("running") == SIZE, BIND, "Running 4")
    before = status()
    phalanx.stop_scheduler()
    with recording_calls(ClusterFeed, "_report_status") as calls:
        phalanx.start_scheduler()  # returns once the rebuild is applied
    rewritten = sorted(r.gang_key for _, gangs in calls for r in gangs)
    assert rewritten == [], f"the rebuild reported {rewritten} again; the status was {before}"
    assert status() == before

    second = jobs.create(ns, pytorchjob("second", gpus=1, succeed_after="2s", scheduler_name=cluster.scheduler_name))
    poller = Poller(jobs, ns, [first, second])
    poller.until(lambda: poller.whole(second), BIND, "the job created after the restart bound whole")
    poller.until(lambda: jobs.succeeded(ns, second), BIND, "the second PyTorchJob Succeeded")
    poller.until(lambda: jobs.succeeded(ns, first), BIND, "the first PyTorchJob Succeeded")


# --- 7: what a gang that binds at once shows -----------------------------------------------------------------------


class PodWatch:
    """Every version of every pod of a namespace from a resourceVersion on (a watch, not polls: a condition
    written and replaced within a poll interval is still seen), with when it was seen."""

    def __init__(self, jobs: Jobs, ns: str) -> None:
        from kubernetes import watch

        self.versions: list[tuple[float, dict[str, Any]]] = []
        self.error: Exception | None = None
        self._stopped = False
        self._watch = watch.Watch()
        rv = json.loads(jobs.core.list_namespaced_pod(ns, _preload_content=False).data)["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._run, args=(jobs, ns, rv), daemon=True)
        self._thread.start()

    def _run(self, jobs: Jobs, ns: str, rv: str) -> None:
        api = jobs.core.api_client
        stream = self._watch.stream(jobs.core.list_namespaced_pod, ns, resource_version=rv, timeout_seconds=60)
        try:
            for event in stream:
                self.versions.append((time.monotonic(), api.sanitize_for_serialization(event["object"])))
        except Exception as exc:  # the API server gone at module teardown, while the stream still waited
            if not self._stopped:
                self.error = exc

    def stop(self) -> None:
        """Stops recording; the thread ends at the stream's next event or server-side timeout."""
        self._stopped = True
        self._watch.stop()
        assert self.error is None, f"the pod watch failed: {self.error!r}"


def test_a_gang_bound_at_once_shows_no_unschedulable_condition_or_waiting_event(cluster, jobs: Jobs) -> None:  # type: ignore[no-untyped-def]
    """GPUs for the whole job: its 4 pods bind together within a second of the first one's creation. Pods
    that were only waiting for siblings the operator was creating that same second get no
    PodScheduled=False condition with reason Unschedulable and no Warning Event saying they wait for the
    rest of the gang: nothing was wrong with them."""
    ns = cluster.namespace()
    jobs.node("n0", gpus=8)
    watcher = PodWatch(jobs, ns)
    try:
        job = jobs.create(ns, pytorchjob("train", gpus=1, succeed_after=None, scheduler_name=cluster.scheduler_name))
        poller = Poller(jobs, ns, [job])
        poller.until(lambda: poller.whole(job), BIND, "the job's 4 pods bound")
        cluster.canary()  # the scheduler has run its rounds past the gang; its reports have been sent
        time.sleep(1)
    finally:
        watcher.stop()
    first_seen: dict[str, float] = {}
    bound_at: dict[str, float] = {}
    unschedulable = []
    for at, pod in list(watcher.versions):
        name = pod["metadata"]["name"]
        first_seen.setdefault(name, at)
        if _bound(pod):
            bound_at.setdefault(name, at)
        for c in (pod.get("status") or {}).get("conditions") or []:
            # Unschedulable is what cluster autoscalers act on, and the operator repeats any PodScheduled=False
            # of a pending pod, whatever its reason, as a Warning on the job: a pod only waiting for its
            # siblings gets none.
            if c["type"] == "PodScheduled" and c["status"] == "False":
                unschedulable.append((name, c.get("reason"), c.get("message")))
    spread = max(bound_at.values()) - min(first_seen.values())
    # On the pods, and on the PyTorchJob ("Error pod ... condition message: ..." from the operator).
    events = [e for name in bound_at for e in cluster.events(ns, name)] + cluster.events(ns, "train", "PyTorchJob")
    warnings = [
        (e["involvedObject"]["kind"], e["involvedObject"]["name"], e["reason"], e["message"])
        for e in events
        if e["type"] == "Warning"
        and ("waiting for the rest of the gang" in e["message"] or "Error pod" in e["message"])
    ]
    assert len(bound_at) == SIZE, bound_at
    assert not unschedulable and not warnings, (
        f"bound within {spread:.2f}s of the first pod's creation, yet PodScheduled=False: {unschedulable}; "
        f"Warning Events: {warnings}"
    )
