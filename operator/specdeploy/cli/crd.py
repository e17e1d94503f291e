"""`specdeploy crd`: the CustomResourceDefinition generated from the spec models."""

from __future__ import annotations

from typing import Any

import argparse

from specdeploy.cli.common import EXIT_VALID, OUTPUTS, dump_json


def add_crd(sub: Any) -> None:
    parser = sub.add_parser("crd", help="print the SpeculativeDeployment CustomResourceDefinition",
                            description="Print the CustomResourceDefinition generated from the spec models "
                                        "(what crds/ and the chart ship): `specdeploy crd | kubectl apply -f -`.")
    parser.add_argument("-o", "--output", choices=OUTPUTS, default="yaml", help="yaml (default; text is the same) or json")
    parser.set_defaults(func=_crd)


def _crd(args: argparse.Namespace) -> int:
    from specdeploy.api.crd import crd, crd_yaml

    print(dump_json(crd()) if args.output == "json" else crd_yaml(), end="\n" if args.output == "json" else "")
    return EXIT_VALID
