"""The `specdeploy` command: one module per subcommand (validate, plan, local_preflight for
`preflight`, advise, crd, run), `common` what they share, `entry` the parser and `main`."""

from specdeploy.cli.entry import _parser, main

__all__ = ["_parser", "main"]
