"""Entry point of the ``sparkmq`` command (console script and ``python -m sparkmq``).

Each subcommand lives in its own module with ``register(subcommands)``, which adds its
parser and sets ``run`` (``args -> exit code``) as the parser default.

Example::

    $ sparkmq --version
    sparkmq 0.1.0
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import sparkmq
from sparkmq.cli import (
    admin_command,
    broker_command,
    completion_command,
    controller_command,
    dashboard_command,
    dev_command,
    doctor_command,
    namesrv_command,
    proxy_command,
    pyspark_bytecode_command,
)

SUBCOMMAND_MODULES = (
    namesrv_command,
    broker_command,
    controller_command,
    dev_command,
    admin_command,
    dashboard_command,
    proxy_command,
    doctor_command,
    completion_command,
    pyspark_bytecode_command,
)


def run_version(args: argparse.Namespace) -> int:
    """Print the installed sparkmq version on stdout."""
    sys.stdout.write(f"{sparkmq.__version__}\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser with one sub-parser per subcommand."""
    parser = argparse.ArgumentParser(
        prog="sparkmq", description="RocketMQ's design rebuilt in Python, native to Spark."
    )
    parser.add_argument("--log-level", default="INFO", help="logging level (DEBUG, INFO, WARNING, ...)")
    parser.add_argument("--version", action="version", version=f"sparkmq {sparkmq.__version__}")
    subcommands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    subcommands.add_parser("version", help="print the sparkmq version and exit").set_defaults(run=run_version)
    for module in SUBCOMMAND_MODULES:
        module.register(subcommands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (``sys.argv[1:]`` when ``None``), run the subcommand, return its exit code."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # reported by the innermost command's parser, so its usage is the one shown
        getattr(args, "own_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return int(args.run(args))
