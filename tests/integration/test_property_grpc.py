"""Property: the queue, scheduler and binder answer any request with OK or INVALID_ARGUMENT, never UNKNOWN
(an unhandled exception in a servicer) or INTERNAL; a refused request changes nothing; and they still
answer health checks afterwards.

The three services run in this process on loopback ports, against the session's real redis-server.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
import redis
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from phalanx.backends.simulated import SimulatedBackend
from phalanx.binding.batch_binder import BatchBinder
from phalanx.binding.lock import FencedLock
from phalanx.clock import Clock
from phalanx.cluster.loop import SchedulingLoop
from phalanx.plugins.registry import load_in_tree_framework
from phalanx.queueing.scheduling_queue import QueueSettings, SchedulingQueue
from phalanx.rpc.clients import BinderClient, QueueClient
from phalanx.rpc.server import ServiceServer
from phalanx.scheduling.scheduler import GangScheduler, SchedulerSettings
from phalanx.security.tls import PLAINTEXT
from phalanx.state.keys import Keys
from phalanx.state.store import StateStore
from phalanx.testing.redis_server import RedisServer
from phalanx.v1 import (
    binder_pb2,
    binder_pb2_grpc,
    objects_pb2,
    queue_pb2,
    queue_pb2_grpc,
    scheduler_pb2,
    scheduler_pb2_grpc,
)
from phalanx_binder.servicer import BinderServicer
from phalanx_queue.servicer import QueueServicer
from phalanx_scheduler.servicer import SchedulerServicer

pytestmark = pytest.mark.integration

TIMEOUT = 10.0
ACCEPTED = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT}

settings.register_profile(
    "grpc",
    deadline=None,
    derandomize=True,
    max_examples=400,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
GRPC = settings.get_profile("grpc")


# --- the services, in process ----------------------------------------------------------------------


@dataclass
class Services:
    servers: list[ServiceServer]
    channels: dict[str, grpc.Channel]

    @property
    def queue(self) -> queue_pb2_grpc.QueueStub:
        return queue_pb2_grpc.QueueStub(self.channels["queue"])

    @property
    def scheduler(self) -> scheduler_pb2_grpc.SchedulerStub:
        return scheduler_pb2_grpc.SchedulerStub(self.channels["scheduler"])

    @property
    def binder(self) -> binder_pb2_grpc.BinderStub:
        return binder_pb2_grpc.BinderStub(self.channels["binder"])


@pytest.fixture(scope="module")
def services(redis_server: RedisServer) -> Iterator[Services]:
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    keys = Keys("property-grpc")
    clock = Clock(virtual=True)
    queue_servicer = QueueServicer(SchedulingQueue(QueueSettings(unschedulable_flush=0.0)), clock)
    queue = ServiceServer(
        "queue",
        "127.0.0.1:0",
        lambda s: queue_pb2_grpc.add_QueueServicer_to_server(queue_servicer, s),
        security=PLAINTEXT,
    ).start()
    backend = SimulatedBackend(client, keys)
    binder_servicer = BinderServicer(
        BatchBinder(StateStore(client, keys), backend, FencedLock(client, keys)), backend, clock
    )
    binder = ServiceServer(
        "binder",
        "127.0.0.1:0",
        lambda s: binder_pb2_grpc.add_BinderServicer_to_server(binder_servicer, s),
        security=PLAINTEXT,
    ).start()
    queue_client, binder_client = QueueClient(queue.address, PLAINTEXT), BinderClient(binder.address, PLAINTEXT)
    scheduler = GangScheduler(
        StateStore(client, keys),
        queue_client,
        binder_client,
        load_in_tree_framework(None),
        SchedulerSettings(default_wait_seconds=600.0),
    )
    scheduler.recover(0.0)
    scheduler_servicer = SchedulerServicer(
        scheduler, SchedulingLoop(scheduler, queue_client, clock), clock, simulated=True
    )
    sched = ServiceServer(
        "scheduler",
        "127.0.0.1:0",
        lambda s: scheduler_pb2_grpc.add_SchedulerServicer_to_server(scheduler_servicer, s),
        security=PLAINTEXT,
    ).start()
    servers = [queue, binder, sched]
    channels = {s.name: grpc.insecure_channel(s.address) for s in servers}
    yield Services(servers, channels)
    for ch in channels.values():
        ch.close()
    for server in reversed(servers):
        server.stop(grace=0.5)
    client.close()


def answer(call: Callable[..., Any], request: Any, *, tally: bool = True) -> grpc.StatusCode:
    """The status of one call; anything but OK or INVALID_ARGUMENT fails with the server's message."""
    try:
        call(request, timeout=TIMEOUT)
    except grpc.RpcError as exc:
        code = exc.code()
        assert code in ACCEPTED, f"{code}: {exc.details()}"
        assert exc.details(), "a refusal names the field"
        if tally:  # hypothesis's statistics (--hypothesis-show-statistics): how many got past the checks
            event(code.name)
        return code
    if tally:
        event("OK")
    return grpc.StatusCode.OK


