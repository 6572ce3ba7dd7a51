"""The metrics themselves: names, labels and buckets where kube-scheduler's are claimed, HELP on every one,
the weighted histogram against prometheus_client's own, and the counters at the points that count them
(a real Redis for the transaction conflicts)."""

from __future__ import annotations

import pytest
from builders import gang_spec
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from phalanx.gang.manager import GangManager
from phalanx.gang.record import GangRecord
from phalanx.metrics.catalog import registry_for
from phalanx.metrics.collectors import GangCollector, QueueCollector, gang_counts
from phalanx.metrics.endpoint import MetricsListenError, parse_listen
from phalanx.metrics.histogram import WeightedHistogram, exponential_buckets
from phalanx.model.objects import GangSpec, NodeInfo, PodInfo
from phalanx.queueing.scheduling_queue import Outcome, SchedulingQueue
from phalanx.scheduling.attempt_metrics import AttemptTally
from phalanx.scheduling.ports import Popped, Verdict
from phalanx.state.store import StateStore
from phalanx.state.txn import Txn


def registries() -> dict[str, CollectorRegistry]:
    """Each service's registry with its scrape-time collectors, as the services' main() make them."""
    gangs = GangManager(600.0)
    return {
        "queue": registry_for("queue", QueueCollector(SchedulingQueue())),
        "scheduler": registry_for("scheduler", GangCollector(lambda: gangs)),
        "binder": registry_for("binder"),
        "controller": registry_for("controller"),
    }


def families(registry: CollectorRegistry) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}


@pytest.mark.parametrize("service", ["queue", "scheduler", "binder", "controller"])
def test_every_metric_has_help(service: str) -> None:
    for metric in registries()[service].collect():
        assert metric.documentation.strip(), f"{service}: {metric.name} has no HELP"


# kube-scheduler's (pkg/scheduler/metrics/metrics.go): name -> (type, labels, buckets).
KUBE_SCHEDULER = {
    "scheduler_pending_pods": ("queue", "gauge", {"queue"}, None),
    "scheduler_schedule_attempts": ("scheduler", "counter", {"result", "profile"}, None),
    "scheduler_scheduling_attempt_duration_seconds": (
        "scheduler",
        "histogram",
        {"result", "profile"},
        [0.001 * 2**i for i in range(15)],
    ),
    # Without kube-scheduler's "attempts" label: the queue, which counts attempts, has forgotten a pod by then.
    "scheduler_pod_scheduling_sli_duration_seconds": (
        "scheduler",
        "histogram",
        set(),
        [0.01 * 2**i for i in range(20)],
    ),
}


@pytest.mark.parametrize("name", KUBE_SCHEDULER)
def test_kube_scheduler_names_labels_and_buckets(name: str) -> None:
    service, kind, labels, buckets = KUBE_SCHEDULER[name]
    registry = registries()[service]
    if name == "scheduler_schedule_attempts" or name.startswith("scheduler_scheduling_attempt"):
        AttemptTally("phalanx")  # the scheduler makes its labelled children when it starts
    family = families(registry)[name]
    assert family.type == kind  # type: ignore[attr-defined]
    samples = family.samples  # type: ignore[attr-defined]
    assert samples, name
    for s in samples:
        assert set(s.labels) - {"le"} == labels
    if buckets is not None:
        bounds = sorted({float(s.labels["le"]) for s in samples if s.name.endswith("_bucket")})
        assert bounds[:-1] == pytest.approx(buckets) and bounds[-1] == float("inf")
    if name == "scheduler_pending_pods":
        assert {s.labels["queue"] for s in samples} == {"active", "backoff", "unschedulable"}
    if name == "scheduler_schedule_attempts":
        assert {s.labels["result"] for s in samples} == {"scheduled", "unschedulable", "error"}


def test_services_export_only_their_own() -> None:
    names = {service: set(families(r)) for service, r in registries().items()}
    assert "scheduler_pending_pods" in names["queue"] and "scheduler_pending_pods" not in names["scheduler"]
    assert "phalanx_bind_results" in names["binder"] and "phalanx_bind_results" not in names["scheduler"]
    assert "phalanx_redis_txn_conflicts" in names["binder"] & names["scheduler"]
    assert not any(n.endswith("_created") for ns in names.values() for n in ns)


def test_the_weighted_histogram_exports_what_prometheus_clients_would() -> None:
    buckets = exponential_buckets(0.001, 2, 15)
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    weighted = WeightedHistogram("h_seconds", "test", (), buckets)
    ours.register(weighted)
    reference = Histogram("h_seconds", "test", buckets=buckets, registry=theirs)
    for value, count in [(0.0005, 3), (0.001, 2), (0.0011, 1), (0.5, 7), (16.384, 1), (99.0, 4)]:
        weighted.observe(value, count)
        for _ in range(count):
            reference.observe(value)

    def samples(r: CollectorRegistry) -> dict[tuple[str, str], float]:
        return {
            (s.name, s.labels.get("le", "")): s.value
            for f in text_string_to_metric_families(generate_latest(r).decode())
            for s in f.samples
            if not s.name.endswith("_created")
        }

    assert samples(ours) == pytest.approx(samples(theirs))


def test_a_histogram_needs_help() -> None:
    with pytest.raises(ValueError, match="h_seconds: HELP"):
        WeightedHistogram("h_seconds", "")


