"""``sparkmq pyspark-bytecode enable|disable|status``: the opt-in ``.pth`` of sparkmq_compiled_pyspark.

Spark puts ``pyspark.zip`` first on every Python worker's path, and a zip holds no bytecode, so
each fresh worker compiles what it imports (0.8-1.3 s of CPU per process). ``enable`` writes a
``.pth`` into this interpreter's site-packages that drops that zip when the same pyspark is
installed; it runs at the start of every interpreter of the environment, hence opt-in. Example::

    $ sparkmq pyspark-bytecode enable
    enabled: .../site-packages/sparkmq-compiled-pyspark.pth
"""

from __future__ import annotations

import argparse
import sys
import sysconfig

import sparkmq_compiled_pyspark as compiled


def register(parser: argparse.ArgumentParser) -> None:
    """Add the ``pyspark-bytecode`` subcommand's options to its ``parser``."""
    parser.add_argument("action", choices=("enable", "disable", "status"))
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    site = sysconfig.get_path("purelib")
    if args.action == "enable":
        sys.stdout.write(f"enabled: {compiled.enable(site)}\n")
    elif args.action == "disable":
        removed = compiled.disable(site)
        sys.stdout.write(f"{'disabled' if removed else 'was not enabled'}: {site}/{compiled.PTH_NAME}\n")
    else:
        sys.stdout.write(f"{'enabled' if compiled.enabled(site) else 'disabled'}: {site}/{compiled.PTH_NAME}\n")
    return 0
