"""`phalanx explain`: why each gang waits, and what would let it run.

  phalanx explain [GANG] [--kubeconfig PATH] [--context NAME] [-n NAMESPACE | -A] [--scheduler-name NAME]
                  [-o text|json|yaml]
  phalanx explain [GANG] --report REPORT.json [-f WORKLOAD.yaml ...] [-o text|json|yaml]

Exit codes: 0 (whether or not gangs wait), 1 when the GANG asked for is not found, 2 when the cluster or
the report cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from phalanx.arguments import duration_arg
from phalanx.config import env
from phalanx.model.keys import DEFAULT_SCHEDULER_NAME

if TYPE_CHECKING:
    from phalanx.explain.explanation import Explanation
    from phalanx.explain.view import ClusterState

EXIT_NOT_FOUND = 1
EXIT_BAD_INPUT = 2


def add_explain_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "explain",
        help="why gangs wait, and what would let them run (a cluster or a simulation report)",
        description="For every gang with pods waiting: bound and minimum, since when it waits and when it times "
        "out, the scheduler's last reason, which resource is short on which nodes, which nodes its "
        "pods may not use and why, and which gangs or jobs hold the capacity and when they end. Reads "
        "only: nothing is written to the cluster.",
    )
    p.add_argument(
        "gang", nargs="?", metavar="GANG", help="explain only this gang (NAME or NAMESPACE/NAME), whatever its state"
    )
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else in-cluster)")
    p.add_argument("--context", help="kubeconfig context (default: the current one)")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", help="only gangs of this namespace (capacity still counts every pod)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="gangs of every namespace (the default)")
    p.add_argument(
        "--scheduler-name",
        default=env("SCHEDULER_NAME", DEFAULT_SCHEDULER_NAME),
        help="spec.schedulerName of Phalanx's pods, as the services are run "
        f"(default {DEFAULT_SCHEDULER_NAME}; env PHALANX_SCHEDULER_NAME)",
    )
    p.add_argument(
        "--default-wait",
        type=duration_arg,
        default=env("DEFAULT_WAIT", "600"),
        metavar="DURATION",
        help="the scheduler's wait for gangs that declare none (default 600s; env PHALANX_DEFAULT_WAIT)",
    )
    p.add_argument(
        "--profile",
        default=env("PROFILE", "") or None,
        help="the scheduler's profile YAML, if it runs one (env PHALANX_PROFILE)",
    )
    p.add_argument("--report", metavar="REPORT.json", help="explain a simulation report instead of a cluster")
    p.add_argument(
        "-f",
        "--workload",
        action="append",
        default=[],
        metavar="FILE",
        help="with --report: the workload it simulated (repeatable), for node capacity and pod requests",
    )
    p.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text")
    p.set_defaults(func=run_explain)


def run_explain(args: argparse.Namespace) -> int:
    from phalanx.explain.analysis import explain, select
    from phalanx.explain.view import SourceError
    from phalanx.framework.profile import ProfileError, load_profile
    from phalanx.plugins.registry import in_tree_framework

    if args.workload and not args.report:
        return _fail("-f/--workload goes with --report (a cluster has its own nodes and pods)")
    if args.report and (args.kubeconfig or args.context):
        return _fail("--report explains a simulation: --kubeconfig and --context do not apply")
    try:
        framework = in_tree_framework(load_profile(args.profile))
        state = _read(args)
    except (SourceError, ProfileError) as exc:
        return _fail(str(exc))
    namespace = args.namespace
    wanted = args.gang
    if wanted and "/" in wanted and namespace and not wanted.startswith(f"{namespace}/"):
        return _fail(f"gang {wanted} is not in namespace {namespace}")
    gangs = select(state, wanted, namespace)
    if wanted and not gangs:
        where = f"namespace {namespace}" if namespace else "any namespace"
        print(f"phalanx explain: no gang {wanted} of scheduler {state.scheduler_name!r} in {where}", file=sys.stderr)
        return EXIT_NOT_FOUND
    print(_render(explain(state, gangs, framework), args.output), end="")
    return 0


def _read(args: argparse.Namespace) -> ClusterState:
    # argparse runs `type` on a string default too: default_wait is seconds either way.
    if args.report:
        from phalanx.explain.report import read_report

        return read_report(args.report, args.workload, args.scheduler_name, args.default_wait)
    from phalanx.explain.cluster import api_client, read_cluster

    api, context = api_client(args.kubeconfig, args.context)
    try:
        return read_cluster(api, context, args.namespace, args.scheduler_name, args.default_wait)
    finally:
        api.close()


def _render(explanation: Explanation, output: str) -> str:
    from phalanx.explain.schema import document
    from phalanx.explain.text import render

    if output == "json":
        return json.dumps(document(explanation), indent=2) + "\n"
    if output == "yaml":
        import yaml

        return str(yaml.safe_dump(document(explanation), sort_keys=False, allow_unicode=True))
    return render(explanation)


def _fail(message: str) -> int:
    print(f"phalanx explain: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT
