"""phalanx-scheduler's command line: its flags, grouped by concern, and the checks of the values they carry.

Each flag reads a PHALANX_* variable for its default (phalanx.config.env_flag), which --help shows. The
groups are added in the order --help has always listed the flags; the deploy tests compare the chart and
the manifests with these names.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from phalanx.cluster.leader import DEFAULT_LEASE_DURATION, DEFAULT_RENEW_DEADLINE, DEFAULT_RETRY_PERIOD
from phalanx.config import bool_arg, common_parser, env_flag, kubeconfig_arg, opt_bool, redis_args, usage_error
from phalanx.model.keys import DEFAULT_SCHEDULER_NAME


def parser(description: str) -> argparse.ArgumentParser:
    """Every flag of the service; `description`: the service's docstring, shown by --help."""
    p = common_parser("scheduler", description)
    redis_args(p)
    _peers(p)
    _scheduling(p)
    _cluster(p)
    _leader_election(p)
    return p


def _peers(p: argparse.ArgumentParser) -> None:
    """The services the scheduler calls."""
    env_flag(p, "--queue", "PHALANX_QUEUE_ADDR", "127.0.0.1:50051", "queue service")
    env_flag(p, "--binder", "PHALANX_BINDER_ADDR", "127.0.0.1:50053", "binder service")


def _scheduling(p: argparse.ArgumentParser) -> None:
    """How pods and gangs are scheduled."""
    env_flag(
        p,
        "--profile",
        "PHALANX_PROFILE",
        "",
        "scheduling profile YAML",
        parse=lambda raw: raw or None,
        shown="empty: the built-in profile",
    )
    env_flag(
        p,
        "--default-wait",
        "PHALANX_DEFAULT_WAIT",
        "600",
        "seconds a gang waits for its minimum when it declares no waiting time",
        parse=float,
        type=float,
    )
    env_flag(
        p,
        "--gang-retry-backoff",
        "PHALANX_GANG_RETRY_BACKOFF",
        "10",
        "seconds a gang whose wait ran out waits before it is tried again, for the forms that retry "
        "(scheduler-plugins, Volcano and Workload API PodGroups, lightweight, kube-batch, delayed-binding, "
        "ConfigMap; Coscheduling's podGroupBackoffSeconds); Koordinator's forms never retry",
    )
    env_flag(
        p,
        "--starvation-bound",
        "PHALANX_STARVATION_BOUND",
        "0",
        "seconds a gang may wait for its minimum before nodes are reserved (drained) for it; 0: no reservations",
        parse=float,
        type=float,
    )
    env_flag(
        p,
        "--preemption",
        "PHALANX_PREEMPTION",
        "on",
        "gang preemption: a gang that does not fit evicts lower-priority gangs (whole) or pods; off: never",
        choices=["on", "off"],
    )
    env_flag(
        p, "--pop-batch", "PHALANX_POP_BATCH", "256", "pods popped from the queue at most per pop", parse=int, type=int
    )


def _cluster(p: argparse.ArgumentParser) -> None:
    """Start-up, where the cluster comes from, and how often it is checked."""
    p.add_argument(
        "--dependency-timeout",
        type=float,
        default=60.0,
        help="seconds to wait at start for the queue and the binder to serve before giving up",
    )
    env_flag(
        p,
        "--backend",
        "PHALANX_BACKEND",
        "kubernetes",
        "kubernetes: watch the cluster (with --clock real) and feed it to the scheduler; simulated: cluster "
        "events arrive through the Scheduler API",
        choices=["simulated", "kubernetes"],
    )
    kubeconfig_arg(p)
    env_flag(
        p,
        "--reconcile-interval",
        "PHALANX_RECONCILE_INTERVAL",
        "10",
        "seconds between comparisons of the scheduler's view, Redis and the API server, which repair any drift",
        parse=float,
        type=float,
    )
    env_flag(
        p,
        "--feed-linger",
        "PHALANX_FEED_LINGER",
        "0",
        "seconds the cluster feed waits, when a watch event ends a lull, for the events right behind it, so pods "
        "created one after the other are applied in one batch; 0 (the default): no wait. A gang's first pods wait "
        "for the rest anyway (--gang-hold), so a linger only delays them",
        parse=linger_of,
        type=linger_of,
    )
    env_flag(
        p,
        "--gang-hold",
        "PHALANX_GANG_HOLD",
        "0.05",
        "seconds the first pods of a gang with fewer pods created than its minimum wait in the cluster feed for "
        "the rest, so the gang is placed in one step instead of reserved pod by pod; 0: no wait",
        parse=gang_hold_of,
        type=gang_hold_of,
    )
    env_flag(
        p,
        "--liveness-timeout",
        "PHALANX_LIVENESS_TIMEOUT",
        "120",
        "seconds the scheduling loop may go without an iteration before liveness fails",
        parse=float,
        type=float,
    )
    env_flag(
        p,
        "--scheduler-name",
        "PHALANX_SCHEDULER_NAME",
        DEFAULT_SCHEDULER_NAME,
        "the spec.schedulerName of the pods Phalanx schedules",
    )


