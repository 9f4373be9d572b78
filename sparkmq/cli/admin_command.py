"""``sparkmq admin COMMAND [options]``: mqadmin over the remoting protocol.

Example::

    $ sparkmq admin updateTopic -n 127.0.0.1:9876 -c DefaultCluster -t orders
    create topic to 127.0.0.1:10911 success.
    TopicConfig [topicName=orders, readQueueNums=8, writeQueueNums=8, perm=RW-, ...]
    $ sparkmq admin consumerProgress -n 127.0.0.1:9876 -g billing

A bad option prints the command's usage on stderr and exits 2; a failed call (an unreachable
NameServer, a broker's refusal) prints ``sparkmq admin <command>: <reason>`` and exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from sparkmq.cli.admin_commands import COMMANDS
from sparkmq.client.admin_ext import AdminExt
from sparkmq.errors import SparkmqError

NAMESRV_ENV = "NAMESRV_ADDR"  # mqadmin's default for -n


def register(subcommands: Any) -> None:
    """Add ``admin`` with one sub-parser per mqadmin command."""
    parser = subcommands.add_parser("admin", help="mqadmin's commands (updateTopic, consumerProgress, ...)")
    commands = parser.add_subparsers(dest="admin_command", metavar="ADMIN_COMMAND", required=True)
    for name, (description, options, _run, defaults) in COMMANDS.items():
        sub = commands.add_parser(name, help=description, description=description)
        sub.set_defaults(own_parser=sub)
        for opt in options:
            kwargs: dict[str, Any] = {"dest": opt.long, "help": opt.help, "required": opt.required}
            if opt.value:
                kwargs["default"] = defaults.get(opt.long)
                kwargs["metavar"] = opt.long
            else:
                kwargs["action"] = "store_true"
            sub.add_argument(f"-{opt.short}", f"--{opt.long}", **kwargs)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    namesrv = getattr(args, "namesrvAddr", None) or os.environ.get(NAMESRV_ENV)
    if not namesrv:
        sys.stderr.write(f"sparkmq admin {args.admin_command}: no NameServer: give -n host:port or set {NAMESRV_ENV}\n")
        return 1
    try:
        asyncio.run(_run(args, namesrv))
    except SparkmqError as exc:
        sys.stderr.write(f"sparkmq admin {args.admin_command}: {exc.remark}\n")
        return 1
    return 0


async def _run(args: argparse.Namespace, namesrv: str) -> None:
    command = COMMANDS[args.admin_command][2]
    async with AdminExt(namesrv) as admin:
        await command(admin, args, sys.stdout)
