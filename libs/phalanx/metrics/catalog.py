"""Every metric the services export, with its HELP text: kube-scheduler's name where the meaning is the
same, `phalanx_` otherwise.

The metric objects live at module level so the code that counts reaches them without a lookup; a
process's registry (`registry_for`) holds only its own service's, so the queue's /metrics shows no
scheduler counters. An object in no registry still counts (cheaply): a test that runs the scheduler and
the binder in one process only exports what it registers. Gauges that describe state (pending pods, gangs
by phase) are computed when scraped, in phalanx.metrics.collectors, at no cost to the hot path.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, GCCollector, Info, PlatformCollector, ProcessCollector
from prometheus_client.registry import Collector

from phalanx.metrics.histogram import WeightedHistogram, exponential_buckets
from phalanx.version import package_version

# kube-scheduler's buckets: attempts from 1 ms (15 buckets, to ~16 s); end-to-end from 10 ms (20, to ~87 min).
ATTEMPT_BUCKETS = exponential_buckets(0.001, 2, 15)
E2E_BUCKETS = exponential_buckets(0.01, 2, 20)
# A batch bind writes up to thousands of bindings to the API server: 1 ms to ~33 s.
BIND_BUCKETS = exponential_buckets(0.001, 2, 16)

RESULTS = ("scheduled", "unschedulable", "error")
BIND_RESULTS = ("bound", "failed", "rolled_back", "gone", "pending")
CONFLICT_REASONS = ("capacity", "pod_state", "node_gone", "locked", "stale_fence")

# -- scheduler ------------------------------------------------------------------------------------------
SCHEDULE_ATTEMPTS = Counter(
    "scheduler_schedule_attempts_total",
    "Number of attempts to schedule pods, by the result (kube-scheduler's metric). One attempt is one popped "
    "pod judged in a scheduling round. 'scheduled': placed (reserved on a node; a pod without a gang is also "
    "sent to the binder); 'unschedulable': not placed (no node fits, a gang rule holds it back, its gang is "
    "invalid or timed out, a commit conflict or a refused bind sent it back to the queue); 'error': the round "
    "failed before the pod was judged (Redis or the queue unreachable). 'profile' is the scheduler name.",
    ["result", "profile"],
    registry=None,
)

ATTEMPT_DURATION = WeightedHistogram(
    "scheduler_scheduling_attempt_duration_seconds",
    "Scheduling attempt latency in seconds (kube-scheduler's metric): filtering, scoring and the Redis commit "
    "of the unit the pod was judged in (a gang's popped pods together, or a round's pods without a gang, "
    "whose bind is included). A gang's bind is timed by the binder (phalanx_bind_duration_seconds).",
    ["result", "profile"],
    ATTEMPT_BUCKETS,
)

POD_E2E = WeightedHistogram(
    "scheduler_pod_scheduling_sli_duration_seconds",
    "End-to-end latency of a pod being scheduled, over all its attempts (kube-scheduler's metric, without "
    "its 'attempts' label): from the pod's creation (metadata.creationTimestamp; in a simulation, its "
    "arrival) to the binder's answer that it is bound.",
    (),
    E2E_BUCKETS,
)

GANG_WAIT = WeightedHistogram(
    "phalanx_gang_wait_duration_seconds",
    "Seconds from a gang's creation (its PodGroup's creationTimestamp, or its first pod's for a gang declared "
    "by pod labels) to its first bind, the one that reached its minimum. The count is the number of gangs "
    "bound.",
    (),
    E2E_BUCKETS,
)

GANG_TIMEOUTS = Counter(
    "phalanx_gang_timeouts_total",
    "Gangs that timed out: their wait (scheduleTimeoutSeconds, or --default-wait) ran out before they reached "
    "their minimum; their reservations were released and their pods are not scheduled again until recreated.",
    registry=None,
)

PREEMPTION_ATTEMPTS = Counter(
    "scheduler_preemption_attempts_total",
    "Preemption searches (kube-scheduler's metric): a gang that did not fit looked for lower-priority victims, "
    "whether or not it found a set that makes it fit.",
    registry=None,
)

PREEMPTION_VICTIMS = Counter(
    "phalanx_preemption_victims_total",
    "Pods evicted for preempting gangs (their eviction accepted by the cluster).",
    registry=None,
)

RECONCILE_REPAIRS = Counter(
    "phalanx_reconcile_repairs_total",
    "Repairs made by reconciliation (Kubernetes mode) when the scheduler's memory, Redis and the API server "
    "disagreed, by kind (node, uncounted-pod, unrecorded-binding, stale-record, stale-bound, moved, "
    "stale-node, usage, scheduler-memory, gang specs re-sent). Steadily rising means drift.",
    ["kind"],
    registry=None,
)

UNTRUSTED_PODS = Counter(
    "phalanx_untrusted_pods_total",
    "Pods the queue handed out that the scheduler did not place as handed (Kubernetes mode, where the API "
    "server is the only source of a pod's spec), by reason: 'unknown' (its cluster feed has no pending pod of "
    "that name and uid: dropped from the queue) or 'differs' (the queue's copy differs from the feed's in what "
    "scheduling reads: the feed's copy is placed instead). Anything above zero means a caller other than the "
    "feed added pods to the queue.",
    ["reason"],
    registry=None,
)
for _reason in ("unknown", "differs"):
    UNTRUSTED_PODS.labels(_reason)

# -- scheduler and binder -------------------------------------------------------------------------------
TXN_CONFLICTS = Counter(
    "phalanx_redis_txn_conflicts_total",
    "Optimistic transactions on Redis refused because the state changed since it was read (each one is "
    "retried or sent back), by reason: 'capacity' (a node no longer has room), 'pod_state' (a pod's "
    "reservation changed), 'node_gone', 'locked' (another binder holds the bind mutex), 'stale_fence' (a "
    "newer holder of the bind mutex exists).",
    ["reason"],
    registry=None,
)

# -- binder ---------------------------------------------------------------------------------------------
BIND_DURATION = WeightedHistogram(
    "phalanx_bind_duration_seconds",
    "Seconds the binder took to bind one batch (a gang or GangGroup at once, or pods without a gang): the "
    "cluster's checks, the binding intent, the API server writes and the Redis commit. Batches bound "
    "together (one bind_many) each count the joint time.",
    (),
    BIND_BUCKETS,
)

BIND_RESULTS_TOTAL = Counter(
    "phalanx_bind_results_total",
    "Pods the binder answered, by result: 'bound'; 'failed' (refused, its reservation released); "
    "'rolled_back' (released with its gang, all-or-nothing); 'gone' (the pod no longer exists); 'pending' "
    "(the API server did not answer: kept reserved and sent again).",
    ["result"],
    registry=None,
)

# -- controller (phalanx-controller, PhalanxJobs) -----------------------------------------------------------
CONTROLLER_RECONCILES = Counter(
    "phalanx_controller_reconciles_total",
    "PhalanxJob reconciles, by result: 'ok'; 'conflict' (the job changed between the read and the status "
    "write, read again at once); 'error' (the API server failed a call; retried after 2 s).",
    ["result"],
    registry=None,
)
CONTROLLER_POD_WRITES = Counter(
    "phalanx_controller_pod_writes_total",
    "Pods the job controller created or deleted (action: create, delete), counting only calls that succeeded.",
    ["action"],
    registry=None,
)
CONTROLLER_RESTARTS = Counter(
    "phalanx_controller_restarts_total",
    "Restarts of job pods counted against their job's restartLimit: a pod that had been bound was lost "
    "(failed, evicted, deleted, its node gone) and is recreated.",
    registry=None,
)
CONTROLLER_STAGE_TRANSITIONS = Counter(
    "phalanx_controller_stage_transitions_total",
    "Jobs entering a stage (Pending, Starting, Running, Rescheduling, Succeeded, Failed), as this process saw "
    "them (a restarted controller counts each job's current stage once).",
    ["stage"],
    registry=None,
)

for _result in BIND_RESULTS:  # every series exists from the start, so rate() and absent() work
    BIND_RESULTS_TOTAL.labels(_result)
for _reason in CONFLICT_REASONS:
    TXN_CONFLICTS.labels(_reason)
for _result in ("ok", "conflict", "error"):
    CONTROLLER_RECONCILES.labels(_result)
for _action in ("create", "delete"):
    CONTROLLER_POD_WRITES.labels(_action)

SERVICE_METRICS: dict[str, tuple[Collector, ...]] = {
    "queue": (),  # all of the queue's are computed when scraped (collectors.QueueCollector)
    "scheduler": (
        SCHEDULE_ATTEMPTS,
        ATTEMPT_DURATION,
        POD_E2E,
        GANG_WAIT,
        GANG_TIMEOUTS,
        PREEMPTION_ATTEMPTS,
        PREEMPTION_VICTIMS,
        RECONCILE_REPAIRS,
        UNTRUSTED_PODS,
        TXN_CONFLICTS,
    ),
    "binder": (BIND_DURATION, BIND_RESULTS_TOTAL, TXN_CONFLICTS),
    "controller": (CONTROLLER_RECONCILES, CONTROLLER_POD_WRITES, CONTROLLER_RESTARTS, CONTROLLER_STAGE_TRANSITIONS),
}


def registry_for(service: str, *extra: Collector) -> CollectorRegistry:
    """A fresh registry with `service`'s metrics, the process's (CPU, memory, file descriptors, GC) and
    `extra` (its scrape-time collectors)."""
    if service not in SERVICE_METRICS:
        raise ValueError(f"registry_for: unknown service {service!r} (known: {', '.join(SERVICE_METRICS)})")
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    # "component", not "service": Prometheus Operator targets carry a `service` label of their own.
    build = Info(
        "phalanx_build",
        "The Phalanx component (queue, scheduler, binder, controller) and version this process runs.",
        registry=registry,
    )
    build.info({"component": service, "version": package_version()})
    for collector in (*SERVICE_METRICS[service], *extra):
        registry.register(collector)
    return registry
