"""`specdeploy run`: the operator (kopf) against the current cluster."""

from __future__ import annotations

import argparse
from typing import Any

from specdeploy.cli.common import EXIT_VALID, OUTPUTS, UsageError
from specdeploy.controller import LOG_FORMATS

def add_run(sub: Any) -> None:
    parser = sub.add_parser("run", help="run the operator (kopf) against the current cluster",
                            description="Run the operator: watch SpeculativeDeployments, judge and plan each, and apply "
                                        "its Deployment or LeaderWorkerSet, Service and PodDisruptionBudget. Uses the "
                                        "in-cluster service account, else $KUBECONFIG.")
    parser.add_argument("-n", "--namespace", action="append", default=[], help="namespace to watch (repeatable)")
    parser.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace")
    parser.add_argument("--liveness", default=None, help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz")
    parser.add_argument("--log-format", choices=LOG_FORMATS, default=None,
                        help="operator log lines, at INFO: text, or json (one object per line, with the object's "
                             "namespace and name). Default: $SPECDEPLOY_LOG_FORMAT (the chart's logFormat), else text")
    parser.add_argument("-o", "--output", choices=OUTPUTS, default="text", help="format of a start-up error (see --log-format for the logs)")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from specdeploy.controller.process.main import run

    try:
        run(namespaces=args.namespace, all_namespaces=args.all_namespaces, liveness=args.liveness, log_format=args.log_format)
    except ValueError as exc:
        raise UsageError("", str(exc)) from None
    return EXIT_VALID
