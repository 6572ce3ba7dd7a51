"""phalanx-controller: runs PhalanxJobs (seed 001's Arranger jobs): creates each job's leader, workers,
headless Service and gang PodGroup, and takes the job through its stages (phalanx.jobs)."""

from __future__ import annotations

import argparse
import logging

from phalanx.config import env_flag, kubeconfig_arg, serve_metrics_of, setup_logging
from phalanx.gc_tuning import freeze_heap
from phalanx.jobs.controller import JobController
from phalanx.jobs.objects import DEFAULT_PRIORITY_CLASS_PREFIX
from phalanx.lifecycle import exit_with_parent, wait_for_stop_signal
from phalanx.model.keys import DEFAULT_SCHEDULER_NAME
from phalanx.telemetry.tracing import setup_tracing
from phalanx.version import package_version

log = logging.getLogger("phalanx_controller")

METRICS_PORT = 9094


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="phalanx-controller", description=__doc__)
    p.add_argument("--version", action="version", version=f"phalanx-controller {package_version()}")
    env_flag(p, "--log-level", "PHALANX_LOG_LEVEL", "INFO", "DEBUG, INFO, WARNING or ERROR")
    env_flag(
        p,
        "--metrics-listen",
        "PHALANX_METRICS_LISTEN",
        f"0.0.0.0:{METRICS_PORT}",
        "address of the Prometheus /metrics endpoint (plain HTTP, read-only); empty or 'off' turns it off",
    )
    kubeconfig_arg(p)
    env_flag(
        p,
        "--scheduler-name",
        "PHALANX_SCHEDULER_NAME",
        DEFAULT_SCHEDULER_NAME,
        "schedulerName given to job pods whose template names none",
    )
    env_flag(
        p,
        "--namespace",
        "PHALANX_JOBS_NAMESPACE",
        "",
        "run the PhalanxJobs of this namespace only",
        shown="empty: every namespace",
    )
    env_flag(
        p,
        "--priority-class-prefix",
        "PHALANX_PRIORITY_CLASS_PREFIX",
        DEFAULT_PRIORITY_CLASS_PREFIX,
        "a job of spec.priority n gets the PriorityClass <prefix><n> (the chart installs 1 to 10)",
    )
    env_flag(
        p,
        "--resync",
        "PHALANX_RESYNC",
        "30",
        "seconds between reconciles of every job even without an event",
        parse=float,
        type=float,
    )
    return p


def build(args: argparse.Namespace) -> JobController:
    from phalanx.kube.client import api_client

    return JobController(
        api_client(args.kubeconfig),
        scheduler_name=args.scheduler_name,
        namespace=args.namespace,
        priority_class_prefix=args.priority_class_prefix,
        resync=args.resync,
    )


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    exit_with_parent()
    setup_logging(args.log_level)
    setup_tracing("phalanx-controller")
    metrics = serve_metrics_of(args, "controller")
    controller = build(args).start()
    freeze_heap()  # started: what it holds now lives as long as the process
    log.info(
        "phalanx-controller %s: watching PhalanxJobs%s",
        package_version(),
        f" in {args.namespace}" if args.namespace else "",
    )
    log.info("signal %d, stopping", wait_for_stop_signal())
    controller.close()
    if metrics is not None:
        metrics.stop()


if __name__ == "__main__":
    main()
