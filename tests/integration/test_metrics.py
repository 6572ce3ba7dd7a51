"""/metrics of the three services as real processes: a simulated workload runs through them, then each
endpoint is scraped over HTTP and its numbers are compared with what the simulation reports happened.

The workload: one node of 5 CPUs; gang `fits` (3 pods of 1 CPU) binds; a pod without a gang binds; a pod
asking 100 CPUs never fits; gang `too-big` (3 pods of 1 CPU, 20 s wait) arrives when one CPU is left,
cannot reach its minimum and times out.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from importlib.metadata import version

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from phalanx.model.keys import KOORD_TIMEOUT
from phalanx.rpc.clients import QueueClient
from phalanx.security.tls import PLAINTEXT
from phalanx.sim.driver import SimOptions
from phalanx.sim.run import Endpoints, simulate
from phalanx.sim.services import Stack
from phalanx.sim.workload import load_workload

pytestmark = pytest.mark.integration

GANG_LABEL = "pod-group.scheduling.bdap.com/podgroup-configmap"


def _gang(name: str, created: str, min_available: int, timeout: int) -> str:
    return (
        f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: jobs, creationTimestamp: "
        f"'{created}'}}\ndata: {{minAvailable: '{min_available}', scheduleTimeoutSeconds: '{timeout}'}}\n"
    )


def _pod(name: str, created: str, cpu: int, gang: str = "") -> str:
    labels = f"\n  labels: {{{GANG_LABEL}: {gang}}}" if gang else ""
    return (
        f"apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: jobs\n  creationTimestamp: "
        f"'{created}'{labels}\nspec:\n  schedulerName: phalanx\n  containers:\n  - name: c\n    image: x\n"
        f"    resources:\n      requests: {{cpu: '{cpu}'}}\n"
    )


WORKLOAD = "---\n".join(
    [
        "apiVersion: v1\nkind: Node\nmetadata: {name: node-1}\nstatus:\n  allocatable: {cpu: '5', memory: 16Gi, "
        "pods: '110'}\n",
        _gang("fits", "2026-01-01T00:00:00Z", 3, 60),
        _gang("too-big", "2026-01-01T00:00:05Z", 3, 20),
        *(_pod(f"fits-{i}", "2026-01-01T00:00:01Z", 1, "fits") for i in range(3)),
        _pod("solo", "2026-01-01T00:00:02Z", 1),
        _pod("huge", "2026-01-01T00:00:03Z", 100),
        *(_pod(f"too-big-{i}", "2026-01-01T00:00:06Z", 1, "too-big") for i in range(3)),
    ]
)


class Scrape:
    """One /metrics page, parsed by prometheus_client's own parser (so the exposition format is checked)."""

    def __init__(self, url: str) -> None:
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain")
            self.text = resp.read().decode()
        self.families = {f.name: f for f in text_string_to_metric_families(self.text)}

    def samples(self, name: str) -> list[Sample]:
        return [s for f in self.families.values() for s in f.samples if s.name == name]

    def value(self, name: str, **labels: str) -> float:
        found = [s.value for s in self.samples(name) if all(s.labels.get(k) == v for k, v in labels.items())]
        assert len(found) == 1, f"{name}{labels}: {len(found)} samples in\n{self.text}"
        return found[0]

    def total(self, name: str) -> float:
        return sum(s.value for s in self.samples(name))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, dict]]:  # type: ignore[type-arg]
    logs = tmp_path_factory.mktemp("metrics")
    path = logs / "workload.yaml"
    path.write_text(WORKLOAD)
    stack = Stack.launch(metrics=True, log_dir=logs)
    try:
        endpoints = Endpoints(stack.redis_url, stack.queue.address, stack.scheduler.address, stack.prefix)
        report = simulate(load_workload([path]), SimOptions(), endpoints)
        yield stack, report
    finally:
        stack.stop()


def test_the_scenario_did_what_it_describes(run: tuple[Stack, dict]) -> None:  # type: ignore[type-arg]
    summary = run[1]["summary"]
    assert (summary["gangsBound"], summary["gangsTimedOut"], summary["podsBound"], summary["errors"]) == (1, 1, 4, [])


