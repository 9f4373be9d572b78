"""Entry point of the ``sparkmq`` command (console script and ``python -m sparkmq``).

Each subcommand lives in its own module with ``register(parser)``, which adds its options to
its sub-parser and sets ``run`` (``args -> exit code``) as the parser default. Only the module
of the subcommand that runs is imported: a broker or NameServer process does not pay for the
admin commands, the dashboard's web stack or the controller.

Example::

    $ sparkmq --version
    sparkmq 0.1.0
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Collection, Sequence

import sparkmq

#: Every subcommand: its module under ``sparkmq.cli`` and its one-line help, in ``--help`` order.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "namesrv": ("namesrv_command", "run a NameServer (brokers register here; clients look up routes)"),
    "broker": ("broker_command", "run a broker (RocketMQ remoting protocol)"),
    "controller": ("controller_command", "run a controller (automatic failover of brokers in controller mode)"),
    "dev": ("dev_command", "run a NameServer and a broker in one process"),
    "admin": ("admin_command", "mqadmin's commands (updateTopic, consumerProgress, ...)"),
    "dashboard": ("dashboard_command", "web dashboard: cluster, topics, consumer lag, messages"),
    "proxy": ("proxy_command", "serve RocketMQ 5 (gRPC) clients in front of the broker groups of a NameServer"),
    "doctor": ("doctor_command", "check Java, native extensions, ports, disk and clock"),
    "completion": ("completion_command", "print a shell completion script (bash; zsh via bashcompinit)"),
    "pyspark-bytecode": (
        "pyspark_bytecode_command",
        "opt in (or out) to Spark workers importing pyspark's bytecode, not its zip",
    ),
}


def run_version(args: argparse.Namespace) -> int:
    """Print the installed sparkmq version on stdout."""
    sys.stdout.write(f"{sparkmq.__version__}\n")
    return 0


def build_parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser with one sub-parser per subcommand.

    Only the subcommands in ``commands`` (all when ``None``) import their module and get their
    options; the others are named with their help and accept anything, so ``--help`` lists them all.
    """
    parser = argparse.ArgumentParser(
        prog="sparkmq", description="RocketMQ's design rebuilt in Python, native to Spark."
    )
    parser.add_argument("--log-level", default="INFO", help="logging level (DEBUG, INFO, WARNING, ...)")
    parser.add_argument("--version", action="version", version=f"sparkmq {sparkmq.__version__}")
    subcommands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    subcommands.add_parser("version", help="print the sparkmq version and exit").set_defaults(run=run_version)
    for name, (module, help_text) in SUBCOMMANDS.items():
        full = commands is None or name in commands
        sub = subcommands.add_parser(name, help=help_text, add_help=full)
        if full:
            importlib.import_module(f"sparkmq.cli.{module}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (``sys.argv[1:]`` when ``None``), run the subcommand, return its exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    command = build_parser(()).parse_known_args(argv)[0].command  # which module to import, by argparse's rules
    parser = build_parser((command,))
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # reported by the innermost command's parser, so its usage is the one shown
        getattr(args, "own_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return int(args.run(args))