def _leader_election(p: argparse.ArgumentParser) -> None:
    """Several replicas: kube-scheduler's flags and defaults, in their own --help section."""
    g = p.add_argument_group(
        "leader election",
        "several replicas: one leads (schedules), the others wait (kube-scheduler's flags and defaults)",
    )
    env_flag(
        g,
        "--leader-elect",
        "PHALANX_LEADER_ELECT",
        "",
        "elect a leader on a coordination.k8s.io Lease before scheduling",
        parse=opt_bool,
        shown="true with --backend kubernetes and --clock real, else false",
        type=bool_arg,
        nargs="?",
        const=True,
    )
    env_flag(
        g,
        "--leader-elect-lease-name",
        "PHALANX_LEADER_ELECT_LEASE_NAME",
        "",
        "the Lease's name",
        shown="<scheduler-name>-scheduler, i.e. phalanx-scheduler",
    )
    env_flag(
        g,
        "--leader-elect-namespace",
        "PHALANX_LEADER_ELECT_NAMESPACE",
        "",
        "the Lease's namespace",
        shown="POD_NAMESPACE, else the service account's namespace, else default",
    )
    env_flag(
        g,
        "--leader-elect-identity",
        "PHALANX_LEADER_ELECT_IDENTITY",
        "",
        "this replica's name in the Lease (a random suffix per process is appended); replicas need distinct names",
        shown="POD_NAME, else the host name",
    )
    env_flag(
        g,
        "--leader-elect-lease-duration",
        "PHALANX_LEADER_ELECT_LEASE_DURATION",
        f"{DEFAULT_LEASE_DURATION:g}",
        "seconds a standby waits, after the Lease last changed, before taking it over",
        parse=float,
        type=float,
    )
    env_flag(
        g,
        "--leader-elect-renew-deadline",
        "PHALANX_LEADER_ELECT_RENEW_DEADLINE",
        f"{DEFAULT_RENEW_DEADLINE:g}",
        "seconds the leader keeps trying to renew before it gives up leadership (and exits)",
        parse=float,
        type=float,
    )
    env_flag(
        g,
        "--leader-elect-retry-period",
        "PHALANX_LEADER_ELECT_RETRY_PERIOD",
        f"{DEFAULT_RETRY_PERIOD:g}",
        "seconds between attempts to acquire or renew the Lease",
        parse=float,
        type=float,
    )


# -- what the flags mean ------------------------------------------------------------------------------------


def election_enabled(args: argparse.Namespace) -> bool:
    """--leader-elect, by default on against Kubernetes on the wall clock (the deployed configuration)."""
    if args.leader_elect is not None:
        return bool(args.leader_elect)
    return bool(args.backend == "kubernetes" and args.clock == "real")


def bounded_seconds(flag: str, variable: str, upper: float = math.inf) -> Callable[[str], float]:
    """A parser of seconds from 0 to `upper`; anything else ends the service with one line naming the flag and
    its variable (exit status 2)."""
    allowed = "0 or more" if math.isinf(upper) else f"from 0 to {upper:g}"

    def parse(raw: str) -> float:
        try:
            seconds = float(raw)
        except ValueError:
            seconds = math.nan
        if not 0 <= seconds <= upper or math.isinf(seconds):  # NaN fails both comparisons
            usage_error("scheduler", f"{flag} (env {variable}): {raw!r} is not a number of seconds, {allowed}")
        return seconds

    return parse


# --gang-retry-backoff: 0 retries a timed-out gang at once. --feed-linger and --gang-hold are bounded: a
# longer wait would only delay pods.
retry_backoff_of = bounded_seconds("--gang-retry-backoff", "PHALANX_GANG_RETRY_BACKOFF")
linger_of = bounded_seconds("--feed-linger", "PHALANX_FEED_LINGER", 1.0)
gang_hold_of = bounded_seconds("--gang-hold", "PHALANX_GANG_HOLD", 5.0)