def assert_healthy(services: Services) -> None:
    for channel in services.channels.values():
        status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=TIMEOUT).status
        assert status == health_pb2.HealthCheckResponse.SERVING


# --- generated messages ----------------------------------------------------------------------------

# Mostly valid values, so requests also get past the checks and exercise the services behind them.
valid_names = st.sampled_from(["a", "ns", "p-0", "a.b", "default", "n1", "g", "x" * 63])
odd_names = st.sampled_from(["", "ns/p", "a/b/c", "/", "Ns", "p_0", "-p", "x" * 64, "y" * 254, "名前", " ", "p\n"])
names = st.one_of(valid_names, valid_names, odd_names, st.text(max_size=12))
valid_keys = st.builds(lambda a, b: f"{a}/{b}", valid_names, valid_names)
keys_ = st.one_of(valid_keys, valid_keys, st.builds(lambda a, b: f"{a}/{b}", names, names), names)
doubles = st.one_of(
    st.sampled_from([0.0, 1.0, -1.0, 1e11, 1e12, 1e13, 1e300, -1e300, math.inf, -math.inf, math.nan, 5e-324]),
    st.floats(allow_nan=True, allow_infinity=True),
)
times = st.one_of(st.sampled_from([0.0, 1.0, 10.0]), st.floats(0.0, 1e6), doubles)
int32 = st.one_of(st.sampled_from([0, 1, 2, -1, 2**31 - 1, -(2**31)]), st.integers(-(2**31), 2**31 - 1))
int64 = st.one_of(st.sampled_from([0, 1000, -1, -1000, 2**62, 2**63 - 1, -(2**63)]), st.integers(-(2**63), 2**63 - 1))
resources = st.dictionaries(
    st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "pods", "", "x" * 400]),
    st.one_of(st.integers(0, 2**40), int64),
    max_size=3,
)
string_maps = st.dictionaries(
    st.one_of(st.sampled_from(["zone", "", "k" * 400]), st.text(max_size=5)),
    st.one_of(st.text(max_size=5), st.just("v" * 300_000)),
    max_size=2,
)
requirements = st.lists(
    st.builds(
        objects_pb2.SelectorRequirement,
        key=names,
        operator=st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "?"]),
        values=st.lists(st.one_of(names, st.sampled_from(["1", "9" * 40])), max_size=2),
    ),
    max_size=2,
)
placements = st.builds(
    objects_pb2.Placement,
    node_selector=string_maps,
    affinity_terms=st.lists(
        st.builds(objects_pb2.SelectorTerm, match_expressions=requirements, match_fields=requirements), max_size=2
    ),
    tolerations=st.lists(
        st.builds(
            objects_pb2.Toleration,
            key=names,
            operator=st.sampled_from(["Equal", "Exists", ""]),
            value=names,
            effect=names,
        ),
        max_size=2,
    ),
)
pods = st.builds(
    objects_pb2.Pod,
    namespace=names,
    name=names,
    uid=names,
    priority=int32,
    created_at=times,
    requests=resources,
    placement=placements,
    gang=keys_,
    gang_created_at=times,
    node_name=names,
    annotations=string_maps,
    duration=doubles,
    invalid=names,
    trace_parent=names,
)
nodes = st.builds(
    objects_pb2.Node,
    name=names,
    allocatable=resources,
    labels=string_maps,
    taints=st.lists(st.builds(objects_pb2.Taint, key=names, value=names, effect=names), max_size=2),
    unschedulable=st.booleans(),
)
gangs = st.builds(
    objects_pb2.Gang,
    namespace=names,
    name=names,
    min_available=int32,
    total_number=int32,
    mode=st.integers(0, 3),
    groups=st.lists(keys_, max_size=2),
    wait_seconds=doubles,
    min_resources=resources,
    created_at=times,
    source=names,
    invalid=names,
)
pod_lists = st.lists(pods, max_size=3)
key_lists = st.lists(keys_, max_size=3)

done_requests = st.builds(
    queue_pb2.DoneRequest,
    results=st.lists(st.builds(queue_pb2.PodResult, pod=pods, outcome=st.integers(0, 7), reason=names), max_size=3),
    activate_gangs=key_lists,
    failed_gangs=key_lists,
    now=times,
)
queue_requests = st.one_of(
    st.tuples(st.just("Add"), st.builds(queue_pb2.AddRequest, pods=pod_lists, now=times)),
    # Waits are kept short or invalid: a valid long wait would block the test on an empty queue.
    st.tuples(
        st.just("Pop"),
        st.builds(
            queue_pb2.PopRequest,
            max_pods=int32,
            now=times,
            wait_seconds=st.sampled_from([0.0, 0.001, -1.0, math.nan, math.inf, -math.inf, 1e13]),
            done=st.one_of(st.none(), done_requests),
            remove=key_lists,
            add=pod_lists,
            move_all=st.booleans(),
        ),
    ),
    st.tuples(st.just("Done"), done_requests),
    st.tuples(
        st.just("Remove"),
        st.builds(queue_pb2.RemoveRequest, pod_keys=st.lists(st.one_of(keys_, st.just("k" * 1000)), max_size=3)),
    ),
    st.tuples(st.just("MoveAll"), st.builds(queue_pb2.MoveAllRequest, event=names, now=times)),
    st.tuples(st.just("Stats"), st.builds(queue_pb2.StatsRequest, now=times)),
)


def without_requests(pod: objects_pb2.Pod) -> objects_pb2.Pod:
    """A pod found bound whose node lacks room for it makes the scheduler raise TxnConflict (reported as a
    known bug outside the request checks, see test_a_bound_pod_beyond_its_nodes_capacity_is_refused_cleanly);
    bound pods here hold nothing so the properties keep looking for other failures."""
    pod.ClearField("requests")
    return pod


bound_pods = st.lists(pods.map(without_requests), max_size=3)
cluster_events = st.builds(
    scheduler_pb2.ClusterEvents,
    nodes_upserted=st.lists(nodes, max_size=2),
    nodes_removed=st.lists(names, max_size=2),
    gangs_upserted=st.lists(gangs, max_size=2),
    gangs_removed=key_lists,
    pods_finished=key_lists,
    pods_deleted=key_lists,
    pods_bound=bound_pods,
    now=times,
)


def on_n1(pod: objects_pb2.Pod) -> objects_pb2.Pod:
    pod.node_name = "n1"
    return pod