# -- gangs by phase, and the partial-gang gauge ----------------------------------------------------------


def spec(name: str, min_available: int, invalid: str = "") -> GangSpec:
    return gang_spec(name, min_available, ns="ns", invalid=invalid)


def test_gangs_by_phase_and_partial_gangs() -> None:
    gangs = GangManager(600.0)
    for s in (
        spec("pending", 2),
        spec("waiting", 2),
        spec("bound", 2),
        spec("short", 3),
        spec("binding", 3),
        spec("late", 2),
        spec("broken", 2, invalid="minMember is not a number"),
    ):
        gangs.upsert(s)
    gangs.records = {
        "ns/waiting": GangRecord("ns/waiting", assumed={"ns/w-0"}),
        "ns/bound": GangRecord("ns/bound", satisfied_at=5.0, bound={"ns/b-0", "ns/b-1"}),
        # Bound, bind over, one pod short of the minimum (deleted while its gang was bound): partial.
        "ns/short": GangRecord("ns/short", satisfied_at=5.0, bound={"ns/s-0", "ns/s-1"}),
        # Part bound, the rest still reserved and being bound (the API server did not answer): not yet partial.
        "ns/binding": GangRecord("ns/binding", satisfied_at=5.0, bound={"ns/x-0"}, assumed={"ns/x-1", "ns/x-2"}),
        "ns/late": GangRecord("ns/late", timed_out=True),
        "ns/nobody-declared": GangRecord("ns/nobody-declared"),
    }
    phases, partial = gang_counts(gangs)
    assert dict(phases) == {"pending": 1, "waiting": 1, "bound": 3, "timed_out": 1, "invalid": 1, "undeclared": 1}
    assert partial == 1


# -- the scheduler's attempt tally --------------------------------------------------------------------------


def test_each_pod_counts_once_by_its_first_verdict() -> None:
    registry = registry_for("scheduler")

    def value(result: str) -> float:
        return (
            registry.get_sample_value("scheduler_schedule_attempts_total", {"result": result, "profile": "tally-test"})
            or 0.0
        )

    tally = AttemptTally("tally-test")
    unit = [Popped(PodInfo("ns", f"p{i}")) for i in range(3)]
    released_earlier = Popped(PodInfo("ns", "held"))  # answered in this unit but popped in an earlier round
    verdicts = [
        Verdict(Popped(PodInfo("ns", "before")), Outcome.ASSUMED),  # another unit's, before the mark
        Verdict(released_earlier, Outcome.UNSCHEDULABLE),
        Verdict(unit[0], Outcome.ASSUMED),
        Verdict(unit[1], Outcome.UNSCHEDULABLE),
        Verdict(unit[0], Outcome.BOUND),
    ]  # its bind, in the same round: not a second attempt
    tally.new_round()
    tally.unit(unit, verdicts, 1, 0.002)  # unit[2] got no verdict: handed on, counted elsewhere
    assert (value("scheduled"), value("unschedulable"), value("error")) == (1, 1, 0)
    assert (
        registry.get_sample_value(
            "scheduler_scheduling_attempt_duration_seconds_bucket",
            {"result": "scheduled", "profile": "tally-test", "le": "0.002"},
        )
        == 1
    )
    tally.failed(popped=3, seconds=0.01)  # the round raised: the pod not judged yet is an error
    assert value("error") == 1


# -- Redis transaction conflicts (a real redis-server) -----------------------------------------------------


def test_refused_transactions_are_counted_by_reason(store: StateStore) -> None:
    registry = registry_for("binder")

    def conflicts(reason: str) -> float:
        return registry.get_sample_value("phalanx_redis_txn_conflicts_total", {"reason": reason}) or 0.0

    store.put_nodes([NodeInfo("n1", {"cpu": 1000, "pods": 110_000})])
    before = {r: conflicts(r) for r in ("capacity", "pod_state", "node_gone", "stale_fence")}
    big = PodInfo("ns", "big", uid="big", requests={"cpu": 2000})
    assert not store.apply(Txn(reserve=[store.reserve_entry(big, "n1")]))[0]
    assert not store.apply(Txn(reserve=[store.reserve_entry(big, "n9")]))[0]
    assert not store.apply(Txn(expect=[["ns/big", "assumed", ""]]))[0]
    assert not store.apply(Txn(fence=41))[0]
    assert store.apply(Txn(reserve=[store.reserve_entry(PodInfo("ns", "ok", uid="ok", requests={"cpu": 1}), "n1")]))[0]
    assert {r: conflicts(r) - before[r] for r in before} == {
        "capacity": 1,
        "pod_state": 1,
        "node_gone": 1,
        "stale_fence": 1,
    }


# -- --metrics-listen -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "listen, parsed",
    [
        ("0.0.0.0:9091", ("0.0.0.0", 9091)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        (":9092", ("0.0.0.0", 9092)),
        ("[::1]:9093", ("::1", 9093)),
        ("", None),
        ("off", None),
        ("OFF", None),
    ],
)
def test_metrics_listen(listen: str, parsed: tuple[str, int] | None) -> None:
    assert parse_listen(listen) == parsed


@pytest.mark.parametrize("listen", ["9091", "host:", "host:http", "host:70000"])
def test_a_malformed_metrics_listen_is_refused(listen: str) -> None:
    with pytest.raises(MetricsListenError, match="expected host:port"):
        parse_listen(listen)
