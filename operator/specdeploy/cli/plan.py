"""`specdeploy plan -f`: every SpeculativeDeployment in a YAML stream, judged, with its manifests."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from specdeploy.cli.common import OUTPUTS, dump_yaml, emit, findings_text, hf_token, hub_local_only, plan_text, read_stream, stream_arguments


def add_plan(sub: Any) -> None:
    parser = sub.add_parser(
        "plan", help="judge every SpeculativeDeployment in a YAML stream and print its manifests",
        description="Judge every SpeculativeDeployment in a YAML stream (a file, or '-' for stdin, e.g. "
                    "`kustomize build . | specdeploy plan -f -`) as the API server and then the operator would, "
                    "reading configMapRef configs from ConfigMaps in the same stream. Prints one report and, "
                    "for the valid ones, the manifests the operator would apply. Exit 1 if any is invalid.")
    stream_arguments(parser)
    parser.add_argument("-o", "--output", choices=OUTPUTS, default="yaml",
                        help="yaml (default): the report as comments, then the manifests (pipe to kubectl apply); json: both as one object; text: the report alone")
    parser.set_defaults(func=_plan)


def _plan(args: argparse.Namespace) -> int:
    from specdeploy.stream import plan_stream

    text, source = read_stream(args.filename)
    report = plan_stream(text, source, namespace=args.namespace, hf_token=hf_token(), hub_local_only=hub_local_only)
    data = report.to_dict()
    for result in report.results:
        for finding in result.unjudged:
            print(f"specdeploy: {result.namespace}/{result.name}: {finding.field}: {finding.message}", file=sys.stderr)
    if args.output == "yaml":
        print("\n".join(f"# {line}" for line in dump_yaml({**data, "results": [
            {k: v for k, v in r.items() if k != "manifests"} for r in data["results"]]}).splitlines()))
        manifests = [m for r in data["results"] for m in r["manifests"]]
        if manifests:
            import yaml

            print(yaml.safe_dump_all(manifests, sort_keys=False), end="")
    else:
        def text() -> str:
            lines = []
            for r in data["results"]:
                lines.append(f"{r['namespace']}/{r['name']}: {r['verdict'].upper()}")
                lines += findings_text(r["findings"])
                lines += plan_text(r["plan"], "  ")
            lines += [f"skipped {s}" for s in data["skipped"]]
            lines.append(f"{'OK' if data['ok'] else 'NOT OK'}: {data['summary']}")
            return "\n".join(lines) + "\n"

        emit(args.output, data, text)
    return report.exit_code