def test_scheduler_metrics_match_the_run(run: tuple[Stack, dict]) -> None:  # type: ignore[type-arg]
    stack, report = run
    summary = report["summary"]
    m = Scrape(stack.scheduler.metrics_url)
    attempts = {
        r: m.value("scheduler_schedule_attempts_total", result=r, profile="phalanx")
        for r in ("scheduled", "unschedulable", "error")
    }
    assert sum(attempts.values()) == summary["schedulingAttempts"]  # every popped pod, retries included
    assert attempts["scheduled"] == summary["podsBound"]  # nothing placed was given back in this run
    assert attempts["error"] == 0
    assert attempts["unschedulable"] >= summary["podsTotal"] - summary["podsBound"]  # each tried at least once
    for result, n in attempts.items():  # one latency observation per attempt
        assert m.value("scheduler_scheduling_attempt_duration_seconds_count", result=result, profile="phalanx") == n
        assert (
            m.value("scheduler_scheduling_attempt_duration_seconds_bucket", result=result, profile="phalanx", le="+Inf")
            == n
        )
    assert m.value("scheduler_pod_scheduling_sli_duration_seconds_count") == summary["podsBound"]
    assert m.value("phalanx_gang_wait_duration_seconds_count") == summary["gangsBound"]
    # `fits` was created at 0 s and bound when its pods arrived at 1 s (virtual seconds, exactly).
    assert m.value("phalanx_gang_wait_duration_seconds_sum") == 1.0
    assert m.value("phalanx_gangs", phase="bound") == summary["gangsBound"]
    assert m.value("phalanx_gangs", phase="timed_out") == summary["gangsTimedOut"]
    assert m.total("phalanx_gangs") == summary["gangsTotal"]
    # too-big, a ConfigMap gang, backs off and is tried again: it timed out twice before the run ended
    assert m.value("phalanx_gang_timeouts_total") == 2 * summary["gangsTimedOut"]
    assert m.value("phalanx_gangs_partially_bound") == summary["partialGangs"] == 0
    for reason in ("capacity", "pod_state", "node_gone", "locked", "stale_fence"):
        assert m.value("phalanx_redis_txn_conflicts_total", reason=reason) >= 0


def test_binder_metrics_match_the_run(run: tuple[Stack, dict]) -> None:  # type: ignore[type-arg]
    stack, report = run
    m = Scrape(stack.binder.metrics_url)
    assert m.value("phalanx_bind_results_total", result="bound") == report["summary"]["podsBound"]
    for result in ("failed", "rolled_back", "gone", "pending"):
        assert m.value("phalanx_bind_results_total", result=result) == 0
    batches = m.value("phalanx_bind_duration_seconds_count")
    assert 1 <= batches <= report["summary"]["podsBound"]
    assert m.value("phalanx_bind_duration_seconds_bucket", le="+Inf") == batches
    assert "scheduler_schedule_attempts_total" not in m.text  # each service exports its own metrics only


def test_queue_pending_pods_match_the_queue(run: tuple[Stack, dict]) -> None:  # type: ignore[type-arg]
    stack, report = run
    # A gang timed out for good (Koordinator's forms) leaves the queue; a retrying one (too-big, a ConfigMap
    # gang) stays there through its backoff, as does every other unbound pod.
    waiting = [p for p in report["pods"] if p["boundAt"] is None and KOORD_TIMEOUT not in p["annotations"]]
    m = Scrape(stack.queue.metrics_url)
    pending = {q: m.value("scheduler_pending_pods", queue=q) for q in ("active", "backoff", "unschedulable")}
    assert sum(pending.values()) == len(waiting) == 1 + 3
    client = QueueClient(stack.queue.address, PLAINTEXT)
    try:
        stats = client.stats(report["summary"]["virtualSeconds"])
    finally:
        client.close()
    assert pending == {"active": stats.active, "backoff": stats.backoff, "unschedulable": stats.unschedulable}
    assert m.value("phalanx_queue_in_flight_pods") == stats.in_flight == 0


@pytest.mark.parametrize("service", ["queue", "scheduler", "binder"])
def test_every_family_has_help_and_the_build_is_named(run: tuple[Stack, dict], service: str) -> None:  # type: ignore[type-arg]
    m = Scrape(getattr(run[0], service).metrics_url)
    assert m.value("phalanx_build_info", component=service, version=version("phalanx")) == 1
    assert m.value("process_resident_memory_bytes") > 0
    for name, family in m.families.items():
        assert family.documentation.strip(), f"{service}: {name} has no HELP text"


def test_metrics_are_read_only(run: tuple[Stack, dict]) -> None:  # type: ignore[type-arg]
    """Only GET (and HEAD) is answered: a write is refused and the numbers do not move."""
    url = run[0].scheduler.metrics_url
    before = Scrape(url).value("scheduler_schedule_attempts_total", result="scheduled", profile="phalanx")
    for method in ("POST", "PUT", "DELETE"):
        request = urllib.request.Request(url, data=b"scheduler_schedule_attempts_total 0\n", method=method)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 405
    assert Scrape(url).value("scheduler_schedule_attempts_total", result="scheduled", profile="phalanx") == before
