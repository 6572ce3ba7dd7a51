"""phalanx-scheduler: filters and scores pods, accumulates gangs in Redis, hands satisfied gangs to the binder.

Several replicas may run (--leader-elect, on by default against Kubernetes): they elect a leader on a Lease;
only the leader runs the cluster feed and the scheduling loop, and its writes to Redis carry its fencing
term. A standby serves health and waits; it takes over when the leader's Lease expires (or is released),
and a leader that loses its Lease exits.
"""

# The entry point stays light: against Kubernetes it starts the cluster feed's first lists of the API server
# before importing the scheduler itself (service.py: numpy, the framework, Redis, the gRPC services), so the
# API server answers them while this process imports and builds, and campaigns for the Lease.

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from phalanx.config import setup_logging
from phalanx.lifecycle import exit_with_parent
from phalanx_scheduler import flags

if TYPE_CHECKING:
    from phalanx.cluster.feed_source import EarlyLists


def parser() -> argparse.ArgumentParser:
    """The service's flags (flags.py), described by this module's docstring."""
    return flags.parser(__doc__ or "")


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    exit_with_parent()
    setup_logging(args.log_level)
    early = start_early_lists(args)
    from phalanx_scheduler.service import run

    run(args, early)


def start_early_lists(args: argparse.Namespace, *, freeze: bool = True) -> EarlyLists | None:
    """The cluster feed's watches, started now (Kubernetes mode on the wall clock); None otherwise, or when
    the kubeconfig cannot be loaded (the service then says why, naming the flag: config.check_kubeconfig).
    `freeze`: the service process (not a test running replicas in-process) pauses garbage collection until
    the lists are applied, and freezes what they made (gc_tuning.pause_until_frozen).

    If the process dies while they list, nothing was applied anywhere: the lists are only in its memory.
    A replica that finds another leading drops them (EarlyLists.drop)."""
    if args.backend != "kubernetes" or args.clock != "real":
        return None
    from phalanx.cluster.feed_source import EarlyLists, FeedSource, collections
    from phalanx.gc_tuning import pause_until_frozen
    from phalanx.kube.connection import connection_of

    try:
        connection = connection_of(args)
    except Exception:  # reported by the service's own check, with the flag's name
        return None
    # No collection while the first lists are decoded and until they are applied (gc_tuning; at most
    # --dependency-timeout), as when the feed starts them itself.
    after = pause_until_frozen(args.dependency_timeout) if freeze else None
    return EarlyLists(FeedSource(collections(connection), args.scheduler_name).start(), after_first_lists=after)


if __name__ == "__main__":
    main()