# Requests that pass the checks, so the scheduler itself meets huge amounts, odd times and unknown keys.
good_amounts = st.dictionaries(
    st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "pods"]),
    st.one_of(st.integers(0, 64_000), st.sampled_from([0, 2**62, 2**63 - 1])),
    max_size=4,
)
good_times = st.floats(0.0, 1e6)
good_pods = st.builds(
    objects_pb2.Pod,
    namespace=valid_names,
    name=valid_names,
    priority=int32,
    created_at=good_times,
    requests=good_amounts,
    gang=st.one_of(st.just(""), valid_keys),
    gang_created_at=good_times,
    duration=st.floats(-1.0, 1e6),
)
good_nodes = st.builds(objects_pb2.Node, name=valid_names, allocatable=good_amounts, unschedulable=st.booleans())
good_gangs = st.builds(
    objects_pb2.Gang,
    namespace=valid_names,
    name=valid_names,
    min_available=st.integers(1, 4),
    total_number=st.integers(0, 6),
    wait_seconds=st.floats(-1.0, 1e6),
    created_at=good_times,
    groups=st.lists(valid_keys, max_size=2),
)
good_events = st.builds(
    scheduler_pb2.ClusterEvents,
    nodes_upserted=st.lists(good_nodes, max_size=3),
    nodes_removed=st.lists(valid_names, max_size=1),
    gangs_upserted=st.lists(good_gangs, max_size=2),
    gangs_removed=st.lists(valid_keys, max_size=1),
    pods_finished=st.lists(valid_keys, max_size=2),
    pods_deleted=st.lists(valid_keys, max_size=1),
    pods_bound=st.lists(good_pods.map(on_n1).map(without_requests), max_size=2),
    now=good_times,
)
scheduler_requests = st.one_of(
    st.tuples(st.just("ApplyClusterEvents"), good_events),
    st.tuples(
        st.just("Step"),
        st.builds(
            scheduler_pb2.StepRequest, now=good_times, events=good_events, pods_added=st.lists(good_pods, max_size=4)
        ),
    ),
    st.tuples(st.just("ApplyClusterEvents"), cluster_events),
    st.tuples(
        st.just("Step"),
        st.builds(
            scheduler_pb2.StepRequest,
            now=times,
            events=st.one_of(st.none(), cluster_events),
            pods_added=pod_lists,
            later=st.lists(
                st.builds(scheduler_pb2.Instant, now=times, pods_added=pod_lists, pods_finished=key_lists), max_size=2
            ),
        ),
    ),
)
assignments = st.lists(st.builds(binder_pb2.Assignment, pod_key=keys_, uid=names, node=names, gang=keys_), max_size=3)
binder_requests = st.one_of(
    st.tuples(
        st.just("Bind"),
        st.builds(
            binder_pb2.BindRequest, assignments=assignments, all_or_nothing=st.booleans(), now=times, trace_parent=names
        ),
    ),
    st.tuples(
        st.just("BindMany"),
        st.builds(
            binder_pb2.BindManyRequest,
            now=times,
            batches=st.lists(
                st.builds(
                    binder_pb2.BindBatch, assignments=assignments, all_or_nothing=st.booleans(), trace_parent=names
                ),
                max_size=2,
            ),
        ),
    ),
    st.tuples(
        st.just("Report"),
        st.builds(
            binder_pb2.ReportRequest,
            now=times,
            pods=st.lists(
                st.builds(
                    binder_pb2.PodReport,
                    pod_key=keys_,
                    annotations=string_maps,
                    unschedulable_message=names,
                    event_reason=names,
                    event_message=names,
                ),
                max_size=2,
            ),
            gangs=st.lists(
                st.builds(
                    binder_pb2.GangReport,
                    gang_key=keys_,
                    phase=names,
                    scheduled=int32,
                    message=names,
                    source=names,
                    event_reason=names,
                    schedule_start_time=doubles,
                    pod_key=keys_,
                    running=int32,
                    succeeded=int32,
                    failed=int32,
                ),
                max_size=2,
            ),
        ),
    ),
)


# --- the properties --------------------------------------------------------------------------------


def queue_state(services: Services) -> tuple[int, int, int, int]:
    s = services.queue.Stats(queue_pb2.StatsRequest(now=1.0), timeout=TIMEOUT)
    return (s.active, s.backoff, s.unschedulable, s.in_flight)


@GRPC
@given(queue_requests)
def test_the_queue_answers_any_request(services: Services, call: tuple[str, Any]) -> None:
    method, request = call
    before = queue_state(services)
    if answer(getattr(services.queue, method), request) == grpc.StatusCode.INVALID_ARGUMENT:
        assert queue_state(services) == before, "a refused request changes nothing"


def gang_keys(services: Services) -> set[str]:
    return {g.key for g in services.scheduler.ListGangs(scheduler_pb2.ListGangsRequest(), timeout=TIMEOUT).gangs}


@GRPC
@given(scheduler_requests)
def test_the_scheduler_answers_any_request(services: Services, call: tuple[str, Any]) -> None:
    method, request = call
    before = gang_keys(services)
    if answer(getattr(services.scheduler, method), request) == grpc.StatusCode.INVALID_ARGUMENT:
        assert gang_keys(services) == before, "a refused request changes nothing"


@GRPC
@given(binder_requests)
def test_the_binder_answers_any_request(services: Services, call: tuple[str, Any]) -> None:
    method, request = call
    if method == "BindMany":  # only offered as a stream: one request, one answer
        answer(lambda r, timeout: list(services.binder.BindManyStream(iter([r]), timeout=timeout)), request)
    else:
        answer(getattr(services.binder, method), request)


def test_every_service_is_still_healthy_afterwards(services: Services) -> None:
    assert_healthy(services)
    # And still works: a valid pod goes in and comes out.
    pod = objects_pb2.Pod(namespace="after", name="p", created_at=1.0, requests={"cpu": 1000})
    assert services.queue.Add(queue_pb2.AddRequest(pods=[pod], now=1.0), timeout=TIMEOUT).added == 1


# --- known cases, each once refused with a traceback or silently accepted --------------------------


