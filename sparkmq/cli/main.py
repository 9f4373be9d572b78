"""Entry point of the ``sparkmq`` command (console script and ``python -m sparkmq``).

Example::

    $ sparkmq version
    0.1.0
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import sparkmq


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser with one sub-parser per subcommand."""
    parser = argparse.ArgumentParser(
        prog="sparkmq",
        description="RocketMQ's design rebuilt in Python, native to Spark.",
    )
    subcommands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    subcommands.add_parser("version", help="print the sparkmq version and exit")
    return parser


def run_version() -> int:
    """Print the installed sparkmq version on stdout."""
    sys.stdout.write(f"{sparkmq.__version__}\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (``sys.argv[1:]`` when ``None``), run the subcommand, return its exit code.

    Example::

        >>> main(["version"])  # doctest: +SKIP
        0.1.0
        0
    """
    args = build_parser().parse_args(argv)
    if args.command == "version":
        return run_version()
    raise AssertionError(f"subcommand {args.command!r} has no handler")