@pytest.mark.parametrize(
    ("method", "request_", "field"),
    [
        (
            "ApplyClusterEvents",
            scheduler_pb2.ClusterEvents(
                pods_bound=[objects_pb2.Pod(namespace="ns", name="p", node_name="n1", requests={"cpu": -1000})], now=1.0
            ),
            "pods_bound[0].requests['cpu']: -1000 is negative",
        ),
        (
            "ApplyClusterEvents",
            scheduler_pb2.ClusterEvents(nodes_upserted=[objects_pb2.Node(name="a/b")], now=1.0),
            "nodes_upserted[0].name: 'a/b'",
        ),
        ("ApplyClusterEvents", scheduler_pb2.ClusterEvents(now=math.nan), "now: nan"),
        (
            "ApplyClusterEvents",
            scheduler_pb2.ClusterEvents(
                gangs_upserted=[objects_pb2.Gang(namespace="ns", name="g", min_available=3, total_number=2)]
            ),
            "gangs_upserted[0] ns/g: total_number 2 is below min_available 3",
        ),
        (
            "Step",
            scheduler_pb2.StepRequest(pods_added=[objects_pb2.Pod(namespace="team/a", name="p")], now=1.0),
            "pods_added[0].namespace: 'team/a'",
        ),
    ],
)
def test_the_scheduler_refuses_naming_the_field(services: Services, method: str, request_: Any, field: str) -> None:
    with pytest.raises(grpc.RpcError) as exc:
        getattr(services.scheduler, method)(request_, timeout=TIMEOUT)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert exc.value.details().startswith(field)


def test_the_queue_rejects_bad_pods_by_index_and_adds_the_good_ones(services: Services) -> None:
    pods_ = [
        objects_pb2.Pod(namespace="ok", name="good", created_at=1.0),
        objects_pb2.Pod(namespace="ok", name="a/b"),
        objects_pb2.Pod(namespace="ok", name="neg", requests={"cpu": -1}),
    ]
    resp = services.queue.Add(queue_pb2.AddRequest(pods=pods_, now=1.0), timeout=TIMEOUT)
    assert resp.added == 1
    assert [r.split(":")[0] for r in resp.rejected] == ["pods[1].name", "pods[2].requests['cpu']"]


def test_the_binder_refuses_a_batch_over_the_limit(services: Services) -> None:
    batch = [binder_pb2.Assignment(pod_key=f"ns/p{i}", node="n1") for i in range(10_001)]
    with pytest.raises(grpc.RpcError) as exc:
        services.binder.Bind(binder_pb2.BindRequest(assignments=batch, now=1.0), timeout=TIMEOUT)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert exc.value.details().startswith("assignments: 10001 items is too many")


def test_a_bound_pod_beyond_its_nodes_capacity_is_counted_not_refused(services: Services) -> None:
    """A pod found bound is a fact: it is recorded even where it over-commits its node (it used to fail
    the whole request with UNKNOWN)."""
    node = objects_pb2.Node(name="tight", allocatable={"cpu": 0, "pods": 110_000})
    pod = objects_pb2.Pod(namespace="full", name="p", node_name="tight", requests={"cpu": 1000})
    answer(
        services.scheduler.ApplyClusterEvents, scheduler_pb2.ClusterEvents(nodes_upserted=[node], now=1.0), tally=False
    )
    assert (
        answer(
            services.scheduler.ApplyClusterEvents, scheduler_pb2.ClusterEvents(pods_bound=[pod], now=1.0), tally=False
        )
        == grpc.StatusCode.OK
    )


def test_a_pod_found_bound_twice_in_one_request_is_refused(services: Services) -> None:
    # Twice in one transaction made Redis refuse the reservation: UNKNOWN instead of INVALID_ARGUMENT.
    node = objects_pb2.Node(name="twice", allocatable={"cpu": 4000, "pods": 110_000})
    pod = objects_pb2.Pod(namespace="twice", name="p", node_name="twice")
    services.scheduler.ApplyClusterEvents(scheduler_pb2.ClusterEvents(nodes_upserted=[node], now=1.0), timeout=TIMEOUT)
    with pytest.raises(grpc.RpcError) as exc:
        services.scheduler.ApplyClusterEvents(
            scheduler_pb2.ClusterEvents(pods_bound=[pod, pod], now=1.0), timeout=TIMEOUT
        )
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert exc.value.details() == "pods_bound[1]: pod 'twice/p' appears twice"
